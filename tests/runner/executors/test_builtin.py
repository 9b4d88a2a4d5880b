"""The built-in test executors: echo, sleep and fail (PROTOCOL.md R10)."""

from __future__ import annotations

import asyncio

import pytest

from runner_svc.executors import ExecutorStartError, load_executor
from tests.runner.executors.turns import make_request, settle


def run(spec: str, **kwargs: object):
    async def scenario():
        handle = await load_executor(spec).start(make_request(**kwargs))
        return await settle(handle)

    return asyncio.run(scenario())


@pytest.mark.rule("R10")
def test_echo_returns_concatenated_input_contents() -> None:
    """R10: echo succeeds with the input items' contents joined in order."""
    outcome = run("echo")
    assert outcome.succeeded
    assert outcome.output == b"hello world"
    assert outcome.content_type == "text/plain"
    assert outcome.error_reason == ""


@pytest.mark.rule("R10")
def test_echo_returns_the_output_parameter_when_given() -> None:
    """R10: the "output" parameter replaces the echoed input."""
    outcome = run("echo", parameters={"output": "canned answer"})
    assert outcome.succeeded
    assert outcome.output == b"canned answer"
    assert outcome.content_type.startswith("text/plain")


@pytest.mark.rule("R10")
def test_echo_fails_when_the_fail_parameter_is_set() -> None:
    """R10: "fail": "1" makes any built-in fail with EXECUTOR_FAILED."""
    outcome = run("echo", parameters={"fail": "1"})
    assert not outcome.succeeded
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert outcome.output == b""


@pytest.mark.rule("R10")
def test_fail_executor_always_fails() -> None:
    """R10: the fail executor fails with EXECUTOR_FAILED without any parameter."""
    outcome = run("fail")
    assert not outcome.succeeded
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert "fail" in outcome.error_message


@pytest.mark.rule("R10")
def test_sleep_executor_sleeps_then_echoes() -> None:
    """R10: sleep honours "sleep_ms" and then succeeds like echo."""
    outcome = run("sleep", parameters={"sleep_ms": "20", "output": "rested"})
    assert outcome.succeeded
    assert outcome.output == b"rested"


@pytest.mark.rule("R6")
def test_cancel_stops_a_sleeping_execution_which_then_settles_cancelled() -> None:
    """R6: cancel stops a long sleep; wait() then settles with CANCELLED."""

    async def scenario():
        handle = await load_executor("sleep").start(make_request(parameters={"sleep_ms": "600000"}))
        await handle.cancel(grace_seconds=1.0)
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert not outcome.succeeded
    assert outcome.error_reason == "CANCELLED"


@pytest.mark.rule("R10")
def test_wait_returns_the_same_outcome_every_time() -> None:
    """R10: wait() may be awaited repeatedly and keeps returning the settled outcome."""

    async def scenario():
        handle = await load_executor("echo").start(make_request())
        first = await settle(handle)
        await handle.cancel(grace_seconds=0.1)  # after settlement: a no-op
        return first, await settle(handle)

    first, second = asyncio.run(scenario())
    assert first == second
    assert first.succeeded


@pytest.mark.rule("R3")
@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"sleep_ms": "soon"}, "sleep_ms"),
        ({"sleep_ms": "-5"}, "sleep_ms"),
        ({"fail": "maybe"}, "fail"),
    ],
)
def test_bad_parameters_refuse_to_start(parameters: dict[str, str], named: str) -> None:
    """R3: a knob that does not parse raises ExecutorStartError (nothing ran), naming it."""

    async def scenario() -> None:
        await load_executor("echo").start(make_request(parameters=parameters))

    with pytest.raises(ExecutorStartError, match=named):
        asyncio.run(scenario())
