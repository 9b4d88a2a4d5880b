"""The callable executor: a Python function per turn (R10)."""

from __future__ import annotations

import asyncio

import pytest

from runner_svc.executors import load_executor
from tests.runner.executors import turn_functions
from tests.runner.executors.turns import make_request, settle

MODULE = "tests.runner.executors.turn_functions"


def run(function: str, **kwargs: object):
    async def scenario():
        executor = load_executor(f"callable:{MODULE}:{function}")
        return await settle(await executor.start(make_request(**kwargs)))

    return asyncio.run(scenario())


@pytest.mark.rule("R10")
def test_sync_function_returning_str_succeeds_as_text() -> None:
    """R10: a plain function's str result is the UTF-8 output, text/plain."""
    outcome = run("sync_upper")
    assert outcome.succeeded
    assert outcome.output == b"HELLO WORLD"
    assert outcome.content_type.startswith("text/plain")


@pytest.mark.rule("R10")
def test_sync_function_runs_off_the_event_loop_thread() -> None:
    """R10: a plain function runs in its own thread, returning bytes as they are."""
    outcome = run("sync_bytes", operation_id="op-thread")
    assert outcome.succeeded
    operation_id, thread_name = outcome.output.decode().split("|")
    assert operation_id == "op-thread"
    assert thread_name.startswith("callable:")
    assert outcome.content_type == "application/octet-stream"


@pytest.mark.rule("R10")
def test_async_function_is_awaited() -> None:
    """R10: an async function is awaited on the loop and its bytes are the output."""
    request = make_request()

    async def scenario():
        executor = load_executor(f"callable:{MODULE}:async_echo")
        return await settle(await executor.start(request))

    outcome = asyncio.run(scenario())
    assert outcome.succeeded
    assert outcome.output == request.envelope_bytes


@pytest.mark.rule("R10")
def test_a_raising_sync_function_fails_with_the_exception_text() -> None:
    """R10: an exception is EXECUTOR_FAILED carrying its type and message."""
    outcome = run("sync_raises", operation_id="op-boom")
    assert not outcome.succeeded
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert outcome.error_message == "RuntimeError: model exploded for op-boom"


@pytest.mark.rule("R10")
def test_a_raising_async_function_fails_with_the_exception_text() -> None:
    """R10: an async function's exception is EXECUTOR_FAILED too."""
    outcome = run("async_raises")
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert outcome.error_message == "ValueError: bad async turn"


@pytest.mark.rule("R10")
def test_a_result_that_is_not_bytes_or_str_is_result_invalid() -> None:
    """R10: a return value of another type fails the turn with RESULT_INVALID."""
    outcome = run("sync_returns_number")
    assert outcome.error_reason == "RESULT_INVALID"
    assert "int" in outcome.error_message


@pytest.mark.rule("R6")
def test_cancel_stops_an_async_function() -> None:
    """R6: cancel cancels an async function's task; wait() settles CANCELLED."""

    async def scenario():
        executor = load_executor(f"callable:{MODULE}:async_forever")
        handle = await executor.start(make_request())
        await handle.cancel(grace_seconds=1.0)
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert outcome.error_reason == "CANCELLED"


@pytest.mark.rule("R6")
def test_cancel_cannot_interrupt_a_sync_function_so_wait_settles_on_return() -> None:
    """R6: a sync function runs on after cancel; wait() settles only once it has returned."""
    turn_functions.release_slow_sync.clear()

    async def scenario():
        executor = load_executor(f"callable:{MODULE}:slow_sync")
        handle = await executor.start(make_request())
        await handle.cancel(grace_seconds=0.1)
        waiting = asyncio.create_task(handle.wait())
        done, _ = await asyncio.wait({waiting}, timeout=0.3)
        settled_before_release = bool(done)
        turn_functions.release_slow_sync.set()
        return settled_before_release, await settle(handle)

    try:
        settled_before_release, outcome = asyncio.run(scenario())
    finally:
        turn_functions.release_slow_sync.set()
    assert not settled_before_release
    assert outcome.succeeded
    assert outcome.output == b"finished"


def test_loading_a_callable_spec_warns_and_names_its_replacement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deprecation path: callable: still loads and runs as before, and the
    runner says once, at load, to serve a TurnContext function as python: instead."""
    target = "tests.runner.executors.turn_functions:sync_upper"
    with caplog.at_level("WARNING", logger="runner_svc.executors"):
        load_executor(f"callable:{target}")
    (line,) = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert f"callable:{target} is deprecated" in line and f"python:{target}" in line
