"""The stage a scenario plays on: one LocalDeployment (coordinator, two runners,
a fault proxy per runner, each its own process) and the moves a scenario makes.

Every wait is bounded (count and time). Every process is started and ended by
LocalDeployment, by PID. A scenario that kills something restarts it before it
returns; :meth:`Stage.heal` puts anything a failed scenario left down back up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc

from turnwire.chaos import CHAOS_COORDINATOR_ARGS
from turnwire.client import AsyncTurnwireClient, Operation, OperationState, RetryLater
from turnwire.crashpoints import ENV_VAR
from turnwire.deployment import LocalDeployment, RunnerSlot
from turnwire.faults import FaultControlClient, RuleStatus, parse_rule
from turnwire.launcher import ManagedProcess
from turnwire.ledger import count_starts
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_aio_channel

# Short timings so every scenario ends in seconds: the chaos set, a due scan
# every 50 ms, a fallback status poll every second (a lost Cancel is retried
# at the next poll), and INFO logs (every transition) in DATA/logs/ for diagnosis.
SCENARIO_COORDINATOR_ARGS = (
    *CHAOS_COORDINATOR_ARGS,
    "--idle-poll", "0.05",
    "--status-poll", "1.0",
    "--log-level", "INFO",
)  # fmt: skip
TARGET = "runner-1"  # the only runner serving writable turns
SETTLED_RUNNER_STATES = frozenset(
    {
        runner_pb2.RUNNER_OPERATION_STATE_SUCCEEDED,
        runner_pb2.RUNNER_OPERATION_STATE_FAILED,
        runner_pb2.RUNNER_OPERATION_STATE_CANCELLED,
        runner_pb2.RUNNER_OPERATION_STATE_TIMED_OUT,
        runner_pb2.RUNNER_OPERATION_STATE_INTERRUPTED,
        runner_pb2.RUNNER_OPERATION_STATE_TOMBSTONED,
    }
)
POLL = 0.05
_RECONNECT_FAST = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)
T = TypeVar("T")
TERMINAL_TIMEOUT = 30.0


class StageError(AssertionError):
    """A scenario could not reach the moment it needed (a bounded wait ran out)."""


def make_deployment(data_dir: Path, journal_url: str | None) -> LocalDeployment:
    return LocalDeployment(
        data_dir,
        runner_count=2,
        executor="metered",
        with_proxies=True,
        journal_url=journal_url,
        coordinator_args=SCENARIO_COORDINATOR_ARGS,
        # runner-2 serves read-only turns only, so every (writable) scenario
        # turn has exactly one candidate: runner-1, whose proxy and process
        # the scenario faults. Routing away from a runner in trouble (C6:
        # QUEUED may choose anew) would otherwise dodge the fault.
        runner_options={"runner-2": "kinds=read_only"},
    )


@dataclass
class Stage:
    deployment: LocalDeployment
    backend: str
    client: AsyncTurnwireClient | None = None
    # Every rule a scenario installed, with its hits, read before clearing.
    fired: list[RuleStatus] = field(default_factory=list)
    _serial: int = 0

    # --- the operation -----------------------------------------------------------

    @property
    def api(self) -> AsyncTurnwireClient:
        assert self.client is not None, "Stage.play() opens the client"
        return self.client

    async def play(self, scenario: Callable[[Stage], Awaitable[T]]) -> T:
        """Run one scenario with a client bound to this event loop.

        The client's channel reconnects within half a second, so a coordinator
        restarted on its port is reachable again at once.
        """
        channel = grpc.aio.insecure_channel(self.deployment.address, options=_RECONNECT_FAST)
        try:
            async with AsyncTurnwireClient(
                self.deployment.address, self.deployment.token, channel=channel
            ) as client:
                self.client = client
                return await scenario(self)
        finally:
            self.client = None
            await channel.close()

    def new_key(self, label: str) -> str:
        self._serial += 1
        return f"scenario-{self.backend}-{label}-{self._serial}-{time.monotonic_ns()}"

    async def submit(self, key: str, sleep_ms: int) -> str:
        """Submit one metered turn; retried with the same key while the coordinator restarts."""
        deadline = time.monotonic() + 20.0
        while True:
            try:
                submitted = await self.api.submit(
                    items=["scenario turn"],
                    model="builtin/metered",
                    parameters={"sleep_ms": str(sleep_ms)},
                    idempotency_key=key,
                )
                return submitted.operation.operation_id
            except RetryLater:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def get(self, op_id: str) -> Operation:
        return await self.api.get(op_id)

    async def wait_for(
        self, op_id: str, what: str, ok: Callable[[Operation], bool], within: float = 10.0
    ) -> Operation:
        deadline = time.monotonic() + within
        latest: Operation | None = None
        while time.monotonic() < deadline:
            try:
                latest = await self.get(op_id)
            except RetryLater:
                latest = None
            if latest is not None and ok(latest):
                return latest
            await asyncio.sleep(POLL)
        state = latest.state if latest else "unreachable"
        raise StageError(f"{op_id} never reached {what} within {within}s (last: {state})")

    async def wait_state(self, op_id: str, state: OperationState, within: float = 10.0) -> None:
        await self.wait_for(op_id, str(state), lambda op: op.state is state, within)

    async def wait_reached(self, op_id: str, state: OperationState, within: float = 10.0) -> None:
        """Until the operation has been in ``state``, now or before: its events say so
        (polling the current state alone misses a stay shorter than a poll, as a
        busy machine makes DISPATCH_UNKNOWN before an answered status call)."""

        async def reached() -> None:
            async for event in self.api.watch(op_id):  # every event from the first
                if event.to_state is state:
                    return
            raise StageError(f"{op_id} ended without reaching {state}")

        try:
            await asyncio.wait_for(reached(), within)
        except TimeoutError:
            latest = await self.get(op_id)
            raise StageError(
                f"{op_id} never reached {state} within {within}s (now: {latest.state})"
            ) from None

    async def wait_terminal(self, op_id: str) -> Operation:
        return await self.wait_for(op_id, "a terminal state", lambda op: op.is_terminal,
                                   TERMINAL_TIMEOUT)  # fmt: skip

    async def wait_started(self, op_id: str, within: float = 10.0) -> None:
        """Until the metered ledger shows the executor start (the work is under way)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if count_starts(self.deployment.ledger)[op_id] >= 1:
                return
            await asyncio.sleep(POLL)
        raise StageError(f"{op_id}: no executor start in the ledger within {within}s")

    # --- the runners, seen directly (not through the proxy) --------------------------

    def slot(self, name: str = TARGET) -> RunnerSlot:
        return next(s for s in self.deployment.runners if s.name == name)

    async def runner_row(self, op_id: str, name: str = TARGET) -> runner_pb2.RunnerOperation | None:
        address = self.slot(name).process.address
        async with runner_aio_channel(self.deployment.runner_credentials, address) as channel:
            stub = runner_pb2_grpc.RunnerServiceStub(channel)
            reply = await stub.GetOperationStatus(
                runner_pb2.GetOperationStatusRequest(operation_id=op_id), timeout=2.0
            )
        return reply.operation if reply.present else None

    async def wait_runner_settled(self, op_id: str, within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            row = await self.runner_row(op_id)
            if row is not None and row.state in SETTLED_RUNNER_STATES:
                return
            await asyncio.sleep(POLL)
        raise StageError(f"{op_id}: {TARGET} did not settle it within {within}s")

    # --- fault rules on the target runner's proxy -----------------------------------

    async def install(self, rules: tuple[str, ...], name: str = TARGET) -> None:
        async with FaultControlClient(self.slot(name).control_address) as control:
            for text in rules:
                await control.add(parse_rule(text))

    async def wait_all_fired(self, within: float = 5.0) -> None:
        """Until every rule on the target's proxy has fired at least once."""
        deadline = time.monotonic() + within
        idle: list[str] = []
        async with FaultControlClient(self.slot().control_address) as control:
            while time.monotonic() < deadline:
                idle = [s.rule.to_text() for s in await control.list() if s.hits == 0]
                if not idle:
                    return
                await asyncio.sleep(POLL)
        raise StageError(f"rules not fired within {within}s: {idle}")

    async def clear_rules(self) -> None:
        """Remove every rule from every proxy, remembering how often each fired."""
        for slot in self.deployment.runners:
            async with FaultControlClient(slot.control_address) as control:
                self.fired += await control.list()
                await control.clear()

    async def proxy_calls(self, method: str, name: str = TARGET) -> int:
        async with FaultControlClient(self.slot(name).control_address) as control:
            stats = await control.stats()
        return sum(n for m, n in stats.calls_by_method.items() if m.endswith("/" + method))

    # --- processes -------------------------------------------------------------

    async def restart_runner(
        self,
        *,
        hard: bool,
        wipe_store: bool = False,
        env: Mapping[str, str] | None = None,
        replace_store: Callable[[Path], Path] | None = None,
    ) -> None:
        await asyncio.to_thread(
            self.deployment.restart_runner,
            TARGET,
            hard=hard,
            wipe_store=wipe_store,
            env=env,
            replace_store=replace_store,
        )

    async def kill_runner(self) -> None:
        """SIGKILL the target runner by PID (it stays down until restart_runner)."""
        await asyncio.to_thread(self.slot().process.kill)

    async def restart_coordinator(
        self, *, hard: bool, env: Mapping[str, str] | None = None
    ) -> None:
        await asyncio.to_thread(self.deployment.restart_coordinator, hard=hard, env=env)

    async def kill_coordinator(self) -> None:
        assert self.deployment.coordinator is not None
        await asyncio.to_thread(self.deployment.coordinator.kill)

    @staticmethod
    def armed(point: str) -> dict[str, str]:
        return {ENV_VAR: point}

    @staticmethod
    async def wait_exit(process: ManagedProcess, what: str, within: float = 15.0) -> None:
        """Until an armed process has SIGKILLed itself at its crash point."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not process.alive():
                return
            await asyncio.sleep(POLL)
        raise StageError(f"{what} did not reach its crash point within {within}s")

    # --- between scenarios -------------------------------------------------------------

    def heal(self) -> None:
        """Everything running again (a scenario that failed midway may have left a process down)."""
        deployment = self.deployment
        for slot in deployment.runners:
            if not slot.process.alive() or slot.process.env:  # down, or still armed
                deployment.restart_runner(slot.name, hard=True)
        coordinator = deployment.coordinator
        if coordinator is None or not coordinator.alive() or coordinator.env:
            deployment.restart_coordinator(hard=True)
