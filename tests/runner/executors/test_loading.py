"""Building executors from spec strings, and refusing bad ones clearly (R10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner_svc.executors import Executor, load_executor

VALID_FORMS = (
    "echo | sleep | fail | metered | python:<module>:<name> | subprocess+framed:<shell command>"
    " | subprocess:<shell command> | callable:<module>:<function>"
)


@pytest.mark.rule("R10")
@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("echo", "echo"),
        ("sleep", "sleep"),
        ("fail", "fail"),
        ("metered", "metered"),
        ("subprocess:cat", "subprocess"),
        ("callable:tests.runner.executors.turn_functions:sync_upper", "callable"),
    ],
)
def test_each_valid_spec_builds_its_executor(spec: str, name: str, tmp_path: Path) -> None:
    """R10: every documented spec form builds an executor with the matching name."""
    executor: Executor = load_executor(spec, ledger_path=tmp_path / "ledger.jsonl")
    assert executor.name == name


@pytest.mark.rule("R10")
@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("", "unknown executor"),
        ("bogus", "unknown executor"),
        ("Echo", "unknown executor"),
        ("echo:extra", "unknown executor"),
        ("metered", "ledger path"),
        ("subprocess:", "needs a shell command"),
        ("subprocess:   ", "needs a shell command"),
        ("callable:", "expected <module>:<function>"),
        ("callable:os", "expected <module>:<function>"),
        ("callable:no_such_module_for_turnwire:run", "cannot import module"),
        ("callable:os:no_such_function", "has no attribute"),
        ("callable:tests.runner.executors.turn_functions:NOT_CALLABLE", "not callable"),
    ],
)
def test_a_bad_spec_raises_a_clear_value_error(spec: str, why: str) -> None:
    """R10: a bad spec is a ValueError saying why and listing every valid form."""
    with pytest.raises(ValueError) as raised:
        load_executor(spec)
    message = str(raised.value)
    assert why in message
    assert VALID_FORMS in message
