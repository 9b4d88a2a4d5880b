"""PROTOCOL.md §12 through the SDK: ``stream`` and ``submit_and_stream``, sync and asyncio,
against the real stack (tests/streaming/stack.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.streaming.emitters import chunk_text
from tests.streaming.stack import TOKEN, StreamStack
from turnwire.client import (
    AsyncTurnwireClient,
    Operation,
    OperationState,
    OutputChunk,
    OutputGap,
    StreamItem,
    TurnFields,
    TurnwireClient,
)

WAIT = 30.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[StreamStack]:
    with StreamStack(tmp_path) as running:
        yield running


def _fields(chunks: int, pause_ms: int = 10) -> TurnFields:
    return {
        "items": ["go"],
        "model": "test/count",
        "parameters": {"chunks": str(chunks), "pause_ms": str(pause_ms)},
    }


def _check(items: Sequence[StreamItem], chunks: int, first: int = 1) -> Operation:
    """Chunks first..chunks in order, no gap, and the terminal Operation last."""
    *output, final = items
    assert isinstance(final, Operation)
    assert final.state is OperationState.SUCCEEDED
    assert not [i for i in output if isinstance(i, OutputGap)]
    assert all(isinstance(i, OutputChunk) for i in output)
    assert [i.offset for i in output if isinstance(i, OutputChunk)] == list(
        range(first, chunks + 1)
    )
    text = "".join(i.text for i in output if isinstance(i, OutputChunk))
    assert text == "".join(chunk_text(n) for n in range(first, chunks + 1))
    return final


@pytest.mark.rule("S1", "S2", "S3", "S4")
def test_sync_submit_and_stream_yields_chunks_then_the_terminal_operation(
    stack: StreamStack,
) -> None:
    """S1-S3 via TurnwireClient.submit_and_stream; the chunks spell the result (S4)."""
    with TurnwireClient(stack.address, TOKEN) as client:
        items = list(client.submit_and_stream(timeout=WAIT, **_fields(8)))
    final = _check(items, 8)
    assert final.result is not None
    assert final.result.output == "".join(chunk_text(n) for n in range(1, 9)).encode()


@pytest.mark.rule("S7")
def test_sync_stream_resumes_from_an_offset(stack: StreamStack) -> None:
    """S7: TurnwireClient.stream(op, after_offset=3) yields 4.. with no gap."""
    with TurnwireClient(stack.address, TOKEN) as client:
        submitted = client.submit(**_fields(6, pause_ms=30))
        op_id = submitted.operation.operation_id
        items = list(client.stream(op_id, after_offset=3, timeout=WAIT))
    _check(items, 6, first=4)


@pytest.mark.rule("S1", "S2", "S3")
def test_async_stream_and_submit_and_stream(stack: StreamStack) -> None:
    """S1-S3 via AsyncTurnwireClient: both iterators, one turn each."""

    async def main() -> tuple[list[StreamItem], list[StreamItem]]:
        async with AsyncTurnwireClient(stack.address, TOKEN) as client:
            streamed = [i async for i in client.submit_and_stream(timeout=WAIT, **_fields(5))]
            submitted = await client.submit(**_fields(7))
            watched = [
                i async for i in client.stream(submitted.operation.operation_id, timeout=WAIT)
            ]
            return streamed, watched

    streamed, watched = asyncio.run(main())
    _check(streamed, 5)
    _check(watched, 7)
