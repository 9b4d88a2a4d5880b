"""One table from a refusal's reason to its gRPC status (coordinator_svc/api/errors.py
REFUSAL_CODES): every ApiError the coordinator raises names a reason the table
holds, a refusal leaves with the table's code, and the docs say the same code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grpc
import pytest

from coordinator_svc.api.errors import REFUSAL_CODES, ApiError, wire_error
from turnwire.common.v1 import errors_pb2

REPO_ROOT = Path(__file__).resolve().parents[3]
_R = errors_pb2.ErrorReason


def _api_error_reasons() -> list[tuple[str, str]]:
    """(where, reason name) for every ``ApiError(REASON, ...)`` in coordinator_svc."""
    found: list[tuple[str, str]] = []
    for path in sorted((REPO_ROOT / "coordinator_svc").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "ApiError"
            ):
                first = node.args[0] if node.args else None
                where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
                name = (
                    first.attr if isinstance(first, ast.Attribute) else ast.unparse(first or node)
                )
                found.append((where, name))
    return found


def test_every_api_error_names_a_reason_the_table_holds() -> None:
    sites = _api_error_reasons()
    assert len(sites) >= 25, "the ApiError call sites were not found"
    known = {_R.Name(reason) for reason in REFUSAL_CODES}
    unmapped = [(where, name) for where, name in sites if name not in known]
    assert unmapped == [], f"ApiError with a reason REFUSAL_CODES lacks: {unmapped}"


@pytest.mark.parametrize("reason", sorted(REFUSAL_CODES), ids=_R.Name)
def test_a_refusal_leaves_with_the_tables_code(reason: errors_pb2.ErrorReason.ValueType) -> None:
    wire = wire_error(ApiError(reason, "refused", field="x"))
    assert wire is not None
    assert (wire.code, wire.reason, wire.metadata) == (
        REFUSAL_CODES[reason],
        reason,
        {"field": "x"},
    )


def test_a_reason_outside_the_table_is_a_bug_not_a_default_code() -> None:
    with pytest.raises(KeyError):
        ApiError(_R.ERROR_REASON_NO_FREE_SLOT, "a runner's refusal, never the API's")


def test_the_docs_give_each_refusal_the_tables_code() -> None:
    """Every "`CODE` / `REASON`" the docs show for a refusal of the table agrees with it."""
    codes = {
        _R.Name(reason).removeprefix("ERROR_REASON_"): code
        for reason, code in REFUSAL_CODES.items()
    }
    pair = re.compile(r"`([A-Z_]+)` / `([A-Z_]+)`")
    checked = 0
    wrong: list[str] = []
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        for code_name, reason_name in pair.findall(page.read_text(encoding="utf-8")):
            if reason_name in codes and code_name in grpc.StatusCode.__members__:
                checked += 1
                if grpc.StatusCode[code_name] != codes[reason_name]:
                    wrong.append(f"{page.name}: {code_name} / {reason_name}")
    assert checked >= 10
    assert wrong == []
