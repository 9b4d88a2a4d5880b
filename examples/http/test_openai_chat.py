"""The chat executor against the stub server: real HTTP, real server-sent events.

cd examples/http && python -m pytest test_openai_chat.py
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from openai_chat import chat
from stub_server import StubServer

from turnwire.executor.testing import run


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    with StubServer(api_key="sk-test") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server


def test_it_streams_each_token_in_order_and_returns_the_whole_text(stub: StubServer) -> None:
    report = run(chat, items=["tokens as they come"], model="stub-echo", operation_id="op-1")
    assert report.outcome.succeeded, report.outcome.message
    assert [c.data for c in report.chunks] == [b"tokens", b" as", b" they", b" come"]
    assert report.outcome.text == "tokens as they come"
    assert report.outcome.content_type == "text/plain; charset=utf-8"
    assert report.outcome.metadata == {"model": "stub-echo", "finish_reason": "stop", "tokens": "4"}
    assert report.heartbeats >= 4


def test_the_request_carries_the_operation_id_the_key_and_the_parameters(
    stub: StubServer,
) -> None:
    params = {"temperature": "0.5", "max_tokens": "2", "pause_ms": "3"}
    report = run(chat, items=["one two three"], model="stub-echo", parameters=params,
                 operation_id="op-key")  # fmt: skip
    assert report.outcome.text == "one two"
    assert report.outcome.metadata["finish_reason"] == "length"
    (request,) = stub.requests
    assert request.path == "/v1/chat/completions"
    assert request.idempotency_key == "op-key"
    assert request.authorization == "Bearer sk-test"
    assert request.body["stream"] is True
    assert request.body["model"] == "stub-echo"
    assert request.body["messages"] == [{"role": "user", "content": "one two three"}]
    # API parameters typed as the API wants them; an executor's own knob is not sent.
    assert request.body["temperature"] == 0.5 and request.body["max_tokens"] == 2
    assert "pause_ms" not in request.body


def test_a_429_is_retryable_with_no_effect_and_the_servers_retry_after(stub: StubServer) -> None:
    outcome = run(chat, items=["hi"], model="stub-429").outcome
    assert not outcome.succeeded
    assert outcome.reason == "EXECUTOR_FAILED"
    assert outcome.effect == "NONE" and outcome.retry_after == 1.0
    assert "429" in outcome.message


def test_a_503_before_any_token_is_retryable_with_no_effect(stub: StubServer) -> None:
    outcome = run(chat, items=["hi"], model="stub-503").outcome
    assert outcome.effect == "NONE" and outcome.retry_after is None
    assert "503" in outcome.message


def test_the_same_key_is_sent_again_so_the_second_attempt_succeeds(stub: StubServer) -> None:
    """stub-429x1: the first request of a key is refused, the next one streams."""
    first = run(chat, items=["again"], model="stub-429x1", operation_id="op-r", attempt=1)
    second = run(chat, items=["again"], model="stub-429x1", operation_id="op-r", attempt=2)
    assert first.outcome.effect == "NONE"
    assert second.outcome.succeeded and second.outcome.text == "again"
    assert stub.keys() == ["op-r", "op-r"]


def test_a_stream_broken_after_tokens_failed_after_effect(stub: StubServer) -> None:
    report = run(chat, items=["a b c d e"], model="stub-break2")
    assert [c.data for c in report.chunks] == [b"a", b" b"]
    assert report.outcome.effect == "APPLIED"
    assert "after 2 tokens" in report.outcome.message


def test_a_bad_event_after_tokens_failed_after_effect(stub: StubServer) -> None:
    report = run(chat, items=["a b c d e"], model="stub-bad3")
    assert report.outcome.effect == "APPLIED" and "not JSON" in report.outcome.message


def test_a_stream_broken_before_any_token_is_undeclared(stub: StubServer) -> None:
    """After the 200 the provider had accepted the request: nobody knows what it did."""
    outcome = run(chat, items=["a b"], model="stub-break0").outcome
    assert not outcome.succeeded and outcome.effect is None


def test_a_read_timeout_after_the_request_was_sent_is_undeclared(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_TIMEOUT", "0.3")
    outcome = run(chat, items=["hi"], model="stub-hang").outcome
    assert not outcome.succeeded and outcome.effect is None
    assert "ReadTimeout" in outcome.message
    assert len(stub.requests) == 1  # it was sent


def test_a_refused_connection_is_retryable_with_no_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    outcome = run(chat, items=["hi"], model="stub-echo").outcome
    assert outcome.effect == "NONE" and "could not connect" in outcome.message


def test_a_bad_api_key_is_undeclared_not_retryable(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    outcome = run(chat, items=["hi"], model="stub-echo").outcome
    assert outcome.effect is None and "401" in outcome.message


def test_a_cancel_after_tokens_closes_the_stream_and_declares_them(stub: StubServer) -> None:
    report = run(chat, items=["a b c d e f g h i j"], model="stub-slow200", cancel_after=0.5)
    assert report.stopped_by == "CANCEL"
    assert 0 < len(report.chunks) < 10
    assert report.outcome.effect == "APPLIED" and "stopped after" in report.outcome.message


def test_a_cancel_before_any_token_declares_nothing(stub: StubServer) -> None:
    report = run(chat, items=["hi"], model="stub-hang", cancel_after=0.3)
    assert report.stopped_by == "CANCEL" and report.outcome.reason == "CANCELLED"
    assert report.outcome.effect is None and report.chunks == []


def test_a_parameter_that_is_not_a_number_fails_before_anything_is_sent(
    stub: StubServer,
) -> None:
    outcome = run(chat, items=["hi"], parameters={"temperature": "warm"}).outcome
    assert not outcome.succeeded and "temperature" in outcome.message
    assert stub.requests == []
