"""The output relay's buffer (coordinator_svc/core/relay_buffer.py, PROTOCOL.md §12), pure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.core.relay_buffer import (
    REST_UNKNOWN,
    TRIES_AFTER_THE_END,
    Gap,
    RelayBuffer,
    RelayStep,
    relay_step,
)
from tests.coordinator.core.scenario import queued


def _fill(buffer: RelayBuffer[str], first: int, last: int, size: int = 10) -> None:
    for offset in range(first, last + 1):
        assert buffer.add(offset, size, f"c{offset}")


@pytest.mark.rule("S2")
def test_chunks_are_read_in_offset_order_and_the_end_is_known_at_the_final_offset() -> None:
    """S2: every reader gets the chunks after its own cursor, in order; done at the end."""
    buffer: RelayBuffer[str] = RelayBuffer(1000)
    _fill(buffer, 1, 5)
    read = buffer.read(0, 3)
    assert (read.gap, read.chunks, read.cursor, read.done) == (None, ("c1", "c2", "c3"), 3, False)
    read = buffer.read(3, 10)
    assert (read.chunks, read.done) == (("c4", "c5"), False)
    buffer.end(5)
    assert buffer.read(5, 10).done
    assert buffer.read(2, 10).chunks == ("c3", "c4", "c5")


@pytest.mark.rule("S5", "S6")
def test_past_the_limit_the_oldest_go_and_a_reader_behind_them_is_told_a_gap() -> None:
    """S5, S6: never a silent hole; the gap names where to resume."""
    buffer: RelayBuffer[str] = RelayBuffer(30)
    _fill(buffer, 1, 6)  # 60 bytes: only 4, 5, 6 stay
    assert buffer.dropped == 3
    read = buffer.read(1, 10)
    assert read.gap == Gap(1, 4)
    assert read.chunks == ("c4", "c5", "c6")
    assert buffer.read(4, 10).gap is None


@pytest.mark.rule("S5")
def test_a_chunk_larger_than_the_limit_is_still_relayed_alone() -> None:
    """S5: the newest chunk always stays, so a reader is never starved of it."""
    buffer: RelayBuffer[str] = RelayBuffer(5)
    _fill(buffer, 1, 2, size=50)
    read = buffer.read(0, 10)
    assert read.gap == Gap(0, 2) and read.chunks == ("c2",)


@pytest.mark.rule("S2", "S7")
def test_repeats_and_out_of_order_chunks_are_ignored() -> None:
    """S2, S7: upstream reopened from the buffer's cursor may repeat; nothing is doubled."""
    buffer: RelayBuffer[str] = RelayBuffer(1000)
    _fill(buffer, 1, 3)
    assert not buffer.add(2, 10, "again")
    assert not buffer.add(5, 10, "early")
    assert buffer.upstream_cursor == 3
    assert buffer.read(0, 10).chunks == ("c1", "c2", "c3")


@pytest.mark.rule("S6")
def test_an_upstream_gap_drops_what_was_held_and_readers_skip_with_a_gap() -> None:
    """S6: the runner's gap reaches every reader that had not seen those offsets."""
    buffer: RelayBuffer[str] = RelayBuffer(1000)
    _fill(buffer, 1, 2)
    buffer.skip_to(7)
    _fill(buffer, 7, 8)
    assert buffer.read(2, 10).gap == Gap(2, 7)
    assert buffer.read(0, 10).chunks == ("c7", "c8")


@pytest.mark.rule("S3")
def test_an_end_past_the_last_chunk_relayed_is_a_gap_to_it() -> None:
    """S3: the runner's final offset beyond what reached us: the reader is told."""
    buffer: RelayBuffer[str] = RelayBuffer(1000)
    _fill(buffer, 1, 2)
    buffer.end(4)
    read = buffer.read(2, 10)
    assert (read.gap, read.chunks, read.done) == (Gap(2, 5), (), True)


@pytest.mark.rule("S4")
def test_giving_up_tells_a_reader_at_the_end_of_what_is_held_that_the_rest_is_lost() -> None:
    """S4: the relay could not reach the rest: a gap with next_offset 0, never silence."""
    buffer: RelayBuffer[str] = RelayBuffer(1000)
    _fill(buffer, 1, 2)
    buffer.give_up()
    assert not buffer.add(3, 10, "late")
    first = buffer.read(0, 1)
    assert (first.chunks, first.done, first.lost_rest) == (("c1",), False, None)
    last = buffer.read(1, 10)
    assert (last.chunks, last.done, last.lost_rest) == (("c2",), True, Gap(2, REST_UNKNOWN))


@pytest.mark.rule("S4", "S5")
def test_the_upstream_waits_for_a_binding_reads_a_bound_turn_and_gives_up_after_the_end() -> None:
    """S4, S5: relay_step decides from the row alone (core.relay_buffer)."""
    assert relay_step(None, 0) is RelayStep.GIVE_UP
    assert relay_step(queued(), 0) is RelayStep.WAIT
    running = queued(state=OpState.RUNNING, runner="r1", execution=Execution.STARTED)
    assert relay_step(running, 0) is RelayStep.READ
    assert relay_step(running, 50) is RelayStep.READ  # never gives up while it runs
    ended = replace(running, state=OpState.SUCCEEDED)
    assert relay_step(ended, TRIES_AFTER_THE_END - 1) is RelayStep.READ
    assert relay_step(ended, TRIES_AFTER_THE_END) is RelayStep.GIVE_UP
    never_ran = queued(state=OpState.CANCELLED, execution=Execution.NOT_STARTED)
    assert relay_step(never_ran, 0) is RelayStep.NO_OUTPUT
