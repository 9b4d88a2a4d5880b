"""One test kit (issue 26): tests and benchmarks start services in process only through
turnwire.testing's Stack. A module that imports an app's start function itself is
either named here, with why, or this fails; so is a name here that no longer does."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START_FUNCTIONS = {
    "coordinator_svc.app": {"start_coordinator"},
    "runner_svc.app": {"start_runner"},
}
# Modules that test or are the start itself, so they must call it directly.
ALLOWED = {
    "tests/coordinator/api/test_app.py": "pins what start_coordinator wires and refuses",
    "tests/coordinator/api/test_retention_wiring.py": "starts on a journal it hands in",
    "tests/coordinator/api/test_serving_during_recovery.py": "pins what start_coordinator "
    "serves while its recovery is held",
    "tests/security/test_transport_config.py": "pins the starts refused for bad transport",
    "bench/counting_coordinator.py": "is the coordinator process bench/e2e.py measures",
    "bench/turn_walk.py": "walks trees older than the kit too (run from that tree's root)",
}


def _starts_services_itself(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module in START_FUNCTIONS
        and {alias.name for alias in node.names} & START_FUNCTIONS[node.module]
        for node in ast.walk(tree)
    )


def test_only_the_named_modules_start_services_without_the_kit() -> None:
    """Every in-process stand-up goes through turnwire.testing.stack; the exceptions are
    exactly ALLOWED (each one tests, or is, the start function)."""
    found = {
        path.relative_to(REPO).as_posix()
        for root in ("tests", "bench")
        for path in sorted((REPO / root).rglob("*.py"))
        if _starts_services_itself(path)
    }
    assert found == set(ALLOWED), (found - set(ALLOWED), set(ALLOWED) - found)
