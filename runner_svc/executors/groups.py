"""Executor process groups never outlive their runner (PROTOCOL.md R10).

Standard library only, on purpose: this file is also the watchdog's program
(`python -I -S groups.py`, see runner_svc/executors/watchdog.py), which must
start fast and without the runner's own packages.

Three layers end an executor's process group when its runner dies:

1. The death signal. Each executor's group leader is started with
   PR_SET_PDEATHSIG=SIGKILL (`death_signal_preexec`): the kernel kills it
   when the runner thread that forked it dies, SIGKILL included.
2. The watchdog. A leader's children do not inherit that signal, so one
   watchdog process per runner holds the read end of a pipe from the runner
   and a list of the live groups. When the pipe closes (the runner died) it
   SIGKILLs every group still listed.
3. The restart sweep (runner_svc/executor_sweep.py). Every launch is recorded
   in the store (group id, the leader's start time, boot id); the next
   incarnation ends whatever an earlier one left running before it serves.

A group is only ever signalled after `identify_group` says it is ours: its
leader is alive with the recorded start time (/proc/<pid>/stat field 22, so
a reused pid is never signalled), or, with the leader gone, a member still
carries the executor's marker in its environment (MARKER_VARIABLE). A pid
that names a process group cannot be reused while that group has members,
so a live leader with another start time means the recorded group is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Set in every executor's environment: "<incarnation_id>/<operation_id>".
MARKER_VARIABLE = "TURNWIRE_EXECUTOR"
PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.01


@dataclass(frozen=True)
class ProcessStat:
    pid: int
    state: str
    pgid: int
    start_time: int  # clock ticks after boot (field 22)


def read_stat(pid: int) -> ProcessStat | None:
    """The process's /proc/<pid>/stat facts, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:  # no such process (or not ours to read)
        return None
    # comm (field 2) may hold spaces and parentheses: fields resume after the last ")".
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 20:  # torn down while we read
        return None
    return ProcessStat(pid=pid, state=fields[0], pgid=int(fields[2]), start_time=int(fields[19]))


def boot_id() -> str:
    """This boot's id: a start time recorded before a reboot names nothing now."""
    with open("/proc/sys/kernel/random/boot_id") as handle:
        return handle.read().strip()


def executor_marker(incarnation_id: str, operation_id: str) -> str:
    return f"{incarnation_id}/{operation_id}"


def has_marker(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return False
    return f"{MARKER_VARIABLE}={marker}".encode() in entries


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes whose process group is ``pgid``."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read_stat(int(name))
        if stat is not None and stat.pgid == pgid and stat.state not in ("Z", "X"):
            members.append(stat.pid)
    return sorted(members)


class GroupState(enum.Enum):
    GONE = "gone"  # nothing of the recorded group runs
    OURS = "ours"  # the recorded group still runs
    FOREIGN = "foreign"  # the group id is in use, by processes that are not ours


@dataclass(frozen=True)
class GroupCheck:
    state: GroupState
    pids: tuple[int, ...] = ()
    ended: bool = True  # False: still running after SIGKILL and the wait


def identify_group(pgid: int, start_time: int, marker: str) -> GroupCheck:
    """Whether the executor group recorded as (pgid, leader start time) still runs."""
    leader = read_stat(pgid)
    if leader is not None and leader.start_time != start_time:
        return GroupCheck(GroupState.GONE)  # the pid was reused: the group is gone
    members = group_members(pgid)
    if not members:
        return GroupCheck(GroupState.GONE)
    if leader is not None or any(has_marker(pid, marker) for pid in members):
        return GroupCheck(GroupState.OURS, tuple(members))
    return GroupCheck(GroupState.FOREIGN, tuple(members))


def end_group(pgid: int, start_time: int, marker: str, wait_seconds: float) -> GroupCheck:
    """SIGKILL the recorded group if it is still ours; wait (bounded) until it is gone."""
    check = identify_group(pgid, start_time, marker)
    if check.state is not GroupState.OURS:
        return check
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait_seconds
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return GroupCheck(GroupState.OURS, check.pids, ended=False)
        time.sleep(_POLL_SECONDS)
    return check


@functools.cache
def _prctl() -> Any:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def death_signal_preexec() -> Callable[[], None]:
    """A Popen preexec_fn: SIGKILL the child when the thread that forks it dies.

    Call this in the forking thread (a long-lived one: the event loop's), right
    before Popen. The child re-checks its parent after arming the signal: a
    runner that died during the fork is noticed, not missed.
    """
    prctl = _prctl()
    parent = os.getpid()
    kill_signal = int(signal.SIGKILL)

    def arm() -> None:  # runs in the child between fork and exec
        if prctl(PR_SET_PDEATHSIG, kill_signal, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the runner died before the signal was armed
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


# --- the watchdog program ------------------------------------------------------
#
# Reads JSON lines on stdin: {"add": pgid, "start_time": N, "marker": "..."} and
# {"remove": pgid}. At end of file (the runner closed the pipe or died) it ends
# every group still listed, says so on stderr, and exits.

WATCHDOG_WAIT_SECONDS = 5.0


def watchdog_main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the runner
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    runner = os.getppid()
    groups: dict[int, tuple[int, str]] = {}
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
            if "add" in message:
                groups[int(message["add"])] = (int(message["start_time"]), message["marker"])
            else:
                groups.pop(int(message["remove"]), None)
        except (ValueError, KeyError, TypeError) as error:
            print(f"turnwire executor watchdog: bad message {line!r}: {error}", file=sys.stderr)
    for pgid, (start_time, marker) in groups.items():
        check = end_group(pgid, start_time, marker, WATCHDOG_WAIT_SECONDS)
        if check.state is GroupState.OURS:
            outcome = "killed" if check.ended else "SIGKILLed but STILL RUNNING"
            print(
                f"turnwire executor watchdog: runner pid {runner} ended with executor "
                f"{marker} (incarnation/operation) still running: {outcome} its process "
                f"group {pgid} (pids {list(check.pids)})",
                file=sys.stderr,
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(watchdog_main())
