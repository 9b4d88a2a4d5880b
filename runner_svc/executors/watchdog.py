"""The runner's side of the executor watchdog (layer 2 in runner_svc/executors/groups.py).

One watchdog process per runner process, started at the first executor
launch: `python -I -S runner_svc/executors/groups.py` in its own session,
reading the live executor groups from a pipe whose write end only the runner
holds (close-on-exec, and executors are started with close_fds). When the
runner dies, by SIGKILL too, the pipe reaches end of file and the watchdog
SIGKILLs every group still listed, then exits. A clean runner exit closes the
pipe with nothing listed, and the watchdog just exits.

A watchdog that died is started again at the next message, with every group
still live. Messages never block the event loop: the pipe is non-blocking,
and a message that does not fit is logged and dropped (the death signal and
the restart sweep still apply).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from runner_svc.executors import groups

log = logging.getLogger("runner_svc.executors.watchdog")

PROGRAM = Path(groups.__file__).resolve()


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()
        self._groups: dict[int, tuple[int, str]] = {}

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def add(self, pgid: int, start_time: int, marker: str) -> None:
        with self._lock:
            self._groups[pgid] = (start_time, marker)
            self._send({"add": pgid, "start_time": start_time, "marker": marker})

    def remove(self, pgid: int) -> None:
        with self._lock:
            if self._groups.pop(pgid, None) is not None:
                self._send({"remove": pgid})

    def _send(self, message: dict[str, object]) -> None:
        # At most PIPE_BUF bytes (ids are short): the write is whole or refused.
        line = json.dumps(message).encode() + b"\n"
        for _ in range(2):
            process = self._running()
            if process is None:
                return
            assert process.stdin is not None
            try:
                os.write(process.stdin.fileno(), line)
                return
            except BlockingIOError:
                log.warning("executor watchdog pipe full: dropped %s", message)
                return
            except OSError as error:  # it died: the next one gets every live group
                log.warning("executor watchdog (pid %d) is gone: %s", process.pid, error)
                process.stdin.close()
                process.poll()  # reap it
                self._process = None

    def _running(self) -> subprocess.Popen[bytes] | None:
        if self._owner != os.getpid():  # a forked child never uses its parent's watchdog
            self._owner, self._process, self._groups = os.getpid(), None, {}
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()
        return self._process

    def _start(self) -> subprocess.Popen[bytes] | None:
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(PROGRAM)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            log.error("cannot start the executor watchdog: %s", error)
            return None
        assert process.stdin is not None
        os.set_blocking(process.stdin.fileno(), False)
        log.info(
            "executor watchdog started (pid %d): it ends this runner's executor process "
            "groups if the runner dies",
            process.pid,
        )
        for pgid, (start_time, marker) in self._groups.items():
            line = json.dumps({"add": pgid, "start_time": start_time, "marker": marker})
            try:
                os.write(process.stdin.fileno(), line.encode() + b"\n")
            except OSError as error:
                log.warning("executor watchdog: cannot hand over group %d: %s", pgid, error)
        return process


WATCHDOG = Watchdog()
