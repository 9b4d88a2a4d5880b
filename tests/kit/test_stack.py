"""turnwire.testing.stack: the in-process stack stands a real system up and leaves
nothing behind (every server it started is stopped, whatever the test did)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from turnwire.client import AsyncTurnwireClient, TurnwireClient
from turnwire.testing.stack import Stack, StackThread


def _refused(address: str) -> bool:
    """Nothing listens at ``address`` (a connection is refused at once)."""
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, int(port))) != 0


def test_a_turn_runs_end_to_end_and_close_stops_every_server(tmp_path: Path) -> None:
    """A runner and a coordinator from the stack run a turn to SUCCEEDED over real gRPC on
    127.0.0.1; after close nothing listens at any address it served, the runner that
    a test replaced under the same name included."""

    async def scenario() -> list[str]:
        async with Stack(tmp_path) as stack:
            first = await stack.start_runner("r1", executor="echo")
            await first.stop(drain=False)  # the test stops one itself...
            again = await stack.start_runner("r1", executor="echo")  # ...and starts another
            token = stack.add_token("alice")
            coordinator = await stack.start_coordinator()
            async with AsyncTurnwireClient(coordinator.address, token) as client:
                done = await client.submit_and_wait(items=["hi"], model="builtin/echo")
            assert done.state.name == "SUCCEEDED", done
            restarted = await stack.restart_coordinator()
            assert restarted.address == coordinator.address  # C12: same address, same journal
            return [first.address, again.address, restarted.address]

    for address in asyncio.run(scenario()):
        assert _refused(address), address


def test_a_postgresql_journal_runs_the_same_turn(tmp_path: Path, postgres_url: str) -> None:
    """Given a PostgreSQL URL the stack migrates that journal and its coordinator
    runs a turn on it exactly as on its SQLite file."""

    async def scenario() -> None:
        async with Stack(tmp_path, journal_url=postgres_url) as stack:
            await stack.start_runner("r1", executor="echo")
            token = stack.add_token("alice")
            coordinator = await stack.start_coordinator()
            assert coordinator.config.journal_url == postgres_url
            async with AsyncTurnwireClient(coordinator.address, token) as client:
                done = await client.submit_and_wait(items=["hi"], model="builtin/echo")
            assert done.state.name == "SUCCEEDED", done

    asyncio.run(scenario())
    assert not (tmp_path / "journal.db").exists()


def test_a_stack_thread_serves_synchronous_callers_and_stops_on_exit(tmp_path: Path) -> None:
    """StackThread runs the stack on its own loop: the blocking client reaches it, and
    leaving the with block stops the servers and the loop."""

    class Served(StackThread):
        async def _start(self) -> None:
            await self.stack.start_runner("r1", executor="echo")
            self.stack.add_token("alice", "tok-kit")
            await self.stack.start_coordinator()

    with Served(Stack(tmp_path)) as served:
        address = served.stack.address
        with TurnwireClient(address, "tok-kit") as client:
            done = client.submit_and_wait(items=["hi"], model="builtin/echo", timeout=30)
        assert done.state.name == "SUCCEEDED", done
        assert served.serving()
    assert not served.serving()
    assert _refused(address)
