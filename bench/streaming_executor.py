"""The executor bench/streaming.py serves: emits chunks on a timer.

``python:bench.streaming_executor:tick`` (the repository's root on the runner's PYTHONPATH):
``chunks`` chunks (default 20) at ``rate`` per second (default 20), each at
its scheduled time (start + n / rate, not "sleep after emit", so the rate
holds however long an emit takes), ``size`` bytes each (default 16).
The runner stamps each chunk's emitted_at (R13), the bench's clock for
emit -> client latency.
"""

from __future__ import annotations

import asyncio
import time

from turnwire.executor import Result, TurnContext


async def tick(ctx: TurnContext) -> Result:
    chunks = int(ctx.parameters.get("chunks", "20"))
    rate = float(ctx.parameters.get("rate", "20"))
    size = int(ctx.parameters.get("size", "16"))
    start = time.monotonic()
    for n in range(1, chunks + 1):
        delay = start + (n - 1) / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        ctx.emit(f"{n:08d}".ljust(size, ".")[: max(size, 8)])
    return Result(f"{chunks} chunks", metadata={"chunks": str(chunks)})
