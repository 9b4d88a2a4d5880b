"""Issue 8.2: a watch cancelled as its poll times out must not freeze watching.

The old ChangeFeed held an asyncio.Condition lock across ``asyncio.wait_for``;
on Python 3.11 a cancel landing while the timed-out inner wait re-acquired the
lock left it held with no owner: every later watch hung, and so did SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import grpc

from coordinator_svc.feed import ChangeFeed
from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

POLL = 0.02  # the in-process poll timeout (seconds)
STORM_WAITERS = 3_000
STORM_SEED = 82
STEP_TIMEOUT = 5.0


async def _fresh_wait_returns_on_publish(feed: ChangeFeed, operation_id: str) -> bool:
    """A new wait_past, with no timeout of its own, returns when its operation changes."""
    with feed.watching(operation_id):
        fresh = asyncio.create_task(feed.wait_past(operation_id, feed.mark(operation_id), 60))
        await asyncio.sleep(0.005)
        feed.publish(operation_id)
        done, _ = await asyncio.wait([fresh], timeout=STEP_TIMEOUT)
        fresh.cancel()
        await asyncio.gather(fresh, return_exceptions=True)
        return bool(done)


def _run_bounded(main: Coroutine[Any, Any, None], budget: float) -> None:
    """Run ``main`` on a new loop for at most ``budget`` seconds.

    Unlike asyncio.run, never waits unboundedly for tasks that ignore
    cancellation (the old feed's wedged waits did): a wedge fails the test.
    """
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(main)
        loop.run_until_complete(asyncio.wait([task], timeout=budget))
        if not task.done():
            raise AssertionError(f"not done within {budget}s: the watch machinery is wedged")
        task.result()
    finally:
        left = asyncio.all_tasks(loop)
        for other in left:
            other.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=2.0))
        loop.close()


def _outcomes(waits: list[asyncio.Task[None]]) -> list[BaseException | None]:
    """What each ended wait raised: only None (returned) or a cancel is acceptable."""
    return [None if w.cancelled() else w.exception() for w in waits]


def test_a_watcher_cancelled_as_its_poll_times_out_leaves_the_feed_working() -> None:
    """Two watchers time out in one loop iteration; one is cancelled k iterations later.

    The loop is blocked past both timers so they fire together; sweeping k
    covers the iterations where the old wait re-acquired the lock (k = 4, 5 on
    3.11.7): it raised 'Lock is not acquired' and every later wait hung.
    """

    async def trial(k: int, feed: ChangeFeed) -> tuple[bool, list[BaseException | None]]:
        with feed.watching("op_a"):
            waits = [
                asyncio.create_task(feed.wait_past("op_a", feed.mark("op_a"), POLL))
                for _ in range(2)
            ]
            for _ in range(3):
                await asyncio.sleep(0)  # both are waiting now
            # Block the loop on purpose: both poll timers are due and fire in one iteration.
            time.sleep(POLL * 2)  # noqa: ASYNC251
            for _ in range(k):
                await asyncio.sleep(0)
            waits[-1].cancel()
            await asyncio.wait(waits, timeout=STEP_TIMEOUT)
        assert all(w.done() for w in waits)
        return await _fresh_wait_returns_on_publish(feed, "op_a"), _outcomes(waits)

    async def main() -> None:
        feeds: list[ChangeFeed] = []
        for k in range(10):
            feed = ChangeFeed()
            woke, outcomes = await trial(k, feed)
            assert woke, f"k={k}: a fresh watch no longer wakes on publish"
            feeds.append(feed)
            assert all(o is None or isinstance(o, asyncio.CancelledError) for o in outcomes), (
                k,
                outcomes,
            )
        assert [feed.waiting for feed in feeds] == [0] * len(feeds)

    _run_bounded(main(), 20)


def test_thousands_of_watches_cancelled_around_the_poll_timeout() -> None:
    """A seeded storm of cancels at random offsets around the poll timeout, with
    commits landing meanwhile; afterwards nothing is left waiting and a fresh
    watch still wakes on its operation's change."""

    async def main() -> None:
        rng = random.Random(STORM_SEED)
        loop = asyncio.get_running_loop()
        feed = ChangeFeed()
        operations = [f"op_{i}" for i in range(4)]

        async def watch(operation_id: str) -> None:
            with feed.watching(operation_id):
                for _ in range(3):  # a few polls, as a stream does
                    await feed.wait_past(operation_id, feed.mark(operation_id), POLL)

        waits: list[asyncio.Task[None]] = []
        for batch in range(STORM_WAITERS // 100):
            for _ in range(100):
                task = loop.create_task(watch(rng.choice(operations)))
                offset = POLL * rng.choice((1, 2, 3)) + rng.uniform(-0.003, 0.003)
                loop.call_later(max(0.0, offset), task.cancel)
                waits.append(task)
            if batch % 3 == 0:
                loop.call_later(POLL + rng.uniform(-0.003, 0.003), feed.publish, "op_0")
            await asyncio.sleep(rng.uniform(0, POLL / 4))
        await asyncio.wait(waits, timeout=10)
        assert all(w.done() for w in waits)
        outcomes = _outcomes(waits)
        assert all(o is None or isinstance(o, asyncio.CancelledError) for o in outcomes)
        assert sum(w.cancelled() for w in waits) > STORM_WAITERS // 2  # the storm happened
        assert feed.waiting == 0
        for operation_id in operations:
            assert await _fresh_wait_returns_on_publish(feed, operation_id), operation_id

    _run_bounded(main(), 20)


# --- end to end: a real coordinator process ---------------------------------------

E2E_STREAMS = 200  # concurrent WatchOperation streams
E2E_ROUNDS = 3  # each is opened and cancelled this many times
SERVER_POLL = 1.0  # TurnServicer's watch poll; the coordinator has no flag for it
# After sending, the server re-reads the journal before it starts its poll; under
# the storm that lags the client's receipt by 0-0.5 s, so cancels are spread over
# [poll, poll + 0.5 s] after receipt. (With the old feed this wedged 10 runs in 10.)
E2E_JITTER = (0.0, 0.5)
E2E_BUDGET = 40.0  # seconds for the whole client side, wedged or not
SHUTDOWN_GRACE = 2.0
START_TIMEOUT = 30.0
EXIT_TIMEOUT = SHUTDOWN_GRACE + 8.0


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")}


def _wait_for_address(proc: subprocess.Popen[bytes], path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"coordinator did not announce its address; exit {proc.poll()}")


def _watch(stub: Any, token: str, operation_id: str) -> Any:
    return stub.WatchOperation(
        coordinator_pb2.WatchOperationRequest(operation_id=operation_id),
        metadata=bearer(token),
        timeout=60,
    )


async def _storm_then_watch(address: str, token: str) -> None:
    """Cancel E2E_STREAMS watches around the server's poll, then watch a live one end."""
    rng = random.Random(STORM_SEED)
    channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
    try:
        stubs = [coordinator_pb2_grpc.TurnServiceStub(c) for c in channels]
        live = await stubs[0].SubmitTurn(
            submit_request("storm"), metadata=bearer(token), timeout=10
        )
        live_id = live.operation.operation_id

        async def watch_then_cancel(index: int) -> None:
            for _ in range(E2E_ROUNDS):
                call = _watch(stubs[index % len(stubs)], token, live_id)
                first = await asyncio.wait_for(call.read(), 20)
                assert first is not grpc.aio.EOF
                # The server starts its poll just after sending: cancel around its end.
                await asyncio.sleep(SERVER_POLL + rng.uniform(*E2E_JITTER))
                call.cancel()

        storm = [asyncio.create_task(watch_then_cancel(i)) for i in range(E2E_STREAMS)]
        await asyncio.gather(*storm)

        # A fresh watch of a live operation still delivers its terminal state.
        fresh_op = await stubs[1].SubmitTurn(
            submit_request("fresh"), metadata=bearer(token), timeout=10
        )
        fresh_id = fresh_op.operation.operation_id
        call = _watch(stubs[2], token, fresh_id)
        assert (await asyncio.wait_for(call.read(), 10)) is not grpc.aio.EOF
        await asyncio.sleep(0.1)  # the server is parked in its poll now
        await stubs[3].CancelOperation(
            coordinator_pb2.CancelOperationRequest(operation_id=fresh_id),
            metadata=bearer(token),
            timeout=10,
        )
        terminal = None
        for _ in range(50):
            try:
                message = await asyncio.wait_for(call.read(), 5 * SERVER_POLL)
            except TimeoutError:
                raise AssertionError("a fresh watch hangs: the feed is wedged") from None
            if message is grpc.aio.EOF:
                break
            terminal = message
        assert terminal is not None
        assert terminal.event.to_state == coordinator_pb2.OPERATION_STATE_CANCELLED
        assert terminal.operation.state == coordinator_pb2.OPERATION_STATE_CANCELLED
    finally:
        for channel in channels:
            await channel.close()


def test_cancel_storm_against_a_real_coordinator_then_sigterm_exits(tmp_path: Path) -> None:
    """E2E_STREAMS WatchOperation streams cancelled at random around the poll timeout:
    a fresh watch still ends with its terminal state, and SIGTERM still exits."""
    command = [sys.executable, "-m", "coordinator_svc"]
    added = subprocess.run(
        [*command, "tokens", "add", "--file", str(tmp_path / "tokens"), "--principal", "alice"],
        capture_output=True, text=True, timeout=60, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    address_file = tmp_path / "address"
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        proc = subprocess.Popen(
            [*command, "serve", "--listen", "127.0.0.1:0", "--migrate",
             "--journal-url", f"sqlite:///{tmp_path / 'journal.db'}",
             "--tokens-file", str(tmp_path / "tokens"),
             "--runner", f"r1=127.0.0.1:{_closed_port()};pool=default",
             "--address-file", str(address_file), "--log-level", "WARNING",
             "--shutdown-grace", str(SHUTDOWN_GRACE), *runner_access.coordinator_flags(),
             # One principal's storm of E2E_STREAMS watches: above the default
             # per-principal stream limit (issue 11), which is not what this tests.
             "--max-streams-per-principal", str(2 * E2E_STREAMS)],
            stdout=out, stderr=err, env=_env(), cwd=tmp_path,
        )  # fmt: skip
    try:
        address = _wait_for_address(proc, address_file)
        problems = []
        try:
            _run_bounded(_storm_then_watch(address, token), E2E_BUDGET)
        except AssertionError as failed:  # still check SIGTERM, then report both
            problems.append(f"watch: {failed}")
        os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            problems.append(f"SIGTERM: still running after {EXIT_TIMEOUT}s")
        else:
            if code != 0:
                problems.append(f"exit {code}: {(tmp_path / 'err').read_text()[-2000:]}")
        assert not problems, problems
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=EXIT_TIMEOUT)
