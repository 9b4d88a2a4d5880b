"""The SDK against a real coordinator and runner over real channels (PROTOCOL.md §7)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from turnwire.client import (
    AsyncTurnwireClient,
    CheckCredentials,
    Execution,
    NotFound,
    OperationState,
    TurnwireClient,
    UseANewIdempotencyKey,
)

from .live_stack import OTHER_TOKEN, TOKEN, LiveStack

pytestmark = pytest.mark.timeout(90)
WAIT = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("live-sdk")) as live:
        yield live


@pytest.fixture
def client(stack: LiveStack) -> Iterator[TurnwireClient]:
    with TurnwireClient(stack.address, TOKEN) as sync_client:
        yield sync_client


def test_submit_and_wait_returns_the_echoed_result(client: TurnwireClient) -> None:
    """§7: a submitted turn runs once and its typed status shows SUCCEEDED, STARTED, result."""
    submitted = client.submit(items=["hello"], model="builtin/echo")
    assert submitted.replayed is False
    final = client.wait(submitted.operation.operation_id, timeout=WAIT)
    assert final.state is OperationState.SUCCEEDED
    assert final.execution is Execution.STARTED
    assert final.result is not None and final.result.output == b"hello"
    assert final.attempt_count == 1 and final.runner == "r1"
    assert final.finished_at is not None


def test_the_same_key_returns_the_same_operation_and_a_different_turn_is_refused(
    client: TurnwireClient,
) -> None:
    """§7: same key + same turn -> replayed, same id; same key + other turn -> KEY_REUSED."""
    first = client.submit(items=["once"], idempotency_key="e2e-key-1")
    again = client.submit(items=["once"], idempotency_key="e2e-key-1")
    assert again.replayed is True
    assert again.operation.operation_id == first.operation.operation_id
    with pytest.raises(UseANewIdempotencyKey) as raised:
        client.submit(items=["twice"], idempotency_key="e2e-key-1")
    assert raised.value.reason == "IDEMPOTENCY_KEY_REUSED"


def test_watch_streams_every_transition_and_resumes_from_a_cursor(
    client: TurnwireClient,
) -> None:
    """§7: watch yields increasing sequences ending terminal; resuming skips what was seen."""
    submitted = client.submit(items=["w"], parameters={"sleep_ms": "200"})
    operation_id = submitted.operation.operation_id
    events = list(client.watch(operation_id, timeout=WAIT))
    sequences = [event.sequence for event in events]
    assert sequences == sorted(set(sequences)) and sequences[0] >= 1
    assert events[-1].to_state is OperationState.SUCCEEDED
    resumed = list(client.watch(operation_id, after_sequence=sequences[0], timeout=WAIT))
    assert [event.sequence for event in resumed] == sequences[1:]


@pytest.mark.rule("C11")
def test_cancel_of_a_running_turn_ends_cancelled_or_shows_it_lost_the_race(
    client: TurnwireClient,
) -> None:
    """C11: the first stop reason wins; the final state is whatever the runner settles."""
    submitted = client.submit(items=["slow"], parameters={"sleep_ms": "5000"})
    operation_id = submitted.operation.operation_id
    client.cancel(operation_id)
    final = client.wait(operation_id, timeout=WAIT)
    assert final.cancel_requested is True
    assert final.state in {OperationState.CANCELLED, OperationState.SUCCEEDED}
    assert final.cancel_lost_race is (final.state is OperationState.SUCCEEDED)


def test_another_principals_operation_is_not_found(
    stack: LiveStack, client: TurnwireClient
) -> None:
    """§7/§8.8: another principal's id reads exactly like a random one: NotFound."""
    mine = client.submit(items=["private"]).operation.operation_id
    with TurnwireClient(stack.address, OTHER_TOKEN) as bob:
        with pytest.raises(NotFound) as raised:
            bob.get(mine)
        assert raised.value.reason == "OPERATION_NOT_FOUND"
        with pytest.raises(NotFound):
            bob.get("op_" + "0" * 32)


def test_a_wrong_token_is_told_to_check_credentials(stack: LiveStack) -> None:
    """§7: an unknown or missing token -> CheckCredentials, with the reason."""
    with TurnwireClient(stack.address, "not-a-token") as stranger:
        with pytest.raises(CheckCredentials) as raised:
            stranger.get("op_1")
        assert raised.value.reason == "CREDENTIALS_UNKNOWN"
    with TurnwireClient(stack.address, None) as anonymous:
        with pytest.raises(CheckCredentials) as raised:
            anonymous.get("op_1")
        assert raised.value.reason == "CREDENTIALS_MISSING"


def test_list_includes_submitted_operations(client: TurnwireClient) -> None:
    """list pages through this principal's operations."""
    operation_id = client.submit(items=["listed"]).operation.operation_id
    seen = [op.operation_id for page in client.list(page_size=2) for op in page.operations]
    assert operation_id in seen


def test_async_client_submits_and_waits(stack: LiveStack) -> None:
    """The asyncio client has the same surface: submit, watch/wait, replay by key."""

    async def scenario() -> None:
        async with AsyncTurnwireClient(stack.address, TOKEN) as aclient:
            submitted = await aclient.submit(items=["async"], idempotency_key="e2e-async-1")
            again = await aclient.submit(items=["async"], idempotency_key="e2e-async-1")
            assert (
                again.replayed and again.operation.operation_id == submitted.operation.operation_id
            )
            final = await aclient.wait(submitted.operation.operation_id, timeout=WAIT)
            assert final.state is OperationState.SUCCEEDED
            events = [e async for e in aclient.watch(submitted.operation.operation_id)]
            assert events[-1].to_state is OperationState.SUCCEEDED

    asyncio.run(scenario())
