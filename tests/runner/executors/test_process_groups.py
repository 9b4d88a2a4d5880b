"""Which executor groups the restart sweep and the watchdog may kill (R10).

A group is ended only when it is provably the recorded one: a reused pid
(another start time) or a group id now held by processes without the
executor's marker is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

from runner_svc.executors import groups
from tests.runner.executors.turns import gone_within, is_running

MARKER = "0123456789abcdef0123456789abcdef/op-groups"


@contextlib.contextmanager
def session(command: str, marker: str | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`sh -c command` leading its own session; SIGKILLed (by group) and reaped at the end."""
    env = {**os.environ}
    if marker is not None:
        env[groups.MARKER_VARIABLE] = marker
    process = subprocess.Popen(["/bin/sh", "-c", command], start_new_session=True, env=env)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def members_within(pgid: int, count: int, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while len(members := groups.group_members(pgid)) < count:
        assert time.monotonic() < deadline, f"group {pgid} has {members}"
        time.sleep(0.01)
    return members


def start_time(pid: int) -> int:
    stat = groups.read_stat(pid)
    assert stat is not None
    return stat.start_time


def test_a_live_leader_with_the_recorded_start_time_is_ended_with_its_group() -> None:
    with session("sleep 30 & wait", MARKER) as leader:
        members = members_within(leader.pid, 2)
        check = groups.end_group(leader.pid, start_time(leader.pid), MARKER, 5.0)
        assert check.state is groups.GroupState.OURS and check.ended
        assert set(check.pids) == set(members)
        assert all(gone_within(pid) for pid in members)


def test_a_reused_pid_is_never_signalled() -> None:
    """Another start time under the recorded pid: the recorded group is gone; nothing is sent."""
    with session("sleep 30", MARKER) as leader:
        members_within(leader.pid, 1)
        check = groups.end_group(leader.pid, start_time(leader.pid) - 1, MARKER, 5.0)
        assert check.state is groups.GroupState.GONE
        time.sleep(0.1)
        assert is_running(leader.pid)


def test_a_leaderless_group_is_ended_only_when_a_member_carries_the_marker() -> None:
    """With the leader gone the group id cannot be reused while it has members; the
    marker proves the members are the executor's and not a later group's."""
    for marker, expected in ((MARKER, groups.GroupState.OURS), (None, groups.GroupState.FOREIGN)):
        with session("sleep 30 & echo $! > /dev/null; exit 0", marker) as leader:
            leader.wait(timeout=10)  # the leader exits and is reaped; its child stays
            members = members_within(leader.pid, 1)
            assert leader.pid not in members
            check = groups.end_group(leader.pid, 12345, MARKER, 5.0)
            assert check.state is expected
            if expected is groups.GroupState.OURS:
                assert check.ended and all(gone_within(pid) for pid in members)
            else:
                assert all(is_running(pid) for pid in members)


def test_an_empty_group_is_gone() -> None:
    with session("exit 0") as leader:
        leader.wait(timeout=10)
        check = groups.end_group(leader.pid, 1, MARKER, 5.0)
        assert check.state is groups.GroupState.GONE
