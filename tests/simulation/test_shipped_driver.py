"""The simulation verifies the coordinator step that ships: its coordinator
performs ``coordinator_svc.driver.step`` and decides no step of its own
(issue 26). A shell that called the core itself, judged leases itself or
committed outside the driver's effects would be a second version of the
rules, and what the simulation checks would no longer be what runs."""

from __future__ import annotations

import ast
from pathlib import Path

from coordinator_svc.driver import step as driver_step
from tests.simulation import sim_coordinator

SHELL = Path(sim_coordinator.__file__)
# What deciding a step of its own would call: the core, the §5 role rules,
# the cancel mark, or the policy (the core or a teeth test's broken one).
DECIDING = {"decide", "role", "mark_requested", "policy"}


def _called_names(tree: ast.AST) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            found.setdefault(name, []).append(node.lineno)
    return found


def test_the_simulated_coordinator_steps_through_the_shipped_driver() -> None:
    """The simulated coordinator's step is the driver's: it builds the driver's step
    machine and calls neither the core nor the lease rules itself."""
    assert sim_coordinator.step_machine is driver_step.step
    called = _called_names(ast.parse(SHELL.read_text()))
    assert "step_machine" in called
    own = {name: lines for name, lines in called.items() if name in DECIDING}
    assert not own, f"{SHELL.name} decides a step of its own at {own}"


def test_the_contract_check_catches_a_shell_that_calls_the_core() -> None:
    """Teeth: the same check finds a direct ``decide(...)`` call in a shell."""
    planted = SHELL.read_text() + "\n\ndef own_step(r, e, c):\n    return decide(r, e, c)\n"
    called = _called_names(ast.parse(planted))
    assert "decide" in called
