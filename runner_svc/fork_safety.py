"""gRPC's fork handlers are off in the runner process: its children only exec.

gRPC core registers fork handlers that, in a forked child, start its event
engine again (for children that go on using gRPC). The runner forks only to
exec (the subprocess executor's commands, the executor watchdog), and in such
a child those restarted threads run between fork and exec: five of them in
every child, polling a descriptor that ``close_fds`` then closes, and about
one child in 300 to 600 died of SIGABRT before its command ran ("epoll_wait
error: Bad file descriptor", grpc/grpc#43055; tests/runner/test_fork_safety.py).
A turn would fail for a reason that is the runner's own.

``GRPC_ENABLE_FORK_SUPPORT=false`` is gRPC's switch for a process that always
execs after fork. gRPC reads it as it loads, so ``runner_svc/__main__.py``
sets it before anything imports grpc. An operator's own setting wins, and the
commands the runner starts get the environment as the operator set it: the
switch is the runner's, not theirs.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"
# As the operator started the runner: read before turn_off_grpc_fork_handlers.
OPERATOR_SETTING: str | None = os.environ.get(VARIABLE)


def turn_off_grpc_fork_handlers() -> bool:
    """Set the switch unless the operator did; True if it takes effect in this
    process (grpc not loaded yet: in a process already using it, it cannot)."""
    if "grpc" in sys.modules:
        return False
    os.environ.setdefault(VARIABLE, "false")
    return True


def as_the_operator_set_it(environment: dict[str, str]) -> dict[str, str]:
    """``environment`` (a copy of this process's) with the switch as the operator
    left it: a command that uses gRPC and forks keeps gRPC's own default."""
    if OPERATOR_SETTING is None:
        environment.pop(VARIABLE, None)
    else:
        environment[VARIABLE] = OPERATOR_SETTING
    return environment
