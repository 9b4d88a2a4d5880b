"""The rule index: each PROTOCOL.md rule id, the code that decides it, the tests that pin it.

    python scripts/rule_index.py            write docs/RULES.md
    python scripts/rule_index.py --check    exit 1 if docs/RULES.md is stale, a rule
                                            has no pinning test, or a marker names
                                            an id PROTOCOL.md does not define
    python scripts/rule_index.py --missing  list the rules no test pins

A rule is a line of docs/PROTOCOL.md of the form ``- **ID Title.** text`` (ID: a
capital letter, a number, an optional lower-case letter: C1, C8b, R14). A test
pins a rule when it carries ``@pytest.mark.rule("ID", ...)`` (on the function,
its class, or the module's ``pytestmark``). The code that decides a rule is
found from citations: a function or class in the shipped packages whose
docstring names the id. Everything is read with ``ast`` and regular
expressions, nothing is imported, so the index is as cheap as ``ruff``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = ROOT / "docs" / "PROTOCOL.md"
RULES_MD = ROOT / "docs" / "RULES.md"
TESTS = ROOT / "tests"
# The shipped packages, the pure cores first: the first citation found is the
# one named as "decided in".
SHIPPED = (
    "coordinator_svc/core",
    "runner_svc/core",
    "coordinator_svc",
    "runner_svc",
    "turnwire",
)
SHOWN_DECIDERS = 3
SHOWN_TESTS = 3
SUMMARY_CHARS = 150

RULE_LINE = re.compile(r"^\s*- \*\*(?P<id>[A-Z][0-9]+[a-z]?) (?P<title>[^*]+?)\*\*\s*(?P<text>.*)$")
SECTION_LINE = re.compile(r"^## (?P<title>.+)$")
# An id in prose: not a part of a longer word or id ("C1" is not in "C10" or "C1a").
ID_IN_TEXT = re.compile(
    r"(?<![A-Za-z0-9_])([A-Z][0-9]+[a-z]?)(?:\s*[-\N{EN DASH}]\s*([A-Z]?)([0-9]+))?(?![0-9a-z_])"
)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    section: str
    summary: str


@dataclass
class Index:
    rules: list[Rule]
    deciders: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    pinned_by: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    unknown_markers: list[str] = field(default_factory=list)


def parse_rules(text: str) -> list[Rule]:
    """Every rule id PROTOCOL.md defines, in order, with its section and first sentence."""
    rules: list[Rule] = []
    section = ""
    for line in text.splitlines():
        heading = SECTION_LINE.match(line)
        if heading:
            section = heading["title"].strip()
            continue
        match = RULE_LINE.match(line)
        if match:
            title = match["title"].strip().rstrip(".:")
            rules.append(Rule(match["id"], title, section, _summary(match["text"])))
    return rules


def _summary(text: str) -> str:
    """The rule's first sentence, shortened to one table cell."""
    sentence = re.split(r"(?<=[a-z`)]\.)\s", text.strip(), maxsplit=1)[0]
    sentence = sentence.replace("|", "\\|")
    if len(sentence) > SUMMARY_CHARS:
        sentence = sentence[: SUMMARY_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return sentence


def cited_ids(text: str, known: set[str]) -> list[str]:
    """The known rule ids ``text`` names, ranges included ("V1-V4" names V1..V4)."""
    found: list[str] = []
    for match in ID_IN_TEXT.finditer(text):
        first, letter, last = match.group(1), match.group(2), match.group(3)
        ids = [first]
        head = re.fullmatch(r"([A-Z])([0-9]+)", first)
        if last and head and (not letter or letter == head.group(1)):
            ids = [f"{head.group(1)}{n}" for n in range(int(head.group(2)), int(last) + 1)]
        found.extend(rule_id for rule_id in ids if rule_id in known and rule_id not in found)
    return found


def _marker_ids(decorators: list[ast.expr]) -> list[str]:
    """The ids of every ``pytest.mark.rule(...)`` among ``decorators``."""
    ids: list[str] = []
    for node in decorators:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "rule"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "mark"
        ):
            ids.extend(
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            )
    return ids


def _module_marks(tree: ast.Module) -> list[str]:
    """Ids on the module's ``pytestmark`` (one mark or a list of marks)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            value = node.value
            marks = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return _marker_ids(list(marks))
    return []


def _tests_in(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(pytest-style name, marker ids) for each test function and method."""
    module_ids = _module_marks(tree)
    tests: list[tuple[str, list[str]]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            tests.append((node.name, module_ids + _marker_ids(node.decorator_list)))
        elif isinstance(node, ast.ClassDef):
            class_ids = module_ids + _marker_ids(node.decorator_list)
            methods = [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name.startswith("test")
            ]
            for item in methods:
                tests.append(
                    (f"{node.name}::{item.name}", class_ids + _marker_ids(item.decorator_list))
                )
            if not methods and node.name.startswith("Test"):
                # A conformance suite: its tests are inherited (turnwire.testing).
                tests.append((node.name, class_ids))
    return tests


def _deciders_in(tree: ast.Module) -> list[tuple[str, str]]:
    """(qualified name, docstring) for each function and class, methods included."""
    found: list[tuple[str, str]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{node.name}"
                found.append((name, ast.get_docstring(node) or ""))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{name}.")

    visit(tree.body, "")
    return found


def build_index(root: Path = ROOT) -> Index:
    rules = parse_rules((root / "docs" / "PROTOCOL.md").read_text(encoding="utf-8"))
    known = {rule.id for rule in rules}
    index = Index(rules)
    for path in sorted((root / "tests").rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        for name, ids in _tests_in(ast.parse(path.read_text(encoding="utf-8"))):
            for rule_id in dict.fromkeys(ids):
                if rule_id in known:
                    index.pinned_by[rule_id].append(f"{relative}::{name}")
                else:
                    index.unknown_markers.append(f"{relative}::{name} names {rule_id!r}")
    seen: set[Path] = set()
    for package in SHIPPED:
        for path in sorted((root / package).rglob("*.py")):
            if path in seen or path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            seen.add(path)
            module = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
            for name, doc in _deciders_in(ast.parse(path.read_text(encoding="utf-8"))):
                for rule_id in cited_ids(doc, known):
                    index.deciders[rule_id].append(f"{module}.{name}")
    return index


def render(index: Index) -> str:
    rules = index.rules
    decided = sum(1 for rule in rules if index.deciders.get(rule.id))
    pinned = sum(1 for rule in rules if index.pinned_by.get(rule.id))
    lines = [
        "# Rule index",
        "",
        "Generated by `python scripts/rule_index.py` from docs/PROTOCOL.md (the rules),",
        "the docstrings of the shipped packages (the code that cites a rule decides or",
        "performs it; the pure cores are listed first) and the `@pytest.mark.rule(...)`",
        "markers in tests/ (the tests that pin it). Do not edit by hand: CI runs",
        "`python scripts/rule_index.py --check`. Run the tests of one rule with",
        "`scripts/test --rule ID`.",
        "",
        f"{pinned} of {len(rules)} rules have a pinning test; "
        f"{decided} of {len(rules)} name the code that decides them.",
    ]
    section = None
    for rule in rules:
        if rule.section != section:
            section = rule.section
            lines += [
                "",
                f"## {section}",
                "",
                "| id | rule | decided in | pinned by |",
                "|---|---|---|---|",
            ]
        deciders = index.deciders.get(rule.id, [])
        tests = index.pinned_by.get(rule.id, [])
        decided_in = "<br>".join(f"`{name}`" for name in deciders[:SHOWN_DECIDERS]) or "—"
        if len(deciders) > SHOWN_DECIDERS:
            decided_in += f"<br>and {len(deciders) - SHOWN_DECIDERS} more"
        pinned_cell = "<br>".join(f"`{name}`" for name in tests[:SHOWN_TESTS]) or "**none**"
        if len(tests) > SHOWN_TESTS:
            pinned_cell += f"<br>and {len(tests) - SHOWN_TESTS} more ({len(tests)} tests)"
        said = f"{rule.title}: {rule.summary}" if rule.summary else rule.title
        lines.append(f"| **{rule.id}** | {said} | {decided_in} | {pinned_cell} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="fail if docs/RULES.md is stale or a rule is unpinned"
    )
    mode.add_argument("--missing", action="store_true", help="list the rules no test pins")
    args = parser.parse_args(argv)
    index = build_index()
    unpinned = [rule.id for rule in index.rules if not index.pinned_by.get(rule.id)]
    if args.missing:
        print("\n".join(unpinned) if unpinned else "every rule has a pinning test")
        return 0
    text = render(index)
    if not args.check:
        RULES_MD.write_text(text, encoding="utf-8")
        written = RULES_MD.relative_to(ROOT)
        print(f"wrote {written}: {len(index.rules)} rules, {len(unpinned)} unpinned")
        return 0
    problems = [f"marker names an unknown rule: {entry}" for entry in index.unknown_markers]
    problems += [
        f"rule {rule_id} has no test marked @pytest.mark.rule({rule_id!r})" for rule_id in unpinned
    ]
    current = RULES_MD.read_text(encoding="utf-8") if RULES_MD.exists() else ""
    if current != text:
        problems.append("docs/RULES.md is stale: run .venv/bin/python scripts/rule_index.py")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
