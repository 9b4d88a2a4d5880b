"""§5 ownership for a coordinator that shares its journal with other replicas.

A replica drives only operations whose row names it as ``lease_owner``. It
gets them by accepting them (the submit writes its lease) or by adopting them
(a claim: another owner's lease lapsed, the fencing token moves on, and C12's
``Restarted`` turns a DISPATCHING operation into DISPATCH_UNKNOWN, reconciled,
never blindly sent again). Every commit renews its own row; this keeper
renews the rest in one write every ``renew_every`` seconds and looks for
orphans to adopt.

Self-fencing. A replica may act only while its leases are *current*: the last
renewal that reached the journal began less than ``valid_share`` x TTL ago, on
this process's monotonic clock. A process that was paused (SIGSTOP, a long GC,
a frozen VM) or cut off from the journal wakes with its monotonic clock far
past that, so it writes and sends nothing until a renewal succeeds again; by
then any operation a peer adopted names the peer, and the fencing token on
every commit and every runner call refuses whatever the waking process still
had in flight (§5, R-rules on tokens). Operations nobody adopted stay its own:
renewing them is as if it had never paused.

Names. ``owner`` is ``<replica name>#<process tag>``: unique per process, so
two processes are never one owner. A replica's name (``--replica-id``, by
default the host's name) is kept across its restarts, so the previous
process of that name is taken to be gone once this one starts: its leases
end at start and its operations are adopted at once instead of after the
TTL. Unless it is not gone (§5 O6): two live processes given one name would
take each other's operations at every start (fenced, so never a duplicate,
but wasted work, over and over). So a start that finds live leases of its
name watches them for up to 0.8 TTL (about three renewal periods; after that
long without a renewal their holder acts on nothing, O4): a live process
renews (the expiries move on) and this one refuses to start
(ReplicaIdInUse); a dead one does not, and its leases end as before. A start
that finds none waits for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.ports import JournalError, JournalUnavailable, LeasingJournal

log = logging.getLogger("coordinator_svc.ownership")

DEFAULT_LEASE_TTL = 10.0
# Leases are treated as current for this share of the TTL after the renewal
# that began last reached the journal: the rest absorbs clock rate differences
# and the renewal's own time in flight.
VALID_SHARE = 0.8
ORPHAN_PAGE = 256
# §5 O6: a start that finds live leases of its own name watches them for the
# share of the TTL their holder's leases stay current after a renewal (O4): a
# process that renewed none in that long acts on nothing any more, so taking
# its operations costs no work twice. Read this many times (early out on a
# renewal seen, or on the leases gone).
JUDGE_SHARE = VALID_SHARE
JUDGE_READS = 8
REPLICA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class LeasesNotCurrent(JournalUnavailable):
    """This replica's leases were not renewed in time: it acts on nothing until
    a renewal reaches the journal again (a paused or partitioned replica)."""


class ReplicaIdInUse(JournalError):
    """Another live process runs under this ``--replica-id`` (its leases were
    renewed while this one started): this one does not start (§5 O6)."""


def check_replica_name(name: str) -> str:
    if not REPLICA_NAME.match(name):
        raise ValueError(
            f"replica id {name!r} must be 1-63 characters of letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class ReplicaSettings:
    """``name``: this replica's id, kept across its restarts and unique among
    the replicas running (a start ends the leases of every earlier process of
    that name); ``ttl``: lease length in seconds (a crashed replica's
    operations are adopted about one TTL later)."""

    name: str
    ttl: float = DEFAULT_LEASE_TTL

    def __post_init__(self) -> None:
        check_replica_name(self.name)
        if not self.ttl >= 1.0:
            raise ValueError(f"lease TTL must be at least 1 second, got {self.ttl}")

    @property
    def renew_every(self) -> float:
        return self.ttl / 4


class Ownership:
    """One replica's leases: who it is, whether it may act, renewal and orphans."""

    def __init__(
        self,
        journal: LeasingJournal,
        settings: ReplicaSettings,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._journal = journal
        self.settings = settings
        self.owner = f"{settings.name}#{secrets.token_hex(4)}"
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._valid_until = float("-inf")
        self._lapsed_logged = False
        self.renewals = 0
        self.adopted = 0

    @property
    def ttl(self) -> float:
        return self.settings.ttl

    def owns(self, record: OperationRecord) -> bool:
        return record.lease_owner == self.owner

    def current(self) -> bool:
        return self._monotonic() < self._valid_until

    def check_current(self) -> None:
        """Raise LeasesNotCurrent unless this replica may write and send now."""
        if not self.current():
            raise LeasesNotCurrent(
                f"replica {self.owner}: leases not renewed for over "
                f"{VALID_SHARE * self.ttl:.1f} s; acting on nothing until a renewal succeeds"
            )

    async def start(self) -> None:
        """End the leases of earlier processes of this name, then renew; refuse
        (ReplicaIdInUse) if one of them still runs (§5 O6)."""
        await self._refuse_if_name_in_use()
        ended = await self._journal.expire_leases(
            f"{self.settings.name}#", self.owner, self._clock()
        )
        if ended:
            log.info(
                "replica %s: ended %d lease(s) of an earlier process of this replica; "
                "adopting its operations now (if that process still runs, give each "
                "process its own --replica-id)",
                self.owner,
                ended,
            )
        if not await self.renew():
            raise JournalUnavailable(f"replica {self.owner}: could not take its first lease")
        log.info(
            "replica %s: leases of %.1f s, renewed every %.1f s",
            self.owner,
            self.ttl,
            self.settings.renew_every,
        )

    async def _refuse_if_name_in_use(self) -> None:
        """§5 O6: an earlier process of this name whose lease expiries move on
        while this one watches them is alive: raise ReplicaIdInUse, having
        written nothing. No live lease of the name: nothing to judge, no wait."""
        prefix = f"{self.settings.name}#"
        seen = await self._journal.live_leases(prefix, self.owner, self._clock())
        if not seen:
            return
        window = JUDGE_SHARE * self.ttl
        log.info(
            "replica %s: %s of replica id %r still hold(s) live leases; watching them "
            "for %.1f s: renewed means still running (this process then refuses to "
            "start), not renewed means gone (its operations are adopted)",
            self.owner,
            ", ".join(sorted(seen)),
            self.settings.name,
            window,
        )
        for _ in range(JUDGE_READS):
            await self._sleep(window / JUDGE_READS)
            now_seen = await self._journal.live_leases(prefix, self.owner, self._clock())
            renewed = sorted(
                owner
                for owner, until in now_seen.items()
                if owner not in seen or until > seen[owner]
            )
            if renewed:
                message = (
                    f"replica id {self.settings.name!r} is in use: {', '.join(renewed)} "
                    f"renewed its leases while this process ({self.owner}) started, so it "
                    "is running; not starting (two processes under one id would take each "
                    "other's operations at every start). Give each process its own "
                    "--replica-id, or stop the other process first"
                )
                log.error("%s", message)
                raise ReplicaIdInUse(message)
            if not now_seen:
                return  # handed off (a clean stop) or lapsed meanwhile: gone

    async def renew(self) -> bool:
        began = self._monotonic()
        was_current = self.current()
        try:
            await self._journal.renew_leases(self.owner, self._clock(), self.ttl)
        except JournalError as error:
            if was_current and not self._lapsed_logged:
                log.warning("replica %s: lease renewal failed: %s", self.owner, error)
            return False
        self._valid_until = began + VALID_SHARE * self.ttl
        self.renewals += 1
        if self._lapsed_logged:
            log.warning("replica %s: leases current again", self.owner)
            self._lapsed_logged = False
        return True

    def note_lapse(self) -> None:
        """Log once per lapse that this replica stopped acting (an operator line)."""
        if not self.current() and not self._lapsed_logged and self.renewals:
            self._lapsed_logged = True
            log.error(
                "replica %s: leases lapsed (paused, or cut off from the journal): "
                "writing and sending nothing; other replicas adopt its operations "
                "after %.1f s",
                self.owner,
                self.ttl,
            )

    async def orphans(self) -> list[OperationRecord]:
        return await self._journal.orphans(self.owner, self._clock(), ORPHAN_PAGE)

    async def claim(self, operation_id: str) -> OperationRecord | None:
        return await self._journal.claim(operation_id, self.owner, self._clock(), self.ttl)

    async def hand_off(self) -> None:
        """A clean stop: end this process's leases now so peers adopt at once."""
        try:
            ended = await self._journal.expire_leases(self.owner, "", self._clock())
        except JournalError as error:
            log.warning("replica %s: could not hand its leases off: %s", self.owner, error)
            return
        if ended:
            log.info("replica %s: handed %d lease(s) off to the other replicas", self.owner, ended)
