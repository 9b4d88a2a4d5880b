"""bench/ is a package run as ``python -m bench NAME [args]``.

``--help`` lists every module with a ``main`` (found on disk, so a new bench
needs no edit of the dispatcher), NAME may use ``-`` for ``_``, an unknown
NAME exits 2 with the list, and the package stands on its own: no module of it
edits ``sys.path`` or imports the tests.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys
from pathlib import Path

import pytest

import bench
from bench import __main__ as dispatcher
from tests.bench.invoke import run_bench

BENCH_DIR = Path(bench.__file__).resolve().parent
MADE_UP = '''"""A bench made up by the test: prints its arguments.

More text the listing leaves out.
"""

import sys


def main(argv: list[str] | None = None) -> int:
    print("made up ran with", argv, "as", sys.argv[0])
    return 3
'''


def modules_with_main() -> set[str]:
    """The bench modules, by a reading of their own (a top-level ``def main``)."""
    return {
        path.stem
        for path in BENCH_DIR.glob("*.py")
        if not path.stem.startswith("_") and "\ndef main(" in path.read_text(encoding="utf-8")
    }


def test_help_lists_every_bench_with_its_first_docstring_line() -> None:
    code, stdout, stderr = run_bench("--help", timeout=60)
    assert code == 0, stderr
    assert stdout.startswith("usage: python -m bench NAME")
    rows = {
        line.split()[0]: line.split(None, 1)[1]
        for line in stdout.splitlines()
        if line.startswith("  ")
    }
    assert set(rows) == modules_with_main()
    assert {"e2e", "floor", "turn_walk", "replicas"} <= set(rows)
    assert "e2e_report" not in rows and "streaming_executor" not in rows  # no main: shared
    summary = ast.get_docstring(ast.parse((BENCH_DIR / "e2e.py").read_text()))
    assert summary is not None and rows["e2e"] == summary.splitlines()[0]


def test_an_unknown_name_exits_2_and_lists_the_benches() -> None:
    code, stdout, stderr = run_bench("no-such-bench", timeout=60)
    assert code == 2 and stdout == ""
    assert "no bench named 'no-such-bench'" in stderr
    assert "\n  e2e " in stderr and "\n  turn_walk " in stderr
    code, _, stderr = run_bench("e2e_report", timeout=60)  # a module, but not a bench
    assert code == 2 and "no bench named 'e2e_report'" in stderr


def test_no_name_is_a_usage_error_that_lists_the_benches() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert dispatcher.main([]) == 2
    assert err.getvalue().startswith("usage: python -m bench NAME") and "\n  e2e " in err.getvalue()


def test_a_benchs_own_flags_are_named_after_what_was_typed() -> None:
    code, stdout, stderr = run_bench("capacity", "--help", timeout=60)
    assert code == 0, stderr
    assert stdout.startswith("usage: python -m bench capacity [-h]")


def test_a_new_module_is_listed_and_run_without_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module dropped into the package (here a made-up one in a package directory of the
    test's own) is found, listed with its first line, and run by name, ``-`` for ``_``."""
    (tmp_path / "made_up_bench.py").write_text(MADE_UP)
    (tmp_path / "shared_helper.py").write_text('"""No main: not a bench."""\n')
    monkeypatch.setattr(bench, "__path__", [str(tmp_path)])
    monkeypatch.setattr(sys, "argv", ["x"])
    assert dispatcher.benches() == [
        dispatcher.Bench("made_up_bench", "A bench made up by the test: prints its arguments.")
    ]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            assert dispatcher.main(["made-up-bench", "--flag", "1"]) == 3
    finally:
        sys.modules.pop("bench.made_up_bench", None)  # imported from tmp_path: not ours to keep
    assert out.getvalue() == "made up ran with ['--flag', '1'] as python -m bench made_up_bench\n"


def test_no_bench_edits_sys_path_or_imports_the_tests() -> None:
    """bench/ imports what it needs as a package (``from bench.baseline import ...``) and from
    the shipped kit (turnwire.testing), never from tests/, and never edits sys.path."""
    for path in sorted(BENCH_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                names = []
            assert not any(n == "tests" or n.startswith("tests.") for n in names), (path, names)
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), path
