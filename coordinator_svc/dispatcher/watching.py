"""One WatchOperations stream per runner (C9), instead of per-operation polls.

The stream is re-opened from the last cursor after any failure (with
backoff) and at least every ``WATCH_WINDOW_SECONDS`` (its deadline). Before
re-opening after a failure, and on first contact, the runner's incarnation is
read: a changed incarnation resets the cursor (sequences belong to an
incarnation) and sends every operation still bound to the old one to a status
check, which applies C9 or §6. The due scan's fallback poll covers anything
a lost stream misses.

Every message also carries the runner's slot pools (size and in use per
kind, issue 9): the runner's own count includes turns this coordinator cannot
see (another replica's, one it gave up on), so the scheduler counts the
larger of the two (``core.scheduler``) and waiting turns try again when that
frees a slot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

import grpc

from coordinator_svc.config import DispatchTimings
from coordinator_svc.core.compatibility import runner_version_problem
from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.dispatcher.runner_client import describe
from coordinator_svc.dispatcher.translate import (
    RunnerContractViolation,
    runner_op,
    slot_sizes,
    slot_use,
)
from coordinator_svc.driver.inputs import (
    IncarnationSeen,
    Input,
    RowReported,
    RunnerAnswered,
    RunnerIdentified,
    RunnerLearned,
    RunnerPools,
    RunnerSilent,
    RunnerUp,
)
from coordinator_svc.ports import RunnerGateway, RunnerInfo
from turnwire.backoff import backoff_seconds
from turnwire.distribution import version as installed_version
from turnwire.observability.logs import turn_extra
from turnwire.runner.v1 import runner_pb2

log = logging.getLogger("coordinator_svc.dispatcher.watch")

COORDINATOR_VERSION = installed_version()
# The runner's gate turned us away (R11): a configuration to fix, not a network blip.
_REFUSED_BY_THE_GATE = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


# The engine's one entry point for what a watch saw (Dispatcher.feed).
Feed = Callable[[Input], Awaitable[None]]


class RunnerWatch:
    def __init__(self, client: RunnerGateway, feed: Feed, timings: DispatchTimings) -> None:
        self._client = client
        self._timings = timings
        self._feed = feed
        self._stopped = False
        self.cursor = 0
        self.incarnation: str | None = None
        self._failures = 0

    @property
    def runner(self) -> str:
        return self._client.name

    async def _identify(self, identity: RunnerIdentity | None) -> None:
        """Who the runner is, while this watch follows it live: told once
        GetRunnerInfo was read and the incarnation checked, taken back the moment
        the stream fails or ends (a restart ends it). A never-sent first attempt
        binds to it without a preflight (C2a); if it is stale anyway, the runner
        refuses the send (C5), nothing runs."""
        await self._feed(RunnerIdentified(self._client.name, identity))

    async def _down(self, error: str) -> None:
        """Since when the runner has not answered the watch, and why (shown on every
        operation that waits for it, PROTOCOL §8.2)."""
        await self._feed(RunnerSilent(self._client.name, error, datetime.now(UTC)))

    def stop(self) -> None:
        self._stopped = True

    async def run(self) -> None:
        fresh = True
        while not self._stopped:
            try:
                if fresh:
                    await self._identify(None)
                    info = await self._client.info()
                    if await self._outside_the_version_window(info):
                        await asyncio.sleep(self._delay())
                        continue
                    await self._feed(RunnerUp(self._client.name))
                    await self._feed(
                        RunnerLearned(self._client.name, info.slot_sizes, info.executors)
                    )
                    await self._check_incarnation(info.incarnation_id)
                    await self._identify(RunnerIdentity(info.incarnation_id, info.store_id))
                await self._follow()
                # The stream ended without an error: the runner may be
                # going away; look at its incarnation before re-opening.
                await self._identify(None)
                fresh = True
                self._failures = 0
                await asyncio.sleep(self._timings.backoff_initial)
            except grpc.aio.AioRpcError as error:
                window_over = error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                fresh = not window_over
                self._failures = 0 if window_over else self._failures + 1
                if not window_over:
                    await self._identify(None)
                    self._log_interruption(error)
                    await self._down(describe(error))
                    await asyncio.sleep(self._delay())
            except Exception:  # e.g. the journal is unavailable: never end the watch
                log.exception("%s: watch step failed", self._client.name)
                await self._identify(None)
                await self._down("the watch step failed (see the log)")
                fresh = True
                self._failures += 1
                await asyncio.sleep(self._delay())

    async def _outside_the_version_window(self, info: RunnerInfo) -> bool:
        """The version skew rule (core.compatibility): a runner outside the window gets
        no slots, so no new turn; its bound turns are still woken for their status calls."""
        if info.version is None:
            return False
        problem = runner_version_problem(self._client.name, info.version, COORDINATOR_VERSION)
        if problem is None:
            return False
        await self._feed(RunnerLearned(self._client.name, {}))
        await self._check_incarnation(info.incarnation_id)
        self._failures += 1
        if self._failures == 1:  # once per streak: it repeats until someone upgrades
            log.error("%s", problem)
        await self._down(problem)
        return True

    def _log_interruption(self, error: grpc.aio.AioRpcError) -> None:
        if error.code() not in _REFUSED_BY_THE_GATE:
            log.info("%s: watch interrupted: %s", self._client.name, describe(error))
            return
        if self._failures == 1:  # once per streak: it repeats until someone fixes it
            log.error(
                "%s refuses this coordinator (%s): give it the runner's secret "
                "(--runner-secret-file) or a certificate whose CN the runner serves "
                "(its --coordinator-identity); nothing is sent to it until then",
                self._client.name,
                describe(error),
            )

    def _delay(self) -> float:
        t = self._timings
        return backoff_seconds(self._failures, initial=t.backoff_initial, cap=t.backoff_max)

    async def _check_incarnation(self, incarnation: str) -> None:
        if incarnation == self.incarnation:
            return
        # Its turns are read first: if the journal fails, nothing changed and this is retried.
        await self._feed(IncarnationSeen(self._client.name, incarnation))
        if self.incarnation is not None:
            log.warning(
                "%s: incarnation changed %s -> %s",
                self._client.name,
                self.incarnation,
                incarnation,
            )
        self.incarnation = incarnation
        self.cursor = 0

    async def _follow(self) -> None:
        call = self._client.watch(self.cursor)
        try:
            async for message in call:
                # A live stream (heartbeats included) means the runner answers:
                # routing stops avoiding it even if no turn was routed there.
                await self._feed(RunnerAnswered(self._client.name))  # and it is up
                if message.incarnation_id != self.incarnation:
                    await self._identify(None)
                    await self._check_incarnation(message.incarnation_id)
                    return  # re-open from the reset cursor
                if message.pools:
                    await self._slots(message.pools)
                if message.HasField("operation"):
                    await self._report(message.incarnation_id, message.operation)
        finally:
            call.cancel()

    async def _slots(self, pools: Iterable[runner_pb2.SlotPool]) -> None:
        """The runner's pools as it counts them now (this incarnation's)."""
        await self._feed(RunnerPools(self._client.name, slot_sizes(pools), slot_use(pools)))

    async def _report(self, incarnation: str, operation: runner_pb2.RunnerOperation) -> None:
        self.cursor = max(self.cursor, operation.sequence)
        try:
            op = runner_op(operation)
        except RunnerContractViolation as error:
            log.warning(
                "%s: %s",
                self._client.name,
                error,
                extra=turn_extra(
                    operation.operation_id, runner=self._client.name, incarnation=incarnation
                ),
            )
            return
        # Which lane it takes is the driver's rule (driver.inputs.route_report).
        await self._feed(RowReported(self._client.name, incarnation, operation.operation_id, op))
