"""gRPC's fork handlers are off in the runner process (runner_svc/fork_safety.py).

With them on, every child the runner forks to exec a command starts gRPC's
event engine threads again between fork and exec, and now and then one of
them aborts the child before its command ran (grpc/grpc#43055: "epoll_wait
error: Bad file descriptor", SIGABRT, about one Popen in 300 to 600 with a
gRPC thread busy beside the event loop). Counting the threads of a child
between fork and exec shows the hazard every time, not one time in hundreds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner_svc import fork_safety
from runner_svc.executors.process import command_environment
from tests.runner.executors.turns import make_request

ROOT = Path(__file__).resolve().parents[3]

# A process that loads what it is told (the runner's entry module, or only
# grpc), serves gRPC as the runner does, then forks one child the way the
# subprocess executor does (its death-signal preexec, close_fds, exec) and
# prints the threads that child had between fork and exec, and its own switch.
PROGRAM = """
import asyncio, os, subprocess, sys
if sys.argv[1] == "runner":
    import runner_svc.__main__  # noqa: F401  (as python -m runner_svc loads it)
import grpc
from runner_svc.executors import groups

async def main():
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    arm = groups.death_signal_preexec()
    read_end, write_end = os.pipe()

    def count_then_arm():
        os.write(write_end, str(len(os.listdir("/proc/self/task"))).encode())
        arm()

    child = subprocess.Popen(["/bin/true"], close_fds=True, start_new_session=True,
                             preexec_fn=count_then_arm)
    os.close(write_end)
    threads = os.read(read_end, 16).decode()
    child.wait(10)
    await server.stop(None)
    print(threads, os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "unset"))

asyncio.run(main())
"""


def _child_threads(loads: str, **env: str) -> tuple[int, str]:
    environment = {k: v for k, v in os.environ.items() if k != fork_safety.VARIABLE}
    completed = subprocess.run(
        [sys.executable, "-c", PROGRAM, loads],
        cwd=ROOT,
        env={**environment, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    threads, switch = completed.stdout.split()
    return int(threads), switch


def test_a_child_of_the_runner_process_runs_no_grpc_thread_before_exec() -> None:
    assert _child_threads("runner") == (1, "false")


def test_without_the_switch_grpc_starts_threads_in_every_child() -> None:
    """The hazard the switch removes (so the test above can fail): gRPC's fork
    handlers start its threads in the child. If a gRPC release stops doing so,
    this fails, and runner_svc/fork_safety.py may be retired."""
    threads, switch = _child_threads("grpc only")
    assert (threads > 1, switch) == (True, "unset")


def test_an_operators_own_setting_wins() -> None:
    threads, switch = _child_threads("runner", GRPC_ENABLE_FORK_SUPPORT="true")
    assert (threads > 1, switch) == (True, "true")


@pytest.mark.parametrize("operator", [None, "true"])
def test_commands_get_the_switch_as_the_operator_set_it(
    monkeypatch: pytest.MonkeyPatch, operator: str | None
) -> None:
    """The switch is the runner's: a command that uses gRPC and forks keeps its default."""
    monkeypatch.setattr(fork_safety, "OPERATOR_SETTING", operator)
    monkeypatch.setenv(fork_safety.VARIABLE, "false")  # as the runner set it
    env = command_environment(make_request(), "marker")
    assert env.get(fork_safety.VARIABLE) == operator
