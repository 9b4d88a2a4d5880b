"""A real coordinator and runners that serve different executors (PROTOCOL C6b).

turnwire.testing's in-process Stack, served by a StackThread: each runner a
real gRPC server with its own SQLite store, the coordinator on a real SQLite
journal. A runner may be left *absent*: its address is a port bound and not
listening (every connection refused), so the coordinator never hears its
GetRunnerInfo; ``start_runner`` brings it up there later.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.sdk.live_stack import TOKEN
from tests.support import runner_access
from turnwire.testing.stack import Stack, StackThread

# name -> the runner's --executor NAME=SPEC values (None: absent at start).
RunnerPlan = Mapping[str, tuple[str, ...] | None]


def _reserve_port() -> socket.socket:
    """A loopback port bound and not listening: connections to it are refused."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    return holder


class ExecutorStack(StackThread):
    def __init__(
        self, directory: Path, runners: RunnerPlan, *, queue_timeout: float | None = None
    ) -> None:
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self._plan = dict(runners)
        self._queue_timeout = queue_timeout
        self._holders: dict[str, socket.socket] = {}
        self.runner_addresses = self.stack.runner_addresses
        self.address = ""

    async def _runner(self, name: str, executors: tuple[str, ...], listen: str) -> None:
        # executor=None: only the named ones (R14).
        await self.stack.start_runner(name, listen=listen, executor=None, executors=executors)

    async def _start(self) -> None:
        self.stack.defer(self._release_ports)
        for name, executors in sorted(self._plan.items()):
            if executors is None:
                holder = _reserve_port()
                self._holders[name] = holder
                self.stack.runner_at(name, f"127.0.0.1:{holder.getsockname()[1]}")
            else:
                await self._runner(name, executors, "127.0.0.1:0")
        self.stack.add_token("alice", TOKEN)
        coordinator = await self.stack.start_coordinator(queue_timeout=self._queue_timeout)
        self.address = coordinator.address

    def start_runner(self, name: str, executors: tuple[str, ...]) -> None:
        """Bring an absent runner up on its reserved address."""

        async def start() -> None:
            self._holders.pop(name).close()
            await self._runner(name, executors, self.runner_addresses[name])

        self.call(start())

    async def _release_ports(self) -> None:
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
