"""A real coordinator and runners that serve different executors (PROTOCOL C6b).

Each runner is a real gRPC server with its own SQLite store; the coordinator
has a real SQLite journal. A runner may be left *absent*: its address is a
port bound and not listening (every connection refused), so the coordinator
never hears its GetRunnerInfo; ``start_runner`` brings it up there later.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.sdk.live_stack import TOKEN, coordinator_app_or_skip
from tests.support import runner_access
from tests.support.background_loop import BackgroundLoop

# name -> the runner's --executor NAME=SPEC values (None: absent at start).
RunnerPlan = Mapping[str, tuple[str, ...] | None]


def _reserve_port() -> socket.socket:
    """A loopback port bound and not listening: connections to it are refused."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    return holder


class ExecutorStack(BackgroundLoop):
    def __init__(
        self, directory: Path, runners: RunnerPlan, *, queue_timeout: float | None = None
    ) -> None:
        self._app = coordinator_app_or_skip()
        super().__init__()
        self._directory = directory
        self._plan = dict(runners)
        self._queue_timeout = queue_timeout
        self._runners: dict[str, Any] = {}
        self._holders: dict[str, socket.socket] = {}
        self.runner_addresses: dict[str, str] = {}
        self._coordinator: Any = None
        self.address = ""

    async def _runner(self, name: str, executors: tuple[str, ...], listen: str) -> Any:
        from runner_svc.app import RunnerConfig, start_runner

        return await start_runner(
            RunnerConfig(
                store_path=self._directory / f"{name}.db",
                access=runner_access.ACCESS,
                listen=listen,
                executor=None,  # only the named ones (R14)
                executors=executors,
            )
        )

    async def _start(self) -> None:
        from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
        from coordinator_svc.storage.schema import migrate

        for name, executors in sorted(self._plan.items()):
            if executors is None:
                holder = _reserve_port()
                self._holders[name] = holder
                self.runner_addresses[name] = f"127.0.0.1:{holder.getsockname()[1]}"
            else:
                runner = await self._runner(name, executors, "127.0.0.1:0")
                self._runners[name] = runner
                self.runner_addresses[name] = runner.address
        tokens = self._directory / "tokens"
        tokens.write_text(f"alice {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
        tokens.chmod(0o600)
        journal_url = f"sqlite:///{self._directory / 'journal.db'}"
        migrate(journal_url)
        config = CoordinatorConfig(
            listen="127.0.0.1:0",
            journal_url=journal_url,
            runners=tuple(
                RunnerEndpoint(name=name, address=address)
                for name, address in sorted(self.runner_addresses.items())
            ),
            tokens_file=str(tokens),
            runner_credentials=runner_access.CREDENTIALS,
            queue_timeout=self._queue_timeout,
        )
        self._coordinator = await self._app.start_coordinator(config)
        self.address = self._coordinator.address

    def start_runner(self, name: str, executors: tuple[str, ...]) -> None:
        """Bring an absent runner up on its reserved address."""

        async def start() -> None:
            holder = self._holders.pop(name)
            holder.close()
            listen = self.runner_addresses[name]
            self._runners[name] = await self._runner(name, executors, listen)

        self._run(start())

    async def _stop(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.stop()
        for runner in self._runners.values():
            await runner.stop(drain=False)
        for holder in self._holders.values():
            holder.close()


def eventually(check: Callable[[], Any], seconds: float = 20.0) -> Any:
    """Poll ``check`` until it returns something truthy (bounded in time and count)."""
    last: Any = None
    for _ in range(int(seconds / 0.05)):
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds}s; last: {last!r}")
