"""A real coordinator + runner on 127.0.0.1:0, served from a background event loop.

The sync client (and the CLI) call them over real channels from the test
thread. Everything starts in `__enter__` and is stopped in `__exit__`; no
subprocess is involved.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.support import runner_access
from tests.support.background_loop import BackgroundLoop
from turnwire.client import RetryPolicy, TurnwireClient
from turnwire.transport_security import TlsMaterial

TOKEN = "tok-alice-e2e"
OTHER_TOKEN = "tok-bob-e2e"
# Quick retries for tests that lose messages on purpose.
FAST_RETRY = RetryPolicy(attempts=4, initial_backoff=0.05, max_backoff=0.2)


def coordinator_app_or_skip() -> Any:
    """coordinator_svc.app, or skip when that module does not exist (yet)."""
    if importlib.util.find_spec("coordinator_svc.app") is None:
        pytest.skip("coordinator_svc.app not available")
    return importlib.import_module("coordinator_svc.app")


class LiveStack(BackgroundLoop):
    """One runner (built-in echo executor) and one coordinator with two principals."""

    def __init__(self, directory: Path, *, tls: TlsMaterial | None = None) -> None:
        """``tls``: the coordinator's TlsMaterial for its public API (None: plaintext)."""
        self._directory = directory
        self._tls = tls
        self._app = coordinator_app_or_skip()
        super().__init__()
        self._runner: Any = None
        self._coordinator: Any = None
        self._proxy: Any = None
        self._config: Any = None
        self.address = ""
        self.runner_address = ""
        # The coordinator seen through a fault proxy (turnwire.faults), for lost replies.
        self.proxy_address = ""

    async def _start(self) -> None:
        from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
        from coordinator_svc.storage.schema import migrate
        from runner_svc.app import RunnerConfig, start_runner

        self._runner = await start_runner(
            RunnerConfig(
                store_path=self._directory / "runner.db",
                access=runner_access.ACCESS,
                executor="echo",
            )
        )
        tokens = self._directory / "tokens"
        tokens.write_text(
            "".join(
                f"{principal} {hashlib.sha256(token.encode()).hexdigest()}\n"
                for principal, token in (("alice", TOKEN), ("bob", OTHER_TOKEN))
            )
        )
        tokens.chmod(0o600)  # the coordinator refuses a tokens file others may read
        journal_url = f"sqlite:///{self._directory / 'journal.db'}"
        migrate(journal_url)
        config = CoordinatorConfig(
            listen="127.0.0.1:0",
            journal_url=journal_url,
            runners=(RunnerEndpoint(name="r1", address=self._runner.address),),
            tokens_file=str(tokens),
            runner_credentials=runner_access.CREDENTIALS,
            tls=self._tls,
        )
        self._config = config
        self._coordinator = await self._app.start_coordinator(config)
        self.address = self._coordinator.address
        self.runner_address = self._runner.address
        from turnwire.faults import start_proxy

        self._proxy = await start_proxy(self.address)
        self.proxy_address = self._proxy.address

    def add_fault(self, rule: str) -> None:
        """Add a fault rule (turnwire.faults.rules text) to the proxy, on its own loop."""

        async def add() -> None:
            self._proxy.add_rule(rule)

        self._run(add())

    def restart_coordinator(self) -> None:
        """Stop the coordinator and start it again on the same address and journal (C12)."""
        from dataclasses import replace

        async def restart() -> None:
            await self._coordinator.stop()
            config = replace(self._config, listen=self.address)
            self._coordinator = await self._app.start_coordinator(config)

        self._run(restart())

    def fault_stats(self) -> Any:
        """The proxy's FaultStats (cumulative since the stack started)."""

        async def stats() -> Any:
            return self._proxy.stats()

        return self._run(stats())

    def clear_faults(self) -> None:
        async def clear() -> None:
            self._proxy.clear_rules()

        self._run(clear())

    async def _stop(self) -> None:
        if self._proxy is not None:
            await self._proxy.stop()
        if self._coordinator is not None:
            await self._coordinator.stop()
        if self._runner is not None:
            await self._runner.stop(drain=False)


def operation_count(client: TurnwireClient) -> int:
    """How many operations the client's principal has (every page)."""
    return sum(len(page.operations) for page in client.list(page_size=100))
