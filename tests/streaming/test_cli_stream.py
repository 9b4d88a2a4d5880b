"""PROTOCOL.md §12 through the `turnwire` command: ``submit --wait --stream`` and
``watch --stream`` print the chunks' raw text as it arrives, then the final summary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import turnwire.cli as cli
from tests.streaming.emitters import chunk_text
from tests.streaming.stack import TOKEN, StreamStack

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[StreamStack]:
    with StreamStack(tmp_path) as running:
        yield running


def run(stack: StreamStack, *argv: str) -> int:
    return cli.main([*argv, "--address", stack.address, "--token", TOKEN])


def _turn(chunks: int, pause_ms: int = 10) -> list[str]:
    return ["-i", "go", "--model", "test/count", "--param", f"chunks={chunks}",
            "--param", f"pause_ms={pause_ms}"]  # fmt: skip


@pytest.mark.rule("S1", "S2", "S3")
def test_submit_wait_stream_prints_the_raw_text_then_the_summary(
    stack: StreamStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """S1-S3: the chunks' text, in order and whole, before the final summary; exit 0."""
    assert run(stack, "submit", *_turn(6), "--wait", "--stream", "--timeout", "30") == 0
    out, err = capsys.readouterr()
    text = "".join(chunk_text(n) for n in range(1, 7))
    headline, rest = out.split("\n", 1)
    assert headline.startswith("submitted op_")
    assert rest.startswith(text + "\n\n")
    assert "SUCCEEDED" in rest[len(text) :]
    assert "lost" not in err


@pytest.mark.rule("S7")
def test_watch_stream_resumes_after_an_offset_and_json_gives_one_line_per_chunk(
    stack: StreamStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """S7: watch --stream --after-offset 2 prints chunks 3.. only; --json: one line each."""
    assert run(stack, "submit", *_turn(5, pause_ms=30), "--json") == 0
    operation_id = json.loads(capsys.readouterr().out.splitlines()[0])["operation_id"]
    assert (
        run(stack, "watch", operation_id, "--stream", "--after-offset", "2", "--exit-status") == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("".join(chunk_text(n) for n in range(3, 6)) + "\n\n")
    assert run(stack, "watch", operation_id, "--stream", "--json") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *chunks, final = lines
    assert [line["chunk"]["offset"] for line in chunks] == [1, 2, 3, 4, 5]
    assert final["state"] == "SUCCEEDED"
