"""Executors never outlive their runner (R10): death signal, watchdog, restart sweep.

Each test starts a real runner process with the subprocess executor running
lifetime_turn.py (it reports its pid, then writes a side effect only once the
test creates DIR/go), SIGKILLs the runner (and, where said, its watchdog) by
PID, and looks at the executor's process group in /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.runner.live import dispatch_request, envelope
from tests.support import runner_access
from tests.support.runner_process import runner_process
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.testing.processes import ServiceProcess

R = runner_pb2
TURN = Path(__file__).with_name("lifetime_turn.py")
PROMPTLY = 3.0  # seconds for the kernel and the watchdog to end a group


def stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields if len(fields) >= 20 else None


def live_in_group(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        fields = stat_fields(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def is_live(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def group_gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while live_in_group(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_for(path: Path, seconds: float = 20.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def watchdog_of(runner_pid: int, seconds: float = 10.0) -> int:
    """The executor watchdog the runner started (a child running groups.py)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            fields = stat_fields(int(name)) if name.isdigit() else None
            if fields is None or int(fields[1]) != runner_pid:
                continue
            with contextlib.suppress(OSError):
                if b"executors/groups.py" in Path(f"/proc/{name}/cmdline").read_bytes():
                    return int(name)
        time.sleep(0.02)
    raise AssertionError(f"runner {runner_pid} started no executor watchdog")


def sigkill(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Turn:
    pid: int  # the python process running the turn
    pgid: int  # its executor's process group (the leader's pid)
    others: list[int]  # other lifetime turns alive when it started


def dispatch_turn(runner: ServiceProcess, work: Path, operation_id: str) -> tuple[Turn, str]:
    """Dispatch one turn, wait until the runner confirmed its start; (turn, incarnation)."""
    channel = runner_access.sync_channel(runner.address)
    stub = runner_pb2_grpc.RunnerServiceStub(channel)
    try:
        probe = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=operation_id))
        body = envelope(operation_id)
        reply = stub.Dispatch(dispatch_request(operation_id, body, probe.incarnation_id), timeout=5)
        assert not reply.duplicate
        try:
            pid, pgid, others = wait_for(work / f"{operation_id}.started").split(" ")
        except AssertionError as error:
            seen = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=operation_id))
            raise AssertionError(f"{error}; {seen}; runner log:\n{runner.output()}") from None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the start confirmation is durable (R3)
            seen = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=operation_id))
            if seen.operation.state == R.RUNNER_OPERATION_STATE_RUNNING:
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"{operation_id} never read RUNNING: {seen}")
    finally:
        channel.close()
    listed = [int(p) for p in others.strip().split(",") if p]
    return Turn(int(pid), int(pgid), listed), probe.incarnation_id


def start_runner(store: Path, work: Path, command: str, name: str) -> ServiceProcess:
    return runner_process(
        store,
        work,
        executor=f"subprocess:{command}",
        extra_args=["--writable-slots", "1", "--read-only-slots", "1"],
        name=name,
    )


@contextlib.contextmanager
def ended_at_exit(pids: list[int]) -> Iterator[list[int]]:
    """SIGKILL, by PID, every process the test appended to ``pids``."""
    try:
        yield pids
    finally:
        sigkill(*pids)


@pytest.mark.rule("R10")
def test_sigkilled_runner_takes_its_executor_group_with_it(tmp_path: Path) -> None:
    """R10 (a): SIGKILL the runner; the whole group (sh and the turn it forked) dies at once."""
    work = tmp_path
    command = f"{sys.executable} -I -S {TURN} {work}"  # dash: sh leads, python is its child
    with ended_at_exit([]) as pids, start_runner(tmp_path / "r.db", work, command, "r1") as runner:
        turn, _ = dispatch_turn(runner, work, "op_a")
        pids += [turn.pid, turn.pgid, watchdog_of(runner.pid)]
        assert turn.pid != turn.pgid and is_live(turn.pid)
        runner.kill()  # SIGKILL by PID
        assert group_gone_within(turn.pgid, PROMPTLY), live_in_group(turn.pgid)
        (work / "go").touch()
        time.sleep(0.5)
        assert not (work / "op_a.effect").exists()
        assert "killed its process group" in runner.output()


@pytest.mark.rule("R10")
def test_death_signal_alone_ends_the_leader(tmp_path: Path) -> None:
    """R10 (a): with the watchdog SIGKILLed first, PR_SET_PDEATHSIG still kills the leader."""
    work = tmp_path
    command = f"exec {sys.executable} -I -S {TURN} {work}"  # the turn is the group leader
    with ended_at_exit([]) as pids, start_runner(tmp_path / "r.db", work, command, "r1") as runner:
        turn, _ = dispatch_turn(runner, work, "op_b")
        watchdog = watchdog_of(runner.pid)
        pids += [turn.pid, watchdog]
        assert turn.pid == turn.pgid
        sigkill(watchdog)
        assert group_gone_within(watchdog, PROMPTLY)
        runner.kill()
        assert group_gone_within(turn.pgid, PROMPTLY), live_in_group(turn.pgid)
        (work / "go").touch()
        time.sleep(0.5)
        assert not (work / "op_b.effect").exists()


@pytest.mark.rule("R10")
def test_restart_ends_a_surviving_executor_before_admitting_anything(tmp_path: Path) -> None:
    """R10 (b): a group that outlived runner and watchdog is ended before the next serves.

    The death signal only reaches the group's leader (sh): the turn it forked
    survives once the watchdog is gone too. The restarted runner, on the same
    store and one writable slot, must have killed it before it listens; then
    the old turn's side effect never lands, the new turn runs alone, and the
    old turn reads INTERRUPTED with execution STARTED (its start was confirmed).
    """
    store, work = tmp_path / "r.db", tmp_path
    command = f"{sys.executable} -I -S {TURN} {work}"
    with ended_at_exit([]) as pids:
        with start_runner(store, work, command, "r1") as first:
            old, old_incarnation = dispatch_turn(first, work, "op_old")
            watchdog = watchdog_of(first.pid)
            pids += [old.pid, old.pgid, watchdog]
            sigkill(watchdog)
            assert group_gone_within(watchdog, PROMPTLY)
            first.kill()
        time.sleep(0.5)
        assert is_live(old.pid), "the bypass did not happen: nothing left for the sweep"
        assert not is_live(old.pgid)  # the leader took its death signal
        with start_runner(store, work, command, "r2") as second:
            assert not live_in_group(old.pgid), "serving while the old executor runs"
            new, incarnation = dispatch_turn(second, work, "op_new")
            pids += [new.pid, new.pgid, watchdog_of(second.pid)]
            assert new.others == [], [
                (p, stat_fields(p), Path(f"/proc/{p}/cmdline").read_bytes()) for p in new.others
            ]  # one slot, one live executor
            (work / "go").touch()
            assert wait_for(work / "op_new.effect") == "done\n"
            time.sleep(0.3)
            assert not (work / "op_old.effect").exists()
            channel = runner_access.sync_channel(second.address)
            try:
                seen = runner_pb2_grpc.RunnerServiceStub(channel).GetOperationStatus(
                    R.GetOperationStatusRequest(operation_id="op_old")
                )
            finally:
                channel.close()
            assert incarnation != old_incarnation
            assert seen.operation.state == R.RUNNER_OPERATION_STATE_INTERRUPTED
            assert seen.operation.execution == turn_pb2.EXECUTION_STARTED
            assert "op_old" in second.output() and "outlived its runner" in second.output()
            second.terminate()
            assert second.wait(20) == 0, second.output()
