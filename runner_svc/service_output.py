"""StreamOutput for the runner service: one operation's chunks from an offset (R13).

The reader gets, in order: a gap first when chunks after its cursor were
dropped, the chunks still held, then live chunks as they come, then one end
once the job's run is over (its final offset and its row). Each reader keeps
its own cursor over the shared buffer: a slow one only falls behind (and is
told of the gap when the buffer drops what it has not read), never holds up
the executor or another reader.

When the runner holds no stream for the operation (forgotten after its keep
time, or never run here) the row answers: settled -> a gap over whatever the
reader has not seen (the row knows how many chunks there were), then the end;
unsettled -> OUTPUT_UNAVAILABLE (an earlier incarnation ran it, or it is not
launched yet: ask again, or read the row); unknown -> OPERATION_NOT_FOUND, or
OPERATION_PRUNED for a pruned key (§9 K3).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from runner_svc.core.model import OperationRow, Refusal, RunnerRefusal
from runner_svc.core.retention import pruned_refusal
from runner_svc.output_streams import OutputHub
from runner_svc.service_types import OperationView
from turnwire.output_stream import Chunk

# Chunks a reader takes per turn of the loop (and per look at the lock).
READ_BATCH = 256
# How often a waiting reader looks again without a wake-up (the runner stopping).
IDLE_SECONDS = 1.0


@dataclass(frozen=True)
class OutputGap:
    after_offset: int
    next_offset: int


@dataclass(frozen=True)
class OutputEnd:
    final_offset: int
    view: OperationView


OutputItem = Chunk | OutputGap | OutputEnd


async def stream_output(
    hub: OutputHub,
    operation_id: str,
    after_offset: int,
    *,
    read_row: Callable[[str], Awaitable[OperationRow | None]],
    pruned: Callable[[str], Awaitable[bool]],
    view: Callable[[OperationRow], OperationView],
    closing: Callable[[], bool],
) -> AsyncIterator[OutputItem]:
    """The items of R13 for one reader; raises RunnerRefusal before the first one."""
    cursor = after_offset
    if not hub.held(operation_id):
        row = await read_row(operation_id)
        if not hub.held(operation_id):  # its job may have been admitted meanwhile
            async for item in _from_the_row(operation_id, row, cursor, pruned, view):
                yield item
            return
    while not closing():
        changed = hub.changed(operation_id)  # before the read: no lost wake-up
        found = hub.read(operation_id, cursor, READ_BATCH)
        if found is None:  # forgotten while this reader was behind: the row answers
            row = await read_row(operation_id)
            async for item in _from_the_row(operation_id, row, cursor, pruned, view):
                yield item
            return
        read, run_over = found
        if read.gap_next_offset is not None:
            yield OutputGap(cursor, read.gap_next_offset)
        for chunk in read.chunks:
            yield chunk
        cursor = read.cursor if read.cursor is not None else cursor
        if read.final_offset is not None and run_over:
            row = await read_row(operation_id)
            if row is not None:
                yield OutputEnd(read.final_offset, view(row))
            return
        if read.chunks or read.gap_next_offset is not None:
            await asyncio.sleep(0)  # a long backlog never holds the loop
            continue
        try:
            async with asyncio.timeout(IDLE_SECONDS):
                await changed.wait()
        except TimeoutError:
            pass


async def _from_the_row(
    operation_id: str,
    row: OperationRow | None,
    cursor: int,
    pruned: Callable[[str], Awaitable[bool]],
    view: Callable[[OperationRow], OperationView],
) -> AsyncIterator[OutputItem]:
    if row is None:
        if await pruned(operation_id):
            raise pruned_refusal(operation_id)
        raise RunnerRefusal(
            Refusal.OPERATION_NOT_FOUND, f"this runner has no operation {operation_id!r}"
        )
    if not row.settled:
        raise RunnerRefusal(
            Refusal.OUTPUT_UNAVAILABLE,
            f"this incarnation holds no output stream for {operation_id!r}: it is "
            f"{row.state.value} here, run (or to be run) by incarnation {row.incarnation_id}",
        )
    final = row.output_chunks
    if cursor < final:  # the chunks are gone; the row still says how many there were
        yield OutputGap(cursor, final + 1)
    yield OutputEnd(final, view(row))
