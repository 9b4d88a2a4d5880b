"""The coordinator's ports: what the shell needs from the outside world.

Adapters: ``storage.sql.SqlJournal`` (SQLite and PostgreSQL) and
``storage.fake.FakeJournal`` (in memory); all three pass the same contract
tests in ``tests/coordinator/storage``.

Error tree (every adapter raises only these, and fails closed: a storage
failure changes nothing and surfaces, it is never swallowed)::

    JournalError
    ├── JournalUnavailable      the database could not be read or written
    ├── SchemaTooNew            the journal was written by newer code
    ├── JournalNotMigrated      no schema, or an older one: run `python -m coordinator_svc migrate`
    ├── IdempotencyKeyReused    same principal + key, different request digest
    └── WriteConflict           the compare-and-set matched no row
        ├── StaleVersion        same fencing token, newer version: reload, decide again
        └── LeaseLost           the fencing token moved on: send nothing more (§5)

Two more are programming errors, not journal failures (ValueError, so a
caller that retries JournalError never retries them); both change nothing::

    core.edges.IllegalTransition   a state change not in the §2 table (C10: terminal is final)
    InvalidWrite                   a write that breaks a journal rule (see storage.rules)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from coordinator_svc.core import commands
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    PreflightAnswer,
    PreflightFailed,
)
from coordinator_svc.core.membership import MemberRefusal, MembershipRecord, RunnerRoster
from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
    TurnKind,
)
from coordinator_svc.core.operator import (
    DrainRecord,
    OperationFilter,
    OperatorNotes,
    RequeueRecord,
    VerdictRecord,
)
from turnwire.runner.v1 import runner_pb2


class JournalError(Exception):
    """Base of every journal failure."""


class JournalUnavailable(JournalError):
    """The database could not be read or written; nothing changed."""


class SchemaTooNew(JournalError):
    """The journal's schema revision is unknown to this code."""


class JournalNotMigrated(JournalError):
    """The journal has no schema, or an older one than this code needs."""


class InvalidWrite(ValueError):
    """The caller asked for a write that breaks a journal rule; nothing was written.

    Examples: a naive datetime, a changed envelope, an event that does not
    describe the change, an attempt number that is not the next one.
    """


class MembershipRefused(InvalidWrite):
    """A membership write the rules refuse (PROTOCOL.md §11 M2, M3); nothing was written.

    ``member`` is the name's latest record (the live member a conflicting add
    met, or the one a removal would have ended); ``turns`` the turns bound to
    it when that is the reason.
    """

    def __init__(
        self,
        refusal: MemberRefusal,
        runner: str,
        *,
        member: MembershipRecord | None = None,
        turns: int = 0,
    ) -> None:
        super().__init__(f"{refusal}: {runner}")
        self.refusal = refusal
        self.runner = runner
        self.member = member
        self.turns = turns


class IdempotencyKeyReused(JournalError):
    """The principal used this idempotency key with a different request."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"idempotency key already used for {operation_id}")
        self.operation_id = operation_id


class WriteConflict(JournalError):
    """A compare-and-set write matched no row."""


class StaleVersion(WriteConflict):
    """Another writer changed the row first (same fencing token)."""


class LeaseLost(WriteConflict):
    """The fencing token changed: another replica owns the operation."""


@dataclass(frozen=True)
class PageCursor:
    """Where a listing resumes: strictly after this (created_at, operation_id)."""

    created_at: datetime
    operation_id: str


class Journal(Protocol):
    """The durable journal (C1, C4, C10, C12, C13, §5)."""

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        """Insert a new operation and its first event in one transaction (C1).

        The first event must go from None to ``operation.state``; it is stored
        with sequence 1 and the returned record has ``last_event_sequence`` 1.

        If (principal, idempotency_key_digest) already exists: return the
        existing record and True when its request_digest matches, else raise
        IdempotencyKeyReused. Concurrent submits with one key make one row.
        """
        ...

    async def get(self, operation_id: str) -> OperationRecord | None: ...

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        """The operation only if it belongs to ``principal`` (§7: else None)."""
        ...

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        """The operation the principal submitted with this key, if any (a quota
        refusal first looks here: a retried submit is never refused)."""
        ...

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        """Ordered by (created_at, operation_id); ``states`` empty means all."""
        ...

    async def commit(self, change: Change) -> OperationRecord:
        """Apply one Change atomically as a compare-and-set (C4, C13, §5).

        Checks the edge is legal (core.edges) when the state changes, writes
        the row with version + 1, appends the event with the next sequence,
        inserts/updates attempt rows. Returns the stored record.
        Raises StaleVersion / LeaseLost / IllegalTransition / JournalUnavailable.

        The journal assigns ``version`` and the event's ``sequence`` (the
        caller's values are ignored); the full rule list, e.g. that
        ``after.attempt_count`` must count ``new_attempt``, is in
        ``coordinator_svc.storage.rules``; breaking one raises InvalidWrite.
        """
        ...

    async def events(
        self, operation_id: str, after_sequence: int, limit: int
    ) -> list[EventRecord]: ...

    async def attempts(self, operation_id: str) -> list[AttemptRecord]: ...

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        """Non-terminal operations whose next_action_at is unset or <= now,
        plus terminal ones not yet released; oldest first (created_at,
        operation_id). Lease-blind: a replica claims before it acts.
        ``queued=False`` leaves QUEUED operations out: the scheduler holds
        those in memory, and a backlog of them must not hide the rest."""
        ...

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]: ...

    async def bound_to(
        self, runner: str, state: OpState, limit: int, *, other_than: str | None = None
    ) -> list[OperationRecord]:
        """Operations in ``state`` bound to ``runner``, oldest first; with
        ``other_than``, only those bound to another incarnation of it (or none).
        Filtered by the database: a watch's first contact after a restart with
        10,000 turns in flight reads none of them (issue 27)."""
        ...

    @property
    def commits(self) -> int:
        """Write transactions committed since start (for bench/)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class LeasingJournal(Journal, Protocol):
    """A journal that also takes §5 leases: what replicas sharing one journal
    need (issue 12; ``dispatcher.ownership`` drives it). A single coordinator
    on its own journal takes none, so the engine's ``Journal`` port stays
    without them.
    """

    async def renew_leases(self, owner: str, now: datetime, ttl_seconds: float) -> int:
        """Push every lease ``owner`` holds on an open operation (not terminal,
        or a Release owed) to ``now + ttl``; returns how many. One write;
        ``version`` does not move (no write in flight is disturbed). A lapsed
        lease still naming ``owner`` is renewed too: nobody adopted it yet (a
        claim renames the owner, and a claim racing this write is ordered by
        the row lock: one of them changes nothing)."""
        ...

    async def orphans(self, owner: str, now: datetime, limit: int) -> list[OperationRecord]:
        """Open operations nobody but ``owner`` could claim now: no owner, or
        another owner's lapsed lease; oldest first."""
        ...

    async def expire_leases(self, owner_prefix: str, keep: str, now: datetime) -> int:
        """End now every live lease whose owner starts with ``owner_prefix``,
        except ``keep``'s; returns how many. A clean stop hands its operations
        over at once; a restarted replica ends its previous process's."""
        ...

    async def live_leases(self, owner_prefix: str, keep: str, now: datetime) -> dict[str, datetime]:
        """Each owner starting with ``owner_prefix`` (but ``keep``) that holds a
        live lease on an open operation at ``now``, with the latest expiry among
        its leases. A replica starting under a name reads it again and again to tell a
        live earlier process of that name (its expiries move on) from a dead
        one (§5 O6)."""
        ...

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        """Take or renew the lease (§5): succeeds if unleased, expired, or
        already ours. Taking over someone else's expired lease increments
        fencing_token. Returns None if another owner holds a live lease.
        Uses SELECT … FOR UPDATE SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE
        on SQLite, so on PostgreSQL None also means another transaction holds
        the row right now (try again later). Also None for an unknown id.
        A claim is a write: the returned record has a new ``version``. It
        appends no event; treating a taken-over DISPATCHING operation as
        DISPATCH_UNKNOWN (§5, C12) is the caller's commit."""
        ...


@runtime_checkable
class AdminJournal(Protocol):
    """What the operator's API needs from the journal (PROTOCOL.md §10, issue 13):
    listing across principals, and the operator's records kept beside the
    operations (verdicts, requeue links, drains), never in them. Adapters:
    ``storage.admin_sql.SqlAdmin`` (mixed into SqlJournal),
    ``storage.admin_fake.FakeAdmin`` (into FakeJournal); CachedJournal passes
    through. Cases: ``turnwire.testing.journal_cases_admin``.
    """

    async def list_operations(
        self, where: OperationFilter, limit: int, after: PageCursor | None
    ) -> list[OperationRecord]:
        """Every principal's operations matching ``where``, ordered by
        (created_at, operation_id), strictly after ``after``."""
        ...

    async def record_verdict(self, verdict: VerdictRecord) -> tuple[VerdictRecord, bool]:
        """V2/V3: store ``verdict`` as the operation's verdict unless it has one.
        Returns (the operation's verdict as stored, True if this call stored it).
        InvalidWrite (nothing stored) unless the operation exists, is terminal
        and its execution is UNKNOWN. Concurrent calls store one record."""
        ...

    async def verdicts(self, operation_id: str) -> list[VerdictRecord]:
        """Every verdict record of the operation, oldest first."""
        ...

    async def operator_notes(self, operation_ids: Sequence[str]) -> dict[str, OperatorNotes]:
        """Verdict and requeue links of each operation that has any (others absent)."""
        ...

    async def requeue(
        self, link: RequeueRecord, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        """V5/V6: store ``operation`` (as ``submit`` does) and ``link`` in one
        transaction. If the original was requeued already: (that operation, True),
        nothing stored. InvalidWrite (nothing stored) unless the original exists,
        is terminal, and is NOT_STARTED or has a NOT_EXECUTED verdict."""
        ...

    async def drain(self, record: DrainRecord) -> tuple[DrainRecord, bool]:
        """V8: mark the runner drained unless it is. Returns (the drain as stored,
        True if this call stored it)."""
        ...

    async def undrain(self, runner: str) -> DrainRecord | None:
        """Remove the runner's drain; the removed record, or None if it had none."""
        ...

    async def drains(self) -> list[DrainRecord]:
        """Every drained runner, by name."""
        ...

    # --- runner membership (§11) ---

    async def add_runner(self, record: MembershipRecord) -> tuple[MembershipRecord, bool]:
        """M2: make ``record`` (an ADDED record; its sequence is ignored) the name's
        member unless it is one. Returns (the live member as stored, True if this
        call stored it): a live member with the same fields is a replay. A live
        member with other fields: MembershipRefused(RUNNER_CONFLICT), nothing
        stored. Concurrent adds of one name store one record."""
        ...

    async def remove_runner(
        self,
        runner: str,
        *,
        generation: int,
        by: str,
        reason: str,
        at: datetime,
        force: bool,
    ) -> tuple[MembershipRecord, bool]:
        """M3/M4: end the name's live member (of ``generation``; 0: whichever) and,
        in the same transaction, its drain. Returns (the REMOVED record, True if
        this call stored it); asking again for a removal already recorded is a
        replay. Without ``force`` the runner must be drained and have no bound
        turn (states in ``core.membership.BOUND_STATES``), read in the removal's
        own transaction. MembershipRefused (RUNNER_NOT_FOUND, RUNNER_NOT_DRAINED,
        RUNNER_HAS_TURNS), nothing stored, otherwise."""
        ...

    async def runner_roster(self) -> RunnerRoster:
        """M1/M5: every name's latest membership record and every drain, in one read."""
        ...

    async def bound_turns(self) -> dict[str, int]:
        """Non-terminal operations bound to each runner (BOUND_STATES), by name;
        runners with none are absent."""
        ...


@dataclass(frozen=True)
class RunnerInfo:
    """What GetRunnerInfo tells the coordinator: who the runner is now, and its pools."""

    incarnation_id: str
    store_id: str
    slot_sizes: dict[TurnKind, int]
    # The runner's Turnwire version (GetRunnerInfo.version); None: not asked (a fake).
    version: str | None = None
    # The executors it serves, by name (GetRunnerInfo.executors, C6b); None: not
    # said (a fake, or a runner from before R14).
    executors: tuple[str, ...] | None = None


class WatchCall(Protocol):
    """The part of a grpc.aio stream call the watch uses."""

    def __aiter__(self) -> AsyncIterator[runner_pb2.WatchOperationsResponse]: ...

    def cancel(self) -> bool: ...


class OutputCall(Protocol):
    """The part of a grpc.aio StreamOutput call the output relay uses (§12)."""

    def __aiter__(self) -> AsyncIterator[runner_pb2.StreamOutputResponse]: ...

    def cancel(self) -> bool: ...


class RunnerGateway(Protocol):
    """One runner as the dispatcher talks to it, replies already read as core
    events (C6-C9 applied to what came back): a definite refusal, an unknown
    outcome, an answer. Adapters: ``dispatcher.runner_client.RunnerClient``
    (gRPC) and, in tests, ``turnwire.testing.runner_gateway.InProcessRunner``; both pass
    ``tests/coordinator/dispatcher/test_gateway_contract.py``.

    Only ``info`` and ``watch`` raise (``grpc.aio.AioRpcError`` from the gRPC
    adapter); every other call answers with an event, whatever happened.
    """

    @property
    def name(self) -> str: ...

    async def statuses(
        self, asked: Sequence[tuple[str, int]]
    ) -> list[PreflightAnswer | PreflightFailed]:
        """Preflight (C2) for (operation_id, asked_attempt) pairs, in order."""
        ...

    async def dispatch(
        self,
        record: OperationRecord,
        command: commands.Dispatch,
        *,
        reply_hold: float = 0.0,
        releases: Sequence[tuple[str, commands.Release]] = (),
    ) -> DispatchAccepted | DispatchRefused | DispatchUnknown:
        """Send one attempt (C5). ``reply_hold``: seconds the runner may hold its
        reply for the turn to settle, so the reply carries the result;
        ``releases``: (operation_id, Release) owed to this runner, carried on it."""
        ...

    async def cancel(
        self, record: OperationRecord, command: commands.Cancel
    ) -> CancelAnswered | CancelFailed: ...

    async def release(self, operation_id: str, command: commands.Release) -> bool: ...

    async def info(self) -> RunnerInfo:
        """The runner's identity and writable/read-only pool sizes (GetRunnerInfo)."""
        ...

    def watch(self, after_sequence: int) -> WatchCall: ...

    async def close(self, grace: float | None = None) -> None:
        """Close the connection; with ``grace``, calls in flight get that long first."""
        ...


# A journal's submit (``Journal.submit``), handed to the dispatcher so it can
# queue a turn's first attempt with it (issue 10): returns (stored, replayed).
Submit = Callable[[OperationRecord, EventRecord], Awaitable[tuple[OperationRecord, bool]]]
