"""A real coordinator + runner on 127.0.0.1:0, served from a background event loop.

The sync client (and the CLI) call them over real channels from the test
thread; the services are turnwire.testing's in-process Stack, served by a
StackThread. Everything starts in `__enter__` and is stopped in `__exit__`; no
subprocess is involved.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import runner_access
from turnwire.client import RetryPolicy, TurnwireClient
from turnwire.faults import FaultProxy, FaultStats, start_proxy
from turnwire.testing.stack import Stack, StackThread
from turnwire.transport_security import TlsMaterial

TOKEN = "tok-alice-e2e"
OTHER_TOKEN = "tok-bob-e2e"
# Quick retries for tests that lose messages on purpose.
FAST_RETRY = RetryPolicy(attempts=4, initial_backoff=0.05, max_backoff=0.2)


class LiveStack(StackThread):
    """One runner (built-in echo executor) and one coordinator with two principals."""

    def __init__(self, directory: Path, *, tls: TlsMaterial | None = None) -> None:
        """``tls``: the coordinator's TlsMaterial for its public API (None: plaintext)."""
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self._tls = tls
        self._proxy: FaultProxy | None = None
        self.address = ""
        self.runner_address = ""
        # The coordinator seen through a fault proxy (turnwire.faults), for lost replies.
        self.proxy_address = ""

    async def _start(self) -> None:
        runner = await self.stack.start_runner("r1", executor="echo")
        self.stack.add_token("alice", TOKEN)
        self.stack.add_token("bob", OTHER_TOKEN)
        self.address = (await self.stack.start_coordinator(tls=self._tls)).address
        self.runner_address = runner.address
        self._proxy = proxy = await start_proxy(self.address)
        self.stack.defer(proxy.stop)
        self.proxy_address = proxy.address

    @property
    def proxy(self) -> FaultProxy:
        assert self._proxy is not None, "the stack is not started"
        return self._proxy

    def add_fault(self, rule: str) -> None:
        """Add a fault rule (turnwire.faults.rules text) to the proxy, on its own loop."""

        async def add() -> None:
            self.proxy.add_rule(rule)

        self.call(add())

    def restart_coordinator(self) -> None:
        """Stop the coordinator and start it again on the same address and journal (C12)."""
        self.call(self.stack.restart_coordinator())

    def fault_stats(self) -> FaultStats:
        """The proxy's FaultStats (cumulative since the stack started)."""

        async def stats() -> FaultStats:
            return self.proxy.stats()

        return self.call(stats())

    def clear_faults(self) -> None:
        async def clear() -> None:
            self.proxy.clear_rules()

        self.call(clear())


def operation_count(client: TurnwireClient) -> int:
    """How many operations the client's principal has (every page)."""
    return sum(len(page.operations) for page in client.list(page_size=100))
