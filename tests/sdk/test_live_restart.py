"""A watch outlives a coordinator restart (PROTOCOL.md §7 cursor resume, C12)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from turnwire.client import OperationEvent, OperationState, RetryPolicy, TurnwireClient

from .live_stack import TOKEN, LiveStack

pytestmark = pytest.mark.timeout(90)
PATIENT = RetryPolicy(attempts=30, initial_backoff=0.05, max_backoff=0.5, total_seconds=20)


@pytest.fixture
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("live-restart")) as live:
        yield live


def test_watch_resumes_across_a_coordinator_restart(stack: LiveStack) -> None:
    """§7: the coordinator restarts mid-watch; the watch reconnects and misses nothing."""
    client = TurnwireClient(stack.address, TOKEN, retries=PATIENT)
    arrived: queue.Queue[OperationEvent | BaseException | None] = queue.Queue()
    try:
        submitted = client.submit(items=["restart"], parameters={"sleep_ms": "1500"})
        operation_id = submitted.operation.operation_id

        def consume() -> None:
            try:
                for event in client.watch(operation_id, timeout=20):
                    arrived.put(event)
                arrived.put(None)
            except BaseException as error:  # handed to the test thread
                arrived.put(error)

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        events: list[OperationEvent] = []
        # Restart only once the runner acknowledged (RUNNING): a restart while
        # DISPATCHING exercises the coordinator's C12 path, not this client.
        while not events or events[-1].to_state is not OperationState.RUNNING:
            item = arrived.get(timeout=20)
            assert isinstance(item, OperationEvent), item
            events.append(item)
        stack.restart_coordinator()
        while True:
            item = arrived.get(timeout=20)
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            events.append(item)
        thread.join(30)
    finally:
        client.close()
    sequences = [event.sequence for event in events]
    assert sequences == list(range(1, len(sequences) + 1))
    assert events[-1].to_state is OperationState.SUCCEEDED
