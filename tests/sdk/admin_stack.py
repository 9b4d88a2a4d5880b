"""A real coordinator + runner for the operator's tests, with an admin token and
a way to make a turn whose execution is UNKNOWN.

Like live_stack.LiveStack (turnwire.testing's Stack on 127.0.0.1:0, served by a
StackThread, called over real channels from the test thread, everything
stopped in ``__exit__``), plus:

- principal "ops" holds ADMIN_TOKEN (scope admin) beside the tenants alice
  (TOKEN) and bob (OTHER_TOKEN), written before the coordinator starts;
- the dispatcher's calls to the runner pass tests/support's FaultInterceptor,
  so ``unknown_turn`` can lose one Dispatch (its request or its reply) and
  keep the runner unreachable until the short reconcile deadline ends the
  turn TIMED_OUT with execution UNKNOWN (C8), as a real outage does.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from coordinator_svc.api.tokens_file import Scope
from coordinator_svc.config import DispatchTimings
from tests.sdk.live_stack import OTHER_TOKEN, TOKEN
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_REQUEST, DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.client import AdminClient, Operation, TurnwireClient
from turnwire.testing.stack import Stack, StackThread

ADMIN_TOKEN = "tok-ops-admin-e2e"
# What the coordinator asks the runner about a Dispatch it lost track of; while
# these are dropped it cannot learn how the Dispatch went.
_STATUS_CALLS = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "GetRunnerInfo",
    "WatchOperations",
    "Cancel",
)


class AdminStack(StackThread):
    """One runner "r1" (built-in echo executor) and one coordinator with tenants and an admin."""

    def __init__(self, directory: Path) -> None:
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self._faults = FaultInterceptor()
        self.address = ""
        self.runner_address = ""

    async def _start(self) -> None:
        self.runner_address = (await self.stack.start_runner("r1", executor="echo")).address
        self.stack.add_token("alice", TOKEN)
        self.stack.add_token("bob", OTHER_TOKEN)
        self.stack.add_token("ops", ADMIN_TOKEN, scopes={Scope.ADMIN})
        coordinator = await self.stack.start_coordinator(
            interceptors=self._faults.all(),
            # An unreachable runner ends an ambiguous turn within about a second.
            timings=dataclasses.replace(DispatchTimings(), reconcile_deadline=0.5),
        )
        self.address = coordinator.address

    def unknown_turn(self, text: str, *, reached_the_runner: bool, timeout: float = 30.0) -> str:
        """Submit a turn (as alice) whose one Dispatch is lost, the runner silent
        until the reconcile deadline: it ends TIMED_OUT, execution UNKNOWN.

        ``reached_the_runner``: the reply is lost (the runner ran it) or the
        request is (it never ran), the two cases a verdict tells apart.
        """
        kind = DROP_RESPONSE if reached_the_runner else DROP_REQUEST

        async def arm() -> None:
            nth = self._faults.calls["Dispatch"] + 1
            fault = Fault(
                "Dispatch", kind, nth=nth, on_fire=lambda: self._faults.block(*_STATUS_CALLS)
            )
            self._faults.faults.append(fault)

        async def heal() -> None:
            self._faults.unblock()

        self.call(arm())
        try:
            with TurnwireClient(self.address, TOKEN) as client:
                submitted = client.submit(
                    items=[text], model="builtin/echo", replay_policy="never-automatic"
                )
                final = client.wait(submitted.operation.operation_id, timeout=timeout)
        finally:
            self.call(heal())
        assert (final.state.value, final.execution.value) == ("TIMED_OUT", "UNKNOWN"), final
        return final.operation_id

    def wait_terminal(
        self, operation_id: str, token: str = TOKEN, timeout: float = 30.0
    ) -> Operation:
        with TurnwireClient(self.address, token) as client:
            return client.wait(operation_id, timeout=timeout)

    def wait_answering(self, timeout: float = 15.0) -> None:
        """Until the coordinator has its live view of r1 again (after unknown_turn)."""
        deadline = time.monotonic() + timeout
        with AdminClient(self.address, ADMIN_TOKEN) as admin:
            while True:
                (runner,) = admin.runners()
                if runner.answering and runner.incarnation_id:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"r1 not answering after {timeout}s: {runner}")
                time.sleep(0.05)

    def extra_runner(self, name: str) -> str:
        """Start another echo runner the coordinator was not started with; its address."""
        return self.call(self.stack.start_runner(name, executor="echo")).address
