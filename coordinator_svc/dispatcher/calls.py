"""Performing the runner commands of a Decision (the I/O edge of the shell).

One :class:`RunnerCalls` per dispatcher: a client and a status batcher per
runner, which runners are not answering (routing avoids them), and which
operations have a Dispatch reply on the way. It turns each command into the
reply event the core reads next; it never touches the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import grpc

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide_dispatch import MESSAGE_TOO_LARGE as TOO_LARGE
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    PreflightAnswer,
    PreflightFailed,
)
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.core.runner_view import RunnerOp
from coordinator_svc.core.stale import read_stale
from coordinator_svc.dispatcher.batching import StatusBatcher
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.releases import ReleaseCarrier
from coordinator_svc.dispatcher.runner_client import RunnerClient
from coordinator_svc.driver.held_reply import MAX_WAITS, Deliver, HeldReplies, HoldTimings
from coordinator_svc.driver.runners import Runners
from coordinator_svc.ports import RunnerGateway
from turnwire.backoff import backoff_seconds
from turnwire.crashpoints import crash_point
from turnwire.ids import stamp_now
from turnwire.limits import MessageLimits
from turnwire.observability.logs import turn_context
from turnwire.transport_security import RunnerCredentials, check_runner_address
from turnwire.vocabulary import ErrorReason

log = logging.getLogger("coordinator_svc.dispatcher")

RELEASE_TRIES = 4


def _for_runner(
    interceptors: Sequence[grpc.aio.ClientInterceptor], name: str
) -> list[grpc.aio.ClientInterceptor]:
    """The channel to runner ``name``'s interceptors: one that labels by runner (the
    latency histogram's, turnwire.observability.rpc_metrics: a call does not say
    where it went) is bound to that name, the others are as they are. Asked by
    attribute: prometheus_client stays unloaded when metrics are off."""
    bound: list[grpc.aio.ClientInterceptor] = []
    for interceptor in interceptors:
        for_runner = getattr(interceptor, "for_runner", None)
        bound.append(for_runner(name) if for_runner is not None else interceptor)
    return bound


class RunnerCalls:
    def __init__(
        self,
        runners: Sequence[RunnerEndpoint],
        timings: DispatchTimings,
        metrics: DispatcherMetrics,
        interceptors: Sequence[grpc.aio.ClientInterceptor],
        *,
        settle_grace: float,
        limits: MessageLimits,
        credentials: RunnerCredentials | None = None,
        gateways: Mapping[str, RunnerGateway] | None = None,
        memory: Runners | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._timings = timings
        # The engine's clock: when a runner last answered a call (C2a's freshness).
        self._clock = clock
        self._settle_grace = settle_grace
        self._metrics = metrics
        self._interceptors = tuple(interceptors)
        self._limits = limits
        self._credentials = credentials
        # In-process gateways by name (tests); otherwise a gRPC client per member.
        self._gateways = dict(gateways) if gateways is not None else None
        if gateways is None and runners and credentials is None:
            raise ValueError(
                "runners are configured but no runner credentials: a runner serves only "
                "its coordinator (mutual TLS, or a shared secret on loopback)"
            )
        self.clients: dict[str, RunnerGateway] = {}
        self._batchers: dict[str, StatusBatcher] = {}
        self.releases = ReleaseCarrier(self._release_alone, metrics)
        self._release_tasks: set[asyncio.Task[bool]] = set()
        # What is known of each runner, its streak of unanswered calls among it
        # (the driver's record: driver/runners.py).
        self.runners = memory if memory is not None else Runners()
        # Every Dispatch on the way and its held reply: the driver decides how
        # long a reply is held and what it says (driver/held_reply.py, C9, R3).
        self._held = HeldReplies(
            HoldTimings(settle_grace, timings.start_grace, timings.dispatch_timeout)
        )
        # Per held reply, the event its wait sleeps on: only a wake-up, set when
        # the driver says an input ended the wait.
        self._wakes: dict[str, asyncio.Event] = {}
        # Clients of members that left, closing after their grace (§11 M5).
        self._closing: dict[asyncio.Task[None], RunnerGateway] = {}
        for runner in runners:
            self.add(runner)

    def configured(self, runner: str) -> bool:
        """``runner`` is a member now: commands for it are sent (§11 M6)."""
        return runner in self.clients

    def check_address(self, address: str) -> None:
        """SecurityConfigError unless these credentials may reach ``address`` (the
        transport rule the channel itself applies: plaintext to loopback only)."""
        if self._credentials is not None:
            check_runner_address(self._credentials, address)

    def can_reach(self) -> bool:
        """Whether a member added now could be called (in-process gateways, or
        credentials its runner accepts: §11 M2)."""
        return self._gateways is not None or self._credentials is not None

    def add(self, runner: RunnerEndpoint) -> RunnerGateway:
        """A member's client and status batcher (§11 M5); ValueError if it cannot be reached."""
        if self._gateways is not None and runner.name in self._gateways:
            client = self._gateways[runner.name]
        elif self._credentials is not None:
            interceptors = _for_runner(self._interceptors, runner.name)
            client = RunnerClient(
                runner, self._timings, self._metrics, self._credentials, interceptors, self._limits
            )
        else:
            raise ValueError(f"runner {runner.name}: no runner credentials to call it with")
        self.clients[runner.name] = client
        self._batchers[runner.name] = StatusBatcher(client.statuses, runner=runner.name)
        return client

    def remove(self, runner: str) -> None:
        """A member left (§11 M5): nothing more is sent to it (``configured`` is False
        at once); calls already on the wire get ``grace`` to end with their own
        answers, then the channel closes (``drain``)."""
        client = self.clients.pop(runner, None)
        batcher = self._batchers.pop(runner, None)
        if batcher is not None:
            batcher.close(f"runner {runner} left the runner set")
        self.releases.drop(runner)
        self.runners.forget(runner)
        if client is not None:
            grace = self._timings.dispatch_timeout + self._settle_grace + self._timings.start_grace
            closing = asyncio.get_running_loop().create_task(client.close(grace))
            self._closing[closing] = client
            closing.add_done_callback(lambda done: self._closing.pop(done, None))

    async def drain(self) -> None:
        """Wait for the channels of members that left to close."""
        await asyncio.gather(*list(self._closing), return_exceptions=True)

    def dispatching(self, operation_id: str) -> bool:
        """A Dispatch reply for this operation is on the way (or being held)."""
        return operation_id in self._held

    def settled_seen(self, operation_id: str) -> None:
        """The watch delivered a settled row for an operation whose reply is held."""
        self._wake(operation_id, self._held.settled_seen(operation_id))

    def committed(self, operation_id: str) -> None:
        """Someone committed a change of this operation (ends a settle grace)."""
        self._wake(operation_id, self._held.committed(operation_id))

    def started_seen(self, operation_id: str, incarnation_id: str, op: RunnerOp) -> None:
        """The watch showed a confirmed start for an operation whose reply is on the way."""
        self._wake(operation_id, self._held.start_seen(operation_id, incarnation_id, op))

    def _wake(self, operation_id: str, wake: bool) -> None:
        event = self._wakes.get(operation_id) if wake else None
        if event is not None:
            event.set()

    async def close(self) -> None:
        self.releases.close()
        for task in list(self._release_tasks):
            task.cancel()
        await asyncio.gather(*self._release_tasks, return_exceptions=True)
        for batcher in self._batchers.values():
            batcher.cancel()
        for client in self.clients.values():
            await client.close()
        for closing, client in list(self._closing.items()):
            closing.cancel()  # a channel still in its grace: close it now
            await client.close()
        await self.drain()

    def note_answered(self, runner: str) -> bool:
        """``runner`` answered; True if routing had left it out."""
        return self._note(runner, answered=True)

    def _note(self, runner: str, *, answered: bool) -> bool:
        if runner not in self.clients:
            return False  # left the set meanwhile: no streak to keep
        if answered:
            # An answer is as good a sign of life as a watch message (C2a): a
            # turn's Dispatch reply, held until it settles, is often all a busy
            # runner says (the watch leaves a held reply's rows out).
            self.runners.heard(runner, self._clock())
            return self.runners.answered(runner)
        self.runners.unanswered(runner)
        return False

    async def preflight(
        self, runner: str, operation_id: str, asked_attempt: int
    ) -> PreflightAnswer | PreflightFailed:
        answer = await self._batchers[runner].ask(operation_id, asked_attempt)
        self._note(runner, answered=not isinstance(answer, PreflightFailed))
        return answer

    async def dispatch(
        self, record: OperationRecord, command: cmd.Dispatch
    ) -> DispatchAccepted | DispatchRefused | DispatchUnknown:
        """C5: sent only after its attempt row was committed (C4). The reply is
        then held as the driver says (C9, R3: driver/held_reply.py)."""
        op_id = record.operation_id
        self._held.sending(op_id)
        try:
            # The runner holds its reply up to the settle grace: a short turn's
            # result comes back on it, and the watch does not carry it too. It
            # carries the Releases owed to that incarnation.
            carried = self.releases.take(command.runner, command.incarnation_id)
            reply = await self.clients[command.runner].dispatch(
                record, command, reply_hold=self._settle_grace, releases=carried
            )
            never_handled = isinstance(reply, DispatchRefused) and reply.reason == TOO_LARGE
            if carried and (isinstance(reply, DispatchUnknown) or never_handled):
                self.releases.give_back(carried)  # the runner may not have seen them
            crash_point("coordinator.after_dispatch_send")
            self._note(command.runner, answered=not isinstance(reply, DispatchUnknown))
            self._note_staleness(command, reply)
            loop = asyncio.get_running_loop()
            self._held.replied(op_id, reply, loop.time())
            return await self._hold(op_id, loop)
        finally:
            self._held.done(op_id)

    def _note_staleness(
        self, command: cmd.Dispatch, reply: DispatchAccepted | DispatchRefused | DispatchUnknown
    ) -> None:
        """C6c: the runner's run of DISPATCH_STALE refusals (any turn's), which its
        operator hears of once it is a run (``Runners.refused_stale``), and which
        an admitted Dispatch ends."""
        runner = command.runner
        if runner not in self.clients:
            return  # left the set meanwhile: nothing to keep
        if isinstance(reply, DispatchAccepted):
            self.runners.admitted(runner)
            return
        if not isinstance(reply, DispatchRefused) or reply.reason != ErrorReason.DISPATCH_STALE:
            return
        reading = read_stale(command.dispatch_stamp, reply.admission_floor, stamp_now())
        said = reading.describe(runner)
        if self.runners.refused_stale(runner, said):
            log.warning(
                "runner %s refused %d Dispatches in a row as stale (DISPATCH_STALE, "
                "PROTOCOL.md C6c): %s",
                runner,
                self.runners.of(runner).stale,
                said,
            )

    async def _hold(
        self, operation_id: str, loop: asyncio.AbstractEventLoop
    ) -> DispatchAccepted | DispatchRefused | DispatchUnknown:
        """Perform the driver's waits until it delivers the reply. A crash
        meanwhile leaves DISPATCHING, which C12 resolves."""
        try:
            for _ in range(MAX_WAITS):
                step = self._held.next(operation_id, loop.time())
                if isinstance(step, Deliver):
                    return step.reply
                wake = self._wakes.setdefault(operation_id, asyncio.Event())
                wake.clear()  # what set it was read by ``next`` just now
                # asyncio.timeout_at, not wait_for: on 3.11 wait_for can swallow a
                # cancel that lands as the event is set, and this must end on shutdown.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(step.until):
                        await wake.wait()
            # Each wait ends a phase, so this is reached only if timers kept firing
            # before the clock read their deadline: deliver rather than spin.
            log.warning("%s: Dispatch reply held past %d waits", operation_id, MAX_WAITS)
            return self._held.cut(operation_id)
        finally:
            self._wakes.pop(operation_id, None)

    async def cancel(
        self, record: OperationRecord, command: cmd.Cancel
    ) -> CancelAnswered | CancelFailed:
        reply = await self.clients[command.runner].cancel(record, command)
        self._note(
            command.runner, answered=not (isinstance(reply, CancelFailed) and not reply.reason)
        )
        return reply

    async def release(self, operation_id: str, command: cmd.Release) -> bool:
        """C10: tell the runner it may drop the result. One whose answer the core
        waits for (``record``) is sent now; the others ride on the next Dispatch
        to that runner, or go alone after a moment (dispatcher/releases.py)."""
        if command.record:
            return await self._release_now(operation_id, command)
        self.releases.owe(operation_id, command)
        return True

    def _release_alone(self, operation_id: str, command: cmd.Release) -> None:
        task = asyncio.get_running_loop().create_task(self._release_now(operation_id, command))
        self._release_tasks.add(task)
        task.add_done_callback(self._release_tasks.discard)

    async def _release_now(self, operation_id: str, command: cmd.Release) -> bool:
        """One Release call, with a few bounded retries.

        A Release that still fails is healed later: the runner's watch shows
        the settled row unreleased and the terminal operation releases it again.
        """
        t = self._timings
        # Its own turn context: an owed Release goes alone from a timer that
        # another turn's work armed (dispatcher/releases.py).
        with turn_context(operation_id, runner=command.runner, incarnation=command.incarnation_id):
            for attempt in range(RELEASE_TRIES):
                client = self.clients.get(command.runner)
                if client is None:  # left the set (§11 M6): its row stays (K6)
                    return False
                if await client.release(operation_id, command):
                    return True
                await asyncio.sleep(
                    backoff_seconds(attempt, initial=t.backoff_initial, cap=t.backoff_max)
                )
            log.warning(
                "%s: Release to %s failed %d times", operation_id, command.runner, RELEASE_TRIES
            )
        return False
