"""Executors the streaming tests and bench/streaming.py serve.

Served as ``python:tests.streaming.emitters:NAME``.

``count``: emits ``chunks`` chunks (``c1 ``, ``c2 ``, ...) ``pause_ms`` apart
(parameters; defaults 10 and 20), after waiting ``start_ms`` (default 0), and
returns their concatenation (up to RESULT_MAX_CHARS), so a test can compare what it was relayed with
the durable result. ``size`` pads each chunk to that many bytes (a buffer
overflow needs big chunks).
"""

from __future__ import annotations

import asyncio

from turnwire.executor import Result, TurnContext

RESULT_MAX_CHARS = 256 * 1024


def chunk_text(n: int, size: int = 0) -> str:
    """Chunk ``n``'s text (1-based), padded with dots to ``size`` bytes."""
    text = f"c{n} "
    return text + "." * max(0, size - len(text))


async def count(ctx: TurnContext) -> Result:
    chunks = int(ctx.parameters.get("chunks", "10"))
    pause = int(ctx.parameters.get("pause_ms", "20")) / 1000
    size = int(ctx.parameters.get("size", "0"))
    await asyncio.sleep(int(ctx.parameters.get("start_ms", "0")) / 1000)
    sent = []
    for n in range(1, chunks + 1):
        text = chunk_text(n, size)
        ctx.emit(text)
        sent.append(text)
        await asyncio.sleep(pause)
    text = "".join(sent)
    if len(text) > RESULT_MAX_CHARS:  # the result is a message too: keep it small
        text = f"{chunks} chunks, {len(text)} bytes"
    return Result(text, metadata={"chunks": str(chunks)})
