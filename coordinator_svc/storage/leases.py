"""§5 leases on a SQL journal: claim one operation, renew, find and hand off.

A replica owns an operation while the row names it (``lease_owner``) and the
lease has not expired (``lease_expires_at``); ``fencing_token`` moves on
whenever another owner takes it over (``rules.claimed``). Besides the
per-operation claim, a replica needs three set-wise writes and reads, each
one statement, so their cost does not grow with the calls a replica makes:

- ``renew_leases``: push back the expiry of every lease it holds (one
  UPDATE; the version does not move, so no write in flight is disturbed: the
  compare-and-set is on version and token, and every commit renews its own
  row anyway). A lapsed lease still naming the replica is renewed too: nobody
  adopted it (adoption renames the owner), and a claim racing the renewal
  reads the row under its lock (PostgreSQL re-checks the owner after the
  wait), so one of the two wins and the other changes nothing;
- ``orphans``: the open operations whose owner let its lease lapse (or that
  have none), for a replica to adopt (claim, then C12);
- ``expire_leases``: end leases now, at a clean stop (so peers adopt at once
  instead of waiting out the TTL) and at start for a replica's own previous
  process (same ``--replica-id``);
- ``live_leases``: the live leases of a name's other processes, latest expiry
  per owner: read at start, twice, to tell a live process of the same
  ``--replica-id`` (its expiries move on) from a dead one (§5 O6).

Owners are compared by prefix with ``substr``, never ``LIKE``: a replica name
may hold ``_``, which LIKE reads as a wildcard.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.ports import InvalidWrite
from coordinator_svc.storage import rules
from coordinator_svc.storage.statements import Dialect, Statements, terminal_list

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

Cursor = Any


class LeaseStatements:
    """The statements of this module, in one dialect."""

    def __init__(self, dialect: Dialect, select_operations: str) -> None:
        sql = dialect.sql
        terminal = terminal_list()
        open_ = f"(state NOT IN ({terminal}) OR NOT released)"
        self.renew = sql(
            "UPDATE operations SET lease_expires_at = :until"
            f" WHERE lease_owner = :owner AND {open_}"
        )
        self.orphans = sql(
            f"{select_operations} WHERE {open_} AND (lease_owner IS NULL OR"
            " (lease_owner <> :owner AND (lease_expires_at IS NULL OR lease_expires_at <= :now)))"
            " ORDER BY created_at, operation_id LIMIT :limit"
        )
        self.expire = sql(
            "UPDATE operations SET lease_expires_at = :now"
            " WHERE substr(lease_owner, 1, :prefix_length) = :prefix"
            " AND lease_owner <> :keep AND lease_expires_at > :now"
        )
        self.live = sql(
            "SELECT lease_owner, MAX(lease_expires_at) FROM operations"
            " WHERE substr(lease_owner, 1, :prefix_length) = :prefix"
            f" AND lease_owner <> :keep AND lease_expires_at > :now AND {open_}"
            " GROUP BY lease_owner"
        )


class SqlLeases:
    """The LeasingJournal half of ``sql.SqlJournal`` (mixed into it)."""

    _sql: Statements
    _leases: LeaseStatements

    # Provided by SqlJournal.
    _write: Callable[..., Awaitable[Any]]
    _call: Callable[..., Awaitable[Any]]
    _read: Callable[..., Awaitable[Any]]
    _operations: Callable[[str, dict[str, Any]], list[OperationRecord]]

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        now = rules.as_utc(now, "claim time")
        sql = self._sql

        def work(cursor: Cursor) -> tuple[OperationRecord | None, bool]:
            cursor.execute(sql.claim_read, {"operation_id": operation_id})
            row = cursor.fetchone()
            if row is None:
                return None, False
            current = sql.operation.decode(row)
            updated = rules.claimed(current, owner, now, ttl_seconds)
            if updated is None:
                return None, False
            expires = updated.lease_expires_at
            cursor.execute(
                sql.claim_write,
                {
                    "lease_owner": updated.lease_owner,
                    "lease_expires_at": None
                    if expires is None
                    else sql.dialect.encode_time(expires),
                    "fencing_token": updated.fencing_token,
                    "version": updated.version,
                    "operation_id": operation_id,
                    "where_version": current.version,
                },
            )
            if cursor.rowcount != 1:  # the lock above makes this unreachable; never assume
                return None, False
            return updated, True

        result: OperationRecord | None = await self._write(work)
        return result

    async def renew_leases(self, owner: str, now: datetime, ttl_seconds: float) -> int:
        rules.check_lease_request(owner, ttl_seconds)
        encode = self._sql.dialect.encode_time
        now = rules.as_utc(now, "renewal time")
        parameters = {"owner": owner, "until": encode(now + timedelta(seconds=ttl_seconds))}
        return await self._count(self._leases.renew, parameters)

    async def orphans(self, owner: str, now: datetime, limit: int) -> list[OperationRecord]:
        now = rules.as_utc(now, "orphan scan time")
        parameters = {
            "owner": owner,
            "now": self._sql.dialect.encode_time(now),
            "limit": max(limit, 0),
        }
        found: list[OperationRecord] = await self._call(
            self._operations, self._leases.orphans, parameters
        )
        return found

    async def expire_leases(self, owner_prefix: str, keep: str, now: datetime) -> int:
        if not owner_prefix:
            raise InvalidWrite("expire_leases needs a non-empty owner prefix")
        now = rules.as_utc(now, "expiry time")
        parameters = {
            "prefix": owner_prefix,
            "prefix_length": len(owner_prefix),
            "keep": keep,
            "now": self._sql.dialect.encode_time(now),
        }
        return await self._count(self._leases.expire, parameters)

    async def live_leases(self, owner_prefix: str, keep: str, now: datetime) -> dict[str, datetime]:
        now = rules.as_utc(now, "lease read time")
        dialect = self._sql.dialect
        parameters = {
            "prefix": owner_prefix,
            "prefix_length": len(owner_prefix),
            "keep": keep,
            "now": dialect.encode_time(now),
        }

        def work(cursor: Cursor) -> dict[str, datetime]:
            cursor.execute(self._leases.live, parameters)
            return {str(owner): dialect.decode_time(until) for owner, until in cursor.fetchall()}

        found: dict[str, datetime] = await self._read(work)
        return found

    async def _count(self, statement: str, parameters: dict[str, Any]) -> int:
        def work(cursor: Cursor) -> tuple[int, bool]:
            cursor.execute(statement, parameters)
            # Not counted in ``commits``: that figure is turns' writes (bench/
            # divides it by turns); lease upkeep is per replica, not per turn.
            return max(cursor.rowcount, 0), False

        changed: int = await self._write(work)
        return changed
