"""The public executor API through its test helper (turnwire.executor, docs/EXECUTORS.md).

Each test runs a function from tests/executor/functions.py the way a runner
does (turnwire.executor.running), against a fake turn, with no runner.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from tests.executor import functions
from tests.support.runner_process import REPO_ROOT
from turnwire.executor import InputItem
from turnwire.executor.testing import run
from turnwire.output_stream import StreamLimits
from turnwire.vocabulary import DeclaredEffect, ErrorReason


@pytest.mark.rule("R13")
def test_an_async_function_streams_its_chunks_in_order_and_returns_its_result() -> None:
    """R13: each emit() is one offset-numbered chunk, in order, before the result."""
    report = run(functions.stream_words, items=["alpha beta", "gamma"], model="m-1")
    assert report.outcome.succeeded
    assert report.outcome.text == "alpha beta gamma"
    assert report.outcome.content_type == "text/plain; charset=utf-8"
    assert report.outcome.metadata == {"words": "3", "model": "m-1"}
    assert [c.offset for c in report.chunks] == [1, 2, 3]
    assert report.streamed_text == "alpha beta gamma "
    assert report.stopped_by is None


def test_a_plain_function_runs_on_a_thread_and_emits_bytes_with_its_content_type() -> None:
    report = run(functions.stream_words_blocking, items=[b"one two"])
    assert report.outcome.succeeded and report.outcome.text == "one two"
    assert [(c.data, c.content_type) for c in report.chunks] == [
        (b"one", "application/x-word"),
        (b"two", "application/x-word"),
    ]


def test_the_context_carries_the_turn_decoded() -> None:
    """The context: operation id, attempt, executor, model, parameters, items, limits."""
    deadline = datetime.now(UTC) + timedelta(minutes=5)
    report = run(
        functions.describe,
        items=[InputItem("i1", "system", "text/plain", b"be brief"), "hello"],
        parameters={"temperature": "0"},
        model="gpt-x",
        provider="acme",
        operation_id="op-42",
        attempt=3,
        executor="llm",
        deadline=deadline,
        heartbeat_timeout=2.0,
    )
    assert report.outcome.succeeded, report.outcome
    assert report.outcome.text.splitlines() == [
        "operation_id=op-42",
        "attempt=3",
        "executor=llm",
        "model=acme/gpt-x",
        "parameters={'temperature': '0'}",
        "items=[('system', 'be brief'), ('user', 'hello')]",
        "principal=tester",
        "has_deadline=True",
        "remaining_known=True",
        "heartbeat_timeout=0:00:02",
    ]


def test_the_logger_carries_the_turns_fields(caplog: pytest.LogCaptureFixture) -> None:
    """ctx.log's lines name the turn (docs/LOGS.md fields), from the function's thread."""
    with caplog.at_level("INFO", logger="turnwire.executor"):
        run(functions.describe, operation_id="op-log", attempt=2, principal="team-a")
    (record,) = [r for r in caplog.records if r.getMessage() == "described the turn"]
    assert (record.operation_id, record.attempt, record.principal) == ("op-log", 2, "team-a")


def test_a_plain_function_sees_the_cancel_and_settles_cancelled() -> None:
    """A thread cannot be interrupted: ctx.cancelled / check_cancelled() is how it stops."""
    report = run(functions.wait_for_cancel, cancel_after=0.1)
    assert report.stopped_by == "CANCEL"
    assert not report.outcome.succeeded and report.outcome.reason == ErrorReason.CANCELLED
    assert report.heartbeats > 0


def test_an_async_function_is_cancelled_at_its_await() -> None:
    report = run(functions.sleep_async, cancel_after=0.1, parameters={"seconds": "30"})
    assert report.stopped_by == "CANCEL" and report.outcome.reason == ErrorReason.CANCELLED
    assert report.streamed_text == "started"


@pytest.mark.rule("R12")
def test_an_executor_that_stops_heartbeating_is_stopped_for_it() -> None:
    """R12 as the helper plays it: silence past the heartbeat timeout stops the turn."""
    report = run(functions.go_silent, heartbeat_timeout=0.2, parameters={"beats": "3"})
    assert report.stopped_by == "HEARTBEAT" and report.heartbeats == 3
    assert report.outcome.reason == ErrorReason.CANCELLED


@pytest.mark.rule("R7")
@pytest.mark.parametrize(
    ("how", "effect", "retry_after", "message"),
    [
        ("plain", None, None, "TurnFailed: the provider refused the prompt"),
        ("no_effect", DeclaredEffect.NONE, 1.5, "RetryableNoEffect: provider said 429"),
        ("after_effect", DeclaredEffect.APPLIED, None, "FailedAfterEffect: tokens were billed"),
        ("value", None, None, "ValueError: a bug"),
    ],
)
def test_typed_errors_declare_their_effect(
    how: str, effect: DeclaredEffect | None, retry_after: float | None, message: str
) -> None:
    """R7: RetryableNoEffect declares NONE (with its retry hint), FailedAfterEffect
    APPLIED; TurnFailed and any other exception declare nothing (unknown)."""
    outcome = run(functions.fail_as_asked, parameters={"how": how}).outcome
    assert not outcome.succeeded and outcome.reason == ErrorReason.EXECUTOR_FAILED
    assert (outcome.effect, outcome.retry_after) == (effect, retry_after)
    assert outcome.message.startswith(message)


@pytest.mark.rule("R13")
def test_chunks_past_the_limits_are_refused_to_the_function_and_the_turn_goes_on() -> None:
    """R13: CHUNK_TOO_LARGE, then STREAM_BUDGET_EXHAUSTED, raised by emit(); the
    function carries on and succeeds; only the accepted chunks were streamed."""
    limits = StreamLimits(max_chunk_bytes=2000, turn_budget_bytes=5500)
    report = run(functions.emit_past_limits, limits=limits)
    assert report.outcome.succeeded and report.outcome.text == "sent=5"
    assert report.outcome.metadata["refusals"] == "CHUNK_TOO_LARGE,STREAM_BUDGET_EXHAUSTED"
    assert [r.reason for r in report.refused] == ["CHUNK_TOO_LARGE", "STREAM_BUDGET_EXHAUSTED"]
    assert len(report.chunks) == 5


def test_a_return_value_that_is_no_result_fails_result_invalid() -> None:
    outcome = run(functions.returns_nonsense).outcome
    assert outcome.reason == ErrorReason.RESULT_INVALID and "returned int" in outcome.message


def test_a_class_keeps_its_state_across_turns() -> None:
    """A class target: one instance, its run(ctx) per turn (as python:<module>:<Class>)."""
    counter = functions.Counter()
    first = run(counter.run, operation_id="a").outcome.text
    second = run(counter.run, operation_id="b").outcome.text
    assert (first, second) == ("call 1 for a", "call 2 for b")


def test_the_api_imports_nothing_beyond_the_standard_library() -> None:
    """The client install's promise: turnwire.executor (and its test helper) import
    no gRPC, protobuf, SQLAlchemy or service code, in a fresh interpreter."""
    probe = (
        "import sys, turnwire.executor, turnwire.executor.testing, turnwire.executor.running\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'grpc', 'google', 'sqlalchemy', 'runner_svc', 'coordinator_svc'})\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"
