"""``python -m bench e2e --peers``: the peer harness and Turnwire in one window, one table.

Order: the peer harness first (``../shared/bench-peers/run_all.py``, run with
its own virtualenv; it starts and stops its own redis-server and PostgreSQL
cluster and writes its report under ``--peers-out``, never into its own
read-only folder), then Turnwire's bench (bench/e2e.py's echo baseline,
SQLite and PostgreSQL). Then one table, grouped by calls in flight: every
peer row (median over the harness's rounds) and every Turnwire row (one run).

Each side's "x echo" is against the gRPC echo baseline measured by its own
harness in this window: the peers' against run_all.py's b_grpc.py echo (64 B,
the same round, median over rounds), Turnwire's against bench/baseline.py's
echo (256 B) in its own run. Nothing here installs anything: without the
peer virtualenv (or redis-server) it says how to set them up and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.e2e_report import Report
from bench.peers_table import PEER_SYSTEMS, PeerRun, print_table, table_json

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_PEERS_DIR = BENCH_DIR.parent.parent / "shared" / "bench-peers"
DEFAULT_VENV = os.environ.get("BENCH_VENV", "/tmp/bench-peers/venv")
PEER_IMPORTS = "import grpc, sqlalchemy, dbos, celery, redis, procrastinate, psycopg"
QUICK_QUIET_WAIT = "5"
STOP_WAIT = 90.0  # run_all.py stops redis and PostgreSQL in its finally
EXIT_SETUP = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--peers: the peer harness, then Turnwire, one table")
    group.add_argument(
        "--peers", action="store_true", help="run ../shared/bench-peers first, then this bench"
    )
    group.add_argument("--peers-dir", type=Path, default=DEFAULT_PEERS_DIR, help="(read only)")
    group.add_argument(
        "--peers-venv",
        type=Path,
        default=Path(DEFAULT_VENV),
        help="its virtualenv (env BENCH_VENV; default /tmp/bench-peers/venv)",
    )
    group.add_argument(
        "--peers-out",
        type=Path,
        default=None,
        help="where run_all.py writes RESULTS.md and results.json (default: a new /tmp dir)",
    )
    group.add_argument("--peers-reps", type=int, default=None, help="its rounds (default: its 3)")
    group.add_argument("--peers-only", default="", help=f"its --only: {','.join(PEER_SYSTEMS)}")
    group.add_argument(
        "--peers-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for run_all.py (repeatable), e.g. --peers-arg=--scale=0.5",
    )
    group.add_argument(
        "--peers-timeout", type=float, default=3600.0, help="seconds before it is stopped"
    )


# --- setup ------------------------------------------------------------------


def setup_problem(args: argparse.Namespace) -> str | None:
    """What is missing to run the peer harness, with the command that sets it up; or None."""
    run_all = args.peers_dir / "run_all.py"
    if not run_all.is_file():
        return f"the peer harness is not at {run_all} (pass --peers-dir)"
    setup = f"bash {args.peers_dir / 'setup_env.sh'}"
    how = (
        f"Set it up once with:\n    {setup}\n"
        "(it apt-get installs redis-server if missing and creates the venv with the pinned "
        "packages; BENCH_VENV=DIR puts the venv elsewhere, then pass --peers-venv DIR)"
    )
    python = args.peers_venv / "bin" / "python"
    if not python.exists():
        return f"--peers needs the peer harness's virtualenv: {python} does not exist.\n{how}"
    wants_redis = not args.peers_only or "celery" in args.peers_only.split(",")
    if wants_redis and shutil.which("redis-server") is None:
        return f"--peers needs redis-server on PATH (for celery).\n{how}"
    probe = subprocess.run(
        [str(python), "-c", PEER_IMPORTS], capture_output=True, text=True, timeout=120, check=False
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"the peer virtualenv {args.peers_venv} lacks a package ({last}).\n{how}"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- the peer harness -------------------------------------------------------


def harness_command(args: argparse.Namespace, out: Path, scratch: Path) -> list[str]:
    command = [
        str(args.peers_venv / "bin" / "python"),
        str(args.peers_dir / "run_all.py"),
        "--out", str(out),
        "--scratch", str(scratch),
        "--redis-port", str(_free_port()),
        "--pg-port", str(_free_port()),
        "--keep-scratch",  # its logs are copied to OUT/logs, then the scratch is removed here
    ]  # fmt: skip
    if args.quick:
        # A smoke run: no re-measuring of noisy windows (which also sidesteps run_all.py
        # reading a re-started gRPC server's port from its appended log: the old one's).
        command += ["--quick", "--quiet-max-wait", QUICK_QUIET_WAIT, "--noisy", "0"]
    if args.peers_reps is not None:
        command += ["--reps", str(args.peers_reps)]
    if args.peers_only:
        command += ["--only", args.peers_only]
    return command + list(args.peers_arg)


def keep_logs(logs: Path, into: Path) -> None:
    """The harness's client and worker logs, kept with its report (the scratch is not)."""
    if logs.is_dir():
        shutil.copytree(logs, into, dirs_exist_ok=True)


class _Stopped(Exception):
    """SIGTERM while the peer harness ran."""


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM by PID (run_all.py then stops its own services), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        print(
            f"[peers] run_all.py (pid {process.pid}) did not stop in {STOP_WAIT:.0f}s: SIGKILL; "
            "its redis-server or postmaster may be left running",
            file=sys.stderr,
        )
        process.kill()
        process.wait(10)


def run_harness(args: argparse.Namespace, out: Path) -> PeerRun:
    """run_all.py in its own session; its log lines go to stderr as progress."""
    scratch = Path(tempfile.mkdtemp(prefix="turnwire-peers-scratch-"))
    # As root, run_all.py runs initdb as the postgres user, who must reach its cluster dir.
    scratch.chmod(0o755)
    command = harness_command(args, out, scratch / "run")
    progress(f"peer harness: {' '.join(command)}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    started = time.time()
    log = (out / "run_all.log").open("w")
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=scratch,
        env=env,
        start_new_session=True,
    )

    def forward() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            log.flush()
            print(f"[peers] {line.rstrip()}", file=sys.stderr, flush=True)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()

    def on_term(signum: int, frame: object) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        code = process.wait(args.peers_timeout)
    except subprocess.TimeoutExpired:
        progress(f"peer harness still running after {args.peers_timeout:.0f}s: stopping it")
        _stop(process)
        code = process.returncode
    except (KeyboardInterrupt, _Stopped):
        _stop(process)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        reader.join(10)
        log.close()
        keep_logs(scratch / "run" / "logs", out / "logs")
        if "--keep-scratch" not in args.peers_arg:
            shutil.rmtree(scratch, ignore_errors=True)
    wall = time.time() - started
    try:
        record = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        record = {}
    results = record.get("results", []) if isinstance(record, dict) else record
    failures = record.get("failures", []) if isinstance(record, dict) else []
    # They name its scratch's logs, which are in OUT/logs now.
    failures = [f.replace(str(scratch / "run" / "logs"), str(out / "logs")) for f in failures]
    return PeerRun(out, list(results), list(failures), code, started, wall, command)


# --- the run ----------------------------------------------------------------


def progress(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


def run_with_peers(
    args: argparse.Namespace, measure_turnwire: Callable[[argparse.Namespace], Report]
) -> int:
    """Peers, then Turnwire; one table. 0 unless something broke (either side)."""
    problem = setup_problem(args)
    if problem is not None:
        print(f"bench: {problem}", file=sys.stderr)
        return EXIT_SETUP
    out = args.peers_out or Path(tempfile.mkdtemp(prefix="turnwire-peers-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        peer_run = run_harness(args, out)
    except (KeyboardInterrupt, _Stopped):
        print("bench: stopped while the peer harness ran", file=sys.stderr)
        return 143
    if not peer_run.results:
        print(
            f"bench: broke: the peer harness (exit {peer_run.exit_code}) left no results; "
            f"see {out / 'run_all.log'}",
            file=sys.stderr,
        )
        return 1
    progress(f"peer harness done in {peer_run.wall:.0f} s; now Turnwire")
    turnwire_started = time.time()
    try:
        report = measure_turnwire(args)
    except asyncio.CancelledError:
        print("bench: stopped by SIGTERM", file=sys.stderr)
        return 143
    except Exception as error:  # BenchBroke, LaunchError, TimeoutError: say what
        print(f"bench: broke: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    turnwire_wall = time.time() - turnwire_started
    if args.json:
        document = table_json(peer_run, report, turnwire_started, turnwire_wall)
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_table(peer_run, report, turnwire_started, turnwire_wall)
    broke = peer_run.failures or peer_run.exit_code != 0 or not report.all_succeeded
    return 1 if broke else 0
