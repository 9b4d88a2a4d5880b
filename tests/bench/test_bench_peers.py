"""python -m bench e2e --peers without running the peer harness (it needs its own venv).

Without the peer venv it says how to set it up and exits 2, installing
nothing; the one table puts each side against its own echo baseline.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from bench import peers_table as peers
from bench.baseline import Figures
from bench.e2e_report import BaselineResult, Report, SystemResult
from tests.bench.invoke import run_bench


def test_peers_without_the_venv_prints_the_setup_command(tmp_path: Path) -> None:
    harness = tmp_path / "bench-peers"
    harness.mkdir()
    (harness / "run_all.py").write_text("raise SystemExit('must not run')\n")
    code, stdout, stderr = run_bench(
        "e2e", "--peers", "--quick",
        "--peers-dir", str(harness), "--peers-venv", str(tmp_path / "no-venv"),
        timeout=60,
    )  # fmt: skip
    assert code == 2, stderr
    assert f"{tmp_path / 'no-venv' / 'bin' / 'python'} does not exist" in stderr
    assert f"bash {harness / 'setup_env.sh'}" in stderr
    assert stdout == ""


def peer_result(system: str, mode: str, round_: int, ops: float) -> dict[str, object]:
    return {
        "system": system,
        "mode": mode,
        "round": round_,
        "ops_per_s": ops,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "stack_cpu_ms_per_op": 0.5,
    }


def figures(ops_per_second: float, count: int = 10) -> Figures:
    return Figures("x", count, count / ops_per_second, tuple([0.001] * count))


def system(journal: str, in_flight: int, ops_per_second: float) -> SystemResult:
    return SystemResult(
        journal=journal,
        in_flight=in_flight,
        figures=figures(ops_per_second),
        journal_commits_per_op=3.0,
        dispatcher_commits_per_op=2.0,
        journal_transactions_per_op=2.0,
        rpcs_per_op={"GetOperationStatus": 1.0, "Dispatch": 1.0, "Release": 1.0},
        journal_calls_per_op={"submit": 1.0, "commit": 2.0},
        states={"SUCCEEDED": 10},
        cpu_ms_per_op={"client": 1.0, "coordinator": 2.0, "runner-1": 3.0},
        dispatcher_events={},
    )


def test_one_table_puts_each_side_against_its_own_echo() -> None:
    results = [
        peer_result("grpc", "seq", 1, 1000.0),
        peer_result("grpc", "seq", 2, 2000.0),
        peer_result("celery", "seq", 1, 100.0),  # 0.1 of its round's echo
        peer_result("celery", "seq", 2, 600.0),  # 0.3 of its round's echo
    ]
    peer_run = peers.PeerRun(Path("/tmp/x"), results, [], 0, 0.0, 1.0, ["run_all.py"])
    report = Report(
        {1: 10},
        [BaselineResult(1, figures(500.0), 0.1, 0.2)],
        [system("sqlite", 1, 50.0)],
        "--skip-postgres",
        load_before=0.0,
        load_after=0.0,
        cpus=2,
    )
    rows = {(r.harness, r.system, r.in_flight): r for r in peers.peer_rows(results)}
    celery = rows[("peers", "celery", 1)]
    assert celery.x_echo is not None and abs(celery.x_echo - 0.2) < 1e-9  # median of 0.1, 0.3
    assert celery.commits_per_op is None and celery.runner_rpcs_per_op is None
    turnwire = peers.turnwire_rows(report)[-1]
    assert turnwire.x_echo is not None and abs(turnwire.x_echo - 0.1) < 1e-9  # 50 / 500
    assert (turnwire.commits_per_op, turnwire.runner_rpcs_per_op) == (3.0, 3.0)
    assert turnwire.stack_cpu_ms_per_op == 6.0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        peers.print_table(peer_run, report, 0.0, 1.0)
    text = out.getvalue()
    assert "each side against the echo baseline measured by its own harness" in text
    assert "peers first" in text
    celery_line = next(line for line in text.splitlines() if line.startswith("Celery"))
    assert celery_line.split()[-2:] == [peers.MISSING, peers.MISSING]


def test_the_table_is_grouped_by_calls_in_flight_and_says_where_peers_are_missing() -> None:
    """Each C's peer rows stand beside Turnwire's at that C (the peers' own echo against
    Turnwire's own); at C=64, which the peer harness cannot run, the table says so in
    place of peer rows. Every row shows p99/p50."""
    results = [
        peer_result(system, mode, 1, ops)
        for system, ops in (("grpc", 1000.0), ("celery", 100.0))
        for mode in ("seq", "c16")
    ]
    peer_run = peers.PeerRun(Path("/tmp/x"), results, [], 0, 0.0, 1.0, ["run_all.py"])
    report = Report(
        {1: 10, 16: 20, 64: 80},
        [BaselineResult(n, figures(500.0 * n), 0.1, 0.2) for n in (1, 16, 64)],
        [system("sqlite", n, 50.0 * n) for n in (1, 16, 64)],
        "--skip-postgres",
        load_before=0.0,
        load_after=0.0,
        cpus=2,
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        peers.print_table(peer_run, report, 0.0, 1.0)
    lines = out.getvalue().splitlines()
    assert "(10 ops at C=1, 20 ops at C=16, 80 ops at C=64)" in out.getvalue()
    header = next(line for line in lines if line.startswith("system "))
    assert header.split()[:8] == ["system", "C", "ops/s", "x", "echo", "p50", "ms", "p99"]
    assert "p99/p50" in header
    rows = [line for line in lines if line.startswith(("gRPC", "Celery", "Turnwire,"))]
    levels = [int(line[49:51]) for line in rows]
    assert levels == sorted(levels) == [1] * 4 + [16] * 4 + [64] * 2  # grouped by C
    at_64 = lines.index(next(line for line in lines if line.startswith("(no peers at C=64")))
    assert "run_all.py measured C=1, 16" in lines[at_64]
    assert (
        lines[at_64 + 1].startswith("gRPC echo, bench/baseline.py") and " 64 " in lines[at_64 + 1]
    )
    celery = next(line for line in rows if line.startswith("Celery"))
    assert celery.split()[-5] == "2.00"  # p99/p50: 2.0 ms over 1.0 ms
    document = peers.table_json(peer_run, report, 0.0, 1.0)
    assert [row["in_flight"] for row in document["table"]] == levels
