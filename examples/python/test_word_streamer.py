"""How to test an executor without a runner (docs/EXECUTORS.md, "Testing an executor").

cd examples/python && python -m pytest test_word_streamer.py
"""

from word_streamer import stream_reply

from turnwire.executor.testing import run


def test_it_streams_each_word_then_returns_the_reply():
    report = run(stream_reply, items=["hello streaming world"], parameters={"pause_ms": "1"})
    assert report.outcome.succeeded
    assert report.outcome.text == "HELLO STREAMING WORLD"
    assert [chunk.data for chunk in report.chunks] == [b"HELLO ", b"STREAMING ", b"WORLD "]
    assert report.heartbeats == 3


def test_a_429_is_retryable_with_no_effect():
    outcome = run(stream_reply, items=["hi"], parameters={"fail": "429"}).outcome
    assert outcome.effect == "NONE" and outcome.retry_after == 2.0


def test_a_cancel_stops_it_at_its_next_await():
    report = run(
        stream_reply, items=["a b c d e f"], parameters={"pause_ms": "200"}, cancel_after=0.3
    )
    assert report.stopped_by == "CANCEL" and report.outcome.reason == "CANCELLED"
    assert len(report.chunks) < 6
