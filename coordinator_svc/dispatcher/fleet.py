"""The runners as this coordinator knows them: the set and its drains, each
member's watch stream, and what the watches report (issue 26: the engine's
runner-facing half, apart from its per-operation loop).

The watches and the lease keeper tell it what they saw through one entry
point, :meth:`Fleet.feed` (``driver.inputs``); where an input needs a rule
(which lane a reported row takes, whether a runner left out of routing is
back) the driver decides it. What it does to operations goes back through
the engine's own entry points: ``wake`` (look at it now), ``deliver`` (an
event for it) and ``pump`` (route what fits).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core.events import Event, RunnerIdentity, RunnerReported
from coordinator_svc.core.membership import BOUND_STATES, MembershipChange
from coordinator_svc.core.model import OperationRecord, OpState, TurnKind
from coordinator_svc.core.routing import NoRunnerForExecutor, executor_refusal, serves
from coordinator_svc.dispatcher.calls import RunnerCalls
from coordinator_svc.dispatcher.members import Members
from coordinator_svc.dispatcher.runner_client import RunnerClient
from coordinator_svc.dispatcher.runner_states import RunnerState, runner_states
from coordinator_svc.dispatcher.waiting_room import WaitingRoom
from coordinator_svc.dispatcher.watching import RunnerWatch
from coordinator_svc.driver.inputs import (
    IncarnationSeen,
    Input,
    LookAgain,
    ReportLane,
    RowReported,
    RunnerAnswered,
    RunnerIdentified,
    RunnerLearned,
    RunnerPools,
    RunnerSilent,
    RunnerUp,
    route_report,
)
from coordinator_svc.ports import JournalError

log = logging.getLogger("coordinator_svc.dispatcher")

# The states a runner's changed incarnation sends to a status check (C9).
WATCHED_STATES = (OpState.RUNNING, OpState.CANCELLING, OpState.DISPATCH_UNKNOWN)
# What the fallback status poll looks after (C9a: rarely while a live watch follows it).
POLLED_STATES = (OpState.RUNNING, OpState.CANCELLING)

# (runner, states, other than this incarnation or None) -> the open operations bound there.
BoundTo = Callable[[str, Sequence[OpState], str | None], Awaitable[list[OperationRecord]]]


class Fleet:
    """``bound_to(runner, states)``: the journal's open operations bound to a
    runner; ``owns(record)``: this process drives it (a replica: its lease);
    ``identities_known``: a never-sent first attempt may bind to the identity
    a live watch knows (C2a; False: always preflight); ``clock``: the engine's,
    which times what the watches deliver (C2a's freshness)."""

    def __init__(
        self,
        runners: Sequence[RunnerEndpoint],
        calls: RunnerCalls,
        room: WaitingRoom,
        timings: DispatchTimings,
        *,
        wake: Callable[[str], None],
        deliver: Callable[[str, Event], None],
        pump: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        bound_to: BoundTo,
        owns: Callable[[OperationRecord], bool],
        clock: Callable[[], datetime],
        identities_known: bool = True,
    ) -> None:
        self._clock = clock
        self._calls = calls
        # Each runner's record (identity, unanswered calls, silence): driver/runners.py.
        self._runners = calls.runners
        self._room = room
        self._wake = wake
        self._deliver = deliver
        self._pump = pump
        self._spawn = spawn
        self._bound_to = bound_to
        self._owns = owns
        self._identities_known = identities_known
        self._timings = timings
        # Runners whose lost watch is being waited out (C9a, _watch_lost).
        self._watch_checks: set[str] = set()
        # The runner set and each member's watch stream (§11 M5): changed only
        # through set_runners.
        self.members = Members(
            runners,
            calls,
            room.scheduler,
            lambda client: RunnerWatch(client, self.feed, timings),
            spawn,
        )

    # --- what the watches and the lease keeper saw ---

    async def feed(self, item: Input) -> None:
        """The one way the watch streams and the lease keeper tell this process
        what they saw (``driver.inputs``); a journal read it needs may raise."""
        match item:
            case RunnerAnswered(runner=runner):
                self._answered(runner)  # and heard from now (C2a: RunnerCalls.note_answered)
            case RunnerUp(runner=runner):
                self._runners.up(runner)
            case RunnerSilent(runner=runner, error=error, at=at):
                self._runners.down(runner, error, at)
                self._watch_lost(runner)
            case RunnerIdentified(runner=runner, identity=identity):
                self._runners.identified(runner, identity, self._clock())
            case RunnerLearned(runner=runner, sizes=sizes, executors=executors):
                self._learned(runner, sizes, executors)
            case RunnerPools(runner=runner, sizes=sizes, in_use=in_use):
                if self._room.reported(runner, sizes, in_use):
                    self._learned(runner, sizes, None)
            case IncarnationSeen(runner=runner, incarnation=incarnation):
                for record in await self._bound_to(runner, WATCHED_STATES, incarnation):
                    self._wake(record.operation_id)
            case RowReported():
                self._reported(item)
            case LookAgain(operation_id=operation_id):
                self._wake(operation_id)

    def _answered(self, runner: str) -> None:
        """Any answer from ``runner`` (a watch message too) ends its trouble streak;
        a runner that had been left out gets grants again."""
        self._runners.up(runner)
        if self._calls.note_answered(runner):
            self._pump()  # routing had left it out

    def _learned(
        self, runner: str, sizes: Mapping[TurnKind, int], executors: Sequence[str] | None
    ) -> None:
        """A runner's pool sizes, and the executors it serves when it said (C6b);
        waiters may now fit."""
        self._room.scheduler.learned(runner, sizes)
        if executors is not None:
            self._room.scheduler.learned_executors(runner, executors)
        self._pump()

    def _reported(self, item: RowReported) -> None:
        op_id = item.operation_id
        match route_report(item.row, dispatching=self._calls.dispatching(op_id)):
            case ReportLane.NOTHING | ReportLane.REPLY_DECIDES:
                return
            case ReportLane.START_RIDES_ON_REPLY:
                self._calls.started_seen(op_id, item.incarnation, item.row)
                return
            case ReportLane.SETTLED_WHILE_HELD:
                self._calls.settled_seen(op_id)
        self._deliver(op_id, RunnerReported(item.runner, item.incarnation, item.row))

    def _watch_lost(self, runner: str) -> None:
        """C9a: a watch that stays down longer than ``status_poll`` hands its
        runner's RUNNING and CANCELLING turns back to the short fallback poll
        (each is looked at once now, and decided without a live watch). One
        check per runner at a time; a watch back by then needs none: it
        replays from its cursor everything it missed."""
        if runner in self._watch_checks:
            return
        self._watch_checks.add(runner)
        self._spawn(self._poll_if_still_unwatched(runner))

    async def _poll_if_still_unwatched(self, runner: str) -> None:
        try:
            await asyncio.sleep(self._timings.status_poll)
            if self.watched_incarnation(runner) is not None:
                return
            for record in await self._bound_to(runner, POLLED_STATES, None):
                if self._owns(record):
                    self._wake(record.operation_id)
        except JournalError as error:
            log.warning("runner %s: watch lost; its turns wait for the due scan: %s", runner, error)
        finally:
            self._watch_checks.discard(runner)

    # --- the set and its drains ---

    @property
    def runners(self) -> tuple[RunnerEndpoint, ...]:
        """The members now (§11 M1), by name."""
        return self.members.endpoints

    @property
    def drained(self) -> frozenset[str]:
        return self.members.drained

    def avoid_unreachable(self) -> None:
        """Routing leaves out runners that stopped answering, and drained ones."""
        self._room.scheduler.avoid(self._runners.unreachable(), self.drained)

    async def set_runners(
        self, runners: Sequence[RunnerEndpoint], drained: Collection[str]
    ) -> MembershipChange:
        """The one way the runner set and its drains change (§11 M5, §10 V8): the
        journal's, read at start, by a replica's poll, or after an operator's call.
        A member that joined gets its machinery and waiting turns may go to it; one
        that left loses it, and every operation this process drives that is bound
        to it is looked at now (M6). A drained runner gets no grant and no first
        attempt; turns bound there go on; undraining routes at once."""
        change, drains_changed = await self.members.apply(runners, drained)
        for runner in change.removed:
            self._spawn(self._look_at_bound(runner.name))
        if change or drains_changed:
            self._pump()
        return change

    async def _look_at_bound(self, runner: str) -> None:
        """Wake the operations bound to a runner that left the set (M6): each is
        decided at once instead of at its next poll. The due scan is the fallback
        if the journal cannot be read now."""
        try:
            bound = await self._bound_to(runner, BOUND_STATES, None)
        except JournalError as error:
            log.warning(
                "runner %s left the set; its turns wait for the due scan: %s", runner, error
            )
            return
        for record in bound:
            if runner not in self.members.names and self._owns(record):
                self._wake(record.operation_id)

    # --- what the API and the operator ask ---

    def has_runner_for(self, pool: str, kind: TurnKind) -> bool:
        return any(serves(r, pool, kind) for r in self.runners)

    def executor_refusal(
        self, pool: str, kind: TurnKind, executor: str
    ) -> NoRunnerForExecutor | None:
        """C6b at submit, from what the members said in their GetRunnerInfo."""
        return executor_refusal(pool, kind, executor, self.runners, self._room.scheduler.executors)

    def runner_states(self) -> list[RunnerState]:
        """Every member as this coordinator sees it (ListRunners)."""
        return runner_states(self.runners, self._room.scheduler, self._runners, self.drained)

    def identity_of(self, runner: str, now: datetime) -> RunnerIdentity | None:
        """The runner's identity if a live watch on it knows it and it is known
        live at ``now`` (C2a: the driver's rule, ``Runners.live_identity``)."""
        if not self._identities_known or self.members.watch_on(runner) is None:
            return None
        return self._runners.live_identity(runner, now)

    def watched_incarnation(self, runner: str) -> str | None:
        """The incarnation a live watch on ``runner`` follows (C9a), whatever C2a says."""
        identity = self._runners.of(runner).identity
        return identity.incarnation_id if identity is not None else None

    def watch_on(self, runner: str) -> RunnerWatch:
        """The watch stream on ``runner`` (one per member)."""
        watch = self.members.watch_on(runner)
        if watch is None:
            raise KeyError(runner)
        return watch

    def output_source(self, runner: str) -> RunnerClient | None:
        """This process's client of ``runner``, for relaying its StreamOutput (§12 S5,
        S8); None when it is not a member here or is an in-process test gateway."""
        client = self._calls.clients.get(runner)
        return client if isinstance(client, RunnerClient) else None

    def can_add_runners(self) -> bool:
        """A runner added now could be called (credentials it accepts: §11 M2)."""
        return self._calls.can_reach()

    def check_runner_address(self, address: str) -> None:
        """SecurityConfigError unless this coordinator's runner credentials may
        reach ``address`` (plaintext: loopback only, as for --runner)."""
        self._calls.check_address(address)
