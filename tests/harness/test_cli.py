"""`turnwire check` (main_check): exit 0 pass, 1 violations, 2 unreadable, 3 proves nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.harness.run_builder import RunBuilder
from turnwire.harness.oracle_cli import main_check


def _argv(run: RunBuilder, *extra: str) -> list[str]:
    argv = ["--journal-url", run.journal_url, "--ledger", str(run.ledger)]
    for path in run.store_paths:
        argv += ["--runner-store", str(path)]
    return argv + list(extra)


def _check(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    status = main_check(argv, out)
    return status, out.getvalue()


def test_passing_run_exits_0(run: RunBuilder) -> None:
    """turnwire check: invariants hold and something hard was exercised -> exit 0."""
    inc = run.start_runner()
    run.lost_reply("op-1", inc)
    status, text = _check(_argv(run))
    assert status == 0
    assert text.startswith("PASS")


def test_violating_run_exits_1_and_json_names_the_invariant(run: RunBuilder) -> None:
    """turnwire check --json: a violation -> exit 1, the JSON names invariant and operation."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1)
    status, text = _check(_argv(run, "--json"))
    assert status == 1
    document = json.loads(text)
    assert document["status"] == "FAIL"
    assert {"invariant": 1, "operation_id": "op-1"}.items() <= document["violations"][0].items()


def test_vacuous_run_exits_3(run: RunBuilder) -> None:
    """turnwire check: no violation but nothing exercised -> exit 3, not a pass."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    status, text = _check(_argv(run))
    assert status == 3
    assert text.startswith("PROVES NOTHING")


def test_not_healed_accepts_visible_non_terminal_operations(run: RunBuilder) -> None:
    """turnwire check --not-healed: §8.2 then only asks for a visible reason."""
    inc = run.start_runner()
    run.lost_reply("op-done", inc)
    run.submit("op-stuck")
    run.preflight("op-stuck", inc)
    run.lose_reply("op-stuck")
    assert _check(_argv(run))[0] == 1
    assert _check(_argv(run, "--not-healed"))[0] == 0


def test_missing_inputs_exit_2_and_say_what(
    run: RunBuilder, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """turnwire check: a journal, store or ledger that does not exist -> exit 2, nothing checked."""
    run.start_runner()
    missing = str(tmp_path / "nope.db")
    assert _check(_argv(run, "--runner-store", missing))[0] == 2
    assert "no runner store file" in capsys.readouterr().err
    bad_journal = ["--journal-url", f"sqlite:///{missing}", "--ledger", str(run.ledger)]
    assert _check(bad_journal)[0] == 2
    assert "no SQLite database file" in capsys.readouterr().err
    no_ledger = ["--journal-url", run.journal_url, "--ledger", missing]
    assert _check(no_ledger)[0] == 2
    assert "no ledger file" in capsys.readouterr().err


def test_store_that_is_not_a_runner_store_exits_2(
    run: RunBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    """turnwire check: a file without the runner tables (here the journal) -> exit 2."""
    journal_file = run.journal_url.removeprefix("sqlite:///")
    assert _check(_argv(run, "--runner-store", journal_file))[0] == 2
    assert "runner_store_meta" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """turnwire check: missing required options -> exit 2 with argparse's message."""
    assert _check([])[0] == 2
    assert "--journal-url" in capsys.readouterr().err


def test_module_is_a_turnwire_cli_extension(
    run: RunBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    """The turnwire.cli extension hook (SUMMARY, configure, run) gives the same verdict."""
    import argparse

    from turnwire.harness import oracle_cli

    inc = run.start_runner()
    run.lost_reply("op-1", inc)
    parser = argparse.ArgumentParser(prog="turnwire check", description=oracle_cli.SUMMARY)
    oracle_cli.configure(parser)
    assert oracle_cli.run(parser.parse_args(_argv(run))) == 0
    assert capsys.readouterr().out.startswith("PASS")
