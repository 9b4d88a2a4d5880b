"""A subprocess-executor turn for the executor lifetime tests (standard library only).

    python lifetime_turn.py DIR

Reads the executor's JSON document on stdin, then writes DIR/<op>.started:
"<pid> <pgid> <pids of the other live lifetime turns, comma-separated>". It then
waits (bounded, 60 s) for DIR/go and only then writes its side effect,
DIR/<op>.effect. A turn killed before the test creates DIR/go leaves no effect.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()


def other_turns() -> list[int]:
    """Live processes running this script outside this process group."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_bytes().decode(errors="replace")
            fields = stat.rsplit(")", 1)[1].split()
            state, pgid = fields[0], int(fields[2])
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        runs_script = str(SCRIPT).encode() in cmdline.split(b"\0")  # not the runner's flag
        if runs_script and state not in ("Z", "X") and pgid != os.getpgid(0):
            found.append(int(name))
    return found


def main() -> int:
    work = Path(sys.argv[1])
    operation_id = json.loads(sys.stdin.read())["operation_id"]
    others = ",".join(str(pid) for pid in other_turns())
    started = work / f"{operation_id}.started"
    started.with_suffix(".tmp").write_text(f"{os.getpid()} {os.getpgid(0)} {others}\n")
    started.with_suffix(".tmp").replace(started)
    deadline = time.monotonic() + 60
    while not (work / "go").exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.01)
    (work / f"{operation_id}.effect").write_text("done\n")
    print("side effect written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
