"""The metered executor and its durable ledger of executor starts (R10, §8 invariant 1)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runner_svc.executors import ExecutorStartError, load_executor
from tests.runner.executors.turns import INCARNATION, make_request, settle
from turnwire.ledger import (
    LedgerCorruptError,
    LedgerEntry,
    append_start,
    count_starts,
    read_ledger,
)

# Long ids make each line ~2 KiB, so interleaved writes would show as torn lines.
LONG = "x" * 1900


def entry(operation_id: str, attempt: int = 1) -> LedgerEntry:
    return LedgerEntry(
        operation_id=operation_id,
        incarnation_id=INCARNATION,
        attempt=attempt,
        pid=os.getpid(),
        started_at="2026-11-29T11:00:00+00:00",
    )


@pytest.mark.rule("R10")
def test_metered_records_the_start_then_behaves_like_echo(tmp_path: Path) -> None:
    """R10: metered appends one ledger line per start and returns the echo result."""
    ledger = tmp_path / "ledger.jsonl"

    async def scenario():
        executor = load_executor("metered", ledger_path=ledger)
        handle = await executor.start(make_request("op-a", attempt=2))
        assert len(read_ledger(ledger)) == 1  # written before start() returned
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert outcome.succeeded
    assert outcome.output == b"hello world"
    [recorded] = read_ledger(ledger)
    assert recorded.operation_id == "op-a"
    assert recorded.incarnation_id == INCARNATION
    assert recorded.attempt == 2
    assert recorded.pid == os.getpid()
    assert recorded.started_at.endswith("+00:00")


@pytest.mark.rule("R10")
def test_metered_failure_and_sleep_parameters_still_count_the_start(tmp_path: Path) -> None:
    """R10: a failing or cancelled metered execution is still one recorded start."""
    ledger = tmp_path / "ledger.jsonl"

    async def scenario():
        executor = load_executor("metered", ledger_path=ledger)
        failing = await executor.start(make_request("op-fail", parameters={"fail": "1"}))
        sleeping = await executor.start(make_request("op-sleep", parameters={"sleep_ms": "600000"}))
        await sleeping.cancel(grace_seconds=1.0)
        return await settle(failing), await settle(sleeping)

    failed, cancelled = asyncio.run(scenario())
    assert failed.error_reason == "EXECUTOR_FAILED"
    assert cancelled.error_reason == "CANCELLED"
    assert count_starts(ledger) == {"op-fail": 1, "op-sleep": 1}


@pytest.mark.rule("R3")
def test_metered_refuses_bad_parameters_before_recording(tmp_path: Path) -> None:
    """R3: a start refused for bad parameters leaves no ledger line (nothing ran)."""
    ledger = tmp_path / "ledger.jsonl"

    async def scenario() -> None:
        executor = load_executor("metered", ledger_path=ledger)
        await executor.start(make_request(parameters={"sleep_ms": "later"}))

    with pytest.raises(ExecutorStartError, match="sleep_ms"):
        asyncio.run(scenario())
    assert read_ledger(ledger) == []


def test_concurrent_starts_from_threads_are_all_recorded_untorn(tmp_path: Path) -> None:
    """§8.1: concurrent appends from many threads give one whole line each."""
    ledger = tmp_path / "ledger.jsonl"
    threads = [
        threading.Thread(
            target=lambda n=n: [append_start(ledger, entry(f"t{n}-{LONG}")) for _ in range(10)]
        )
        for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert count_starts(ledger) == {f"t{n}-{LONG}": 10 for n in range(8)}
    assert ledger.read_bytes().count(b"\n") == 80


def test_concurrent_metered_starts_on_one_loop_are_all_recorded(tmp_path: Path) -> None:
    """§8.1: 40 metered starts gathered at once give exactly one line per start."""
    ledger = tmp_path / "ledger.jsonl"

    async def scenario() -> None:
        executor = load_executor("metered", ledger_path=ledger)
        requests = [make_request(f"op-{n}-{LONG}") for n in range(40)]
        handles = await asyncio.gather(*(executor.start(r) for r in requests))
        await asyncio.gather(*(settle(h) for h in handles))

    asyncio.run(scenario())
    assert count_starts(ledger) == {f"op-{n}-{LONG}": 1 for n in range(40)}


_WRITER = """
import asyncio, sys
from pathlib import Path
from runner_svc.executors import load_executor
from tests.runner.executors.turns import make_request

async def main(ledger, tag, count):
    executor = load_executor("metered", ledger_path=Path(ledger))
    requests = [make_request(f"{tag}-{n}-" + "y" * 1900) for n in range(count)]
    handles = await asyncio.gather(*(executor.start(r) for r in requests))
    await asyncio.gather(*(h.wait() for h in handles))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def test_concurrent_starts_from_two_processes_are_all_recorded_untorn(tmp_path: Path) -> None:
    """§8.1: two processes appending at once give exactly one whole line per start."""
    ledger = tmp_path / "ledger.jsonl"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(ledger), tag, "60"],
            cwd=Path(__file__).resolve().parents[3],
        )
        for tag in ("p1", "p2")
    ]
    try:
        for writer in writers:
            assert writer.wait(timeout=60) == 0
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=10)
    starts = count_starts(ledger)
    assert starts == {f"{tag}-{n}-" + "y" * 1900: 1 for tag in ("p1", "p2") for n in range(60)}
    pids = {recorded.pid for recorded in read_ledger(ledger)}
    assert pids == {writer.pid for writer in writers}


def test_a_torn_final_line_is_ignored(tmp_path: Path) -> None:
    """§8.1: a last line cut short by a killed writer is ignored; whole lines still count."""
    ledger = tmp_path / "ledger.jsonl"
    append_start(ledger, entry("op-1"))
    append_start(ledger, entry("op-2"))
    with ledger.open("ab") as torn:
        torn.write(b'{"attempt":1,"incarnation_id":"01')
    assert count_starts(ledger) == {"op-1": 1, "op-2": 1}


def test_a_corrupt_middle_line_raises(tmp_path: Path) -> None:
    """§8.1: a complete line that does not parse makes the ledger untrustworthy: it raises."""
    ledger = tmp_path / "ledger.jsonl"
    append_start(ledger, entry("op-1"))
    with ledger.open("ab") as corrupt:
        corrupt.write(b"not json at all\n")
    append_start(ledger, entry("op-2"))
    with pytest.raises(LedgerCorruptError, match="line 2"):
        read_ledger(ledger)


def test_a_line_with_missing_fields_raises(tmp_path: Path) -> None:
    """§8.1: a complete JSON line without the ledger's fields is corrupt, not skipped."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_bytes(json.dumps({"operation_id": "op-1"}).encode() + b"\n")
    with pytest.raises(LedgerCorruptError, match="line 1"):
        read_ledger(ledger)


def test_a_missing_ledger_counts_no_starts(tmp_path: Path) -> None:
    """§8.1: no ledger file means no executor ever started."""
    assert read_ledger(tmp_path / "absent.jsonl") == []
    assert count_starts(tmp_path / "absent.jsonl") == {}


def test_an_entry_too_long_for_one_atomic_append_is_refused(tmp_path: Path) -> None:
    """§8.1: a line that could not be appended atomically is refused, not split."""
    ledger = tmp_path / "ledger.jsonl"
    with pytest.raises(ValueError, match="limit"):
        append_start(ledger, entry("z" * 5000))
    assert not ledger.exists()
