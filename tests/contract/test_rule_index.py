"""The rule index (scripts/rule_index.py, docs/RULES.md): every rule PROTOCOL.md
defines has a test marked ``@pytest.mark.rule(ID)``, no marker names a rule that
does not exist, and the generated page is the one the tree produces today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]


def _rule_index() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rule_index", REPO_ROOT / "scripts" / "rule_index.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rule_index", module)
    spec.loader.exec_module(module)
    return module


rule_index = _rule_index()


def test_every_protocol_rule_has_a_pinning_test_and_every_marker_a_rule() -> None:
    index = rule_index.build_index(REPO_ROOT)
    assert len(index.rules) >= 60, (
        "PROTOCOL.md's rules were not found: has the `- **ID Title.**` form changed?"
    )
    unpinned = [rule.id for rule in index.rules if not index.pinned_by.get(rule.id)]
    assert unpinned == [], f"rules with no @pytest.mark.rule test: {unpinned}"
    assert index.unknown_markers == []


def test_docs_rules_md_is_what_the_tree_generates() -> None:
    index = rule_index.build_index(REPO_ROOT)
    current = (REPO_ROOT / "docs" / "RULES.md").read_text(encoding="utf-8")
    assert current == rule_index.render(index), "stale: run .venv/bin/python scripts/rule_index.py"


def test_a_marker_naming_an_unknown_rule_and_an_unpinned_rule_are_both_reported(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "PROTOCOL.md").write_text(
        "## 3. Rules\n\n- **C1 Accept.** Persist first.\n- **C1a Early.** Ride along.\n",
        encoding="utf-8",
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.rule('C1', 'C77')\ndef test_one():\n    pass\n",
        encoding="utf-8",
    )
    for package in rule_index.SHIPPED:
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
    index = rule_index.build_index(tmp_path)
    assert index.pinned_by["C1"] == ["tests/test_x.py::test_one"]
    assert not index.pinned_by.get("C1a")
    assert index.unknown_markers == ["tests/test_x.py::test_one names 'C77'"]


def test_the_parser_reads_every_rule_form_and_citations_with_ranges() -> None:
    text = (
        "## 4. Runner rules\n\n"
        "- **R3 Write ahead, in two steps.** The dedupe row is durable. Then more.\n"
        "- **C8 Resolve `DISPATCH_UNKNOWN` by preflight:**\n"
        "  - **C8b Give up with proof.** Before ending.\n"
        "not a rule: **C9 Track.**\n"
    )
    rules = rule_index.parse_rules(text)
    assert [(rule.id, rule.title, rule.section) for rule in rules] == [
        ("R3", "Write ahead, in two steps", "4. Runner rules"),
        ("C8", "Resolve `DISPATCH_UNKNOWN` by preflight", "4. Runner rules"),
        ("C8b", "Give up with proof", "4. Runner rules"),
    ]
    assert rules[0].summary == "The dedupe row is durable."
    known = {"C1", "C1a", "C10", "V1", "V2", "V3", "V4", "R3"}
    assert rule_index.cited_ids("C1a then C10, never C1x; V1-V4 and R3.", known) == [
        "C1a",
        "C10",
        "V1",
        "V2",
        "V3",
        "V4",
        "R3",
    ]
