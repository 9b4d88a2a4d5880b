"""A live coordinator with its console, and one runner, on 127.0.0.1:0 (in-process).

turnwire.testing's Stack served by a StackThread, as tests/sdk/live_stack.py
does; the tests talk to it over real sockets (HTTP to the console, gRPC to the API).
Three tokens: ``ADMIN_TOKEN`` (principal ``ops``, scope admin), ``TENANT_TOKEN``
(``alice``, the default submit/read/cancel) for submitting turns, and the
same tenant token is what a non-admin caller presents to the console.

``make_ambiguous()`` produces one operation whose execution is honestly
UNKNOWN: the first Dispatch reaches the runner (which runs it) but its reply
is lost, and the runner then stays unreachable for status and cancel until
the reconcile deadline (0.5 s here) ends the turn TIMED_OUT, UNKNOWN (C8).
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator_svc.api.tokens_file import Scope
from coordinator_svc.config import DispatchTimings
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.client import TurnwireClient
from turnwire.testing.stack import Stack, StackThread

ADMIN_TOKEN = "tok-ops-console-admin"
TENANT_TOKEN = "tok-alice-console"
# What the coordinator may not hear from the runner while a turn is made ambiguous.
_SILENCED = ("GetOperationStatus", "BatchGetOperationStatus", "WatchOperations", "Cancel")


class ConsoleStack(StackThread):
    """One runner (echo executor), one coordinator with ``--console-listen 127.0.0.1:0``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        # The first Dispatch's reply is lost and the runner goes silent (make_ambiguous).
        self.faults = FaultInterceptor()
        self.faults.faults.append(
            Fault("Dispatch", DROP_RESPONSE, nth=1, on_fire=lambda: self.faults.block(*_SILENCED))
        )
        self.address = ""
        self.ambiguous_id = ""  # set by the package fixture (conftest.py)
        self.console_url = ""
        self.console_address = ""

    async def _start(self) -> None:
        await self.stack.start_runner("r1", executor="echo")
        self.stack.add_token("ops", ADMIN_TOKEN, scopes={Scope.ADMIN})
        self.stack.add_token("alice", TENANT_TOKEN)
        coordinator = await self.stack.start_coordinator(
            interceptors=self.faults.all(),
            timings=replace(DispatchTimings(), reconcile_deadline=0.5, backoff_max=0.2),
            console_listen="127.0.0.1:0",
        )
        self.address = coordinator.address
        assert coordinator.console is not None
        self.console_url = coordinator.console.url
        self.console_address = coordinator.console.address

    def client(self) -> TurnwireClient:
        return TurnwireClient(self.address, TENANT_TOKEN)

    def make_ambiguous(self) -> str:
        """The first turn of the stack: TIMED_OUT with execution UNKNOWN (see above)."""
        with self.client() as client:
            operation_id = client.submit(items=["did it run?"]).operation.operation_id
            final = client.wait(operation_id, timeout=20)
        self.faults.unblock()
        assert final.execution.name == "UNKNOWN", final
        return operation_id

    def run_turns(self, *parameters: dict[str, str]) -> list[str]:
        """One turn per ``parameters`` (echo executor knobs), each waited to its end."""
        ids = []
        with self.client() as client:
            for params in parameters:
                operation_id = client.submit(items=["hello"], parameters=params)
                ids.append(operation_id.operation.operation_id)
            for operation_id_text in ids:
                client.wait(operation_id_text, timeout=20)
        return ids

    # --- the console over HTTP -----------------------------------------------------------

    def http(
        self,
        method: str,
        path: str,
        *,
        token: str | None = ADMIN_TOKEN,
        body: Any = None,
        raw_body: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, str], bytes]:
        """One request to the console: (status, headers, body bytes)."""
        host, _, port = self.console_address.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=15)
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        payload = raw_body if raw_body is not None else None
        if body is not None:
            payload = json.dumps(body).encode()
        if payload is not None:
            headers["Content-Type"] = content_type
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def api(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = self.http(method, path, **kwargs)
        return status, json.loads(body)


def wait_until(predicate: Any, seconds: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms until true, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")
