"""No import circles in either service or the shared package (issue 26).

A circle (the engine importing the watch that imports the engine) is how a
helper ends up reaching back into the module that drives it. grimp (import-
linter's graph) lists every module's direct imports, type-checking ones too;
any strongly connected set of more than one module is a circle.
"""

from __future__ import annotations

import grimp
import pytest


def circles(package: str, extra: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Every set of ``package``'s modules that import each other in a circle
    (``extra``: imports to add, for the teeth test)."""
    graph = grimp.build_graph(package)
    imports = {
        module: {m for m in graph.find_modules_directly_imported_by(module) if m in graph.modules}
        for module in graph.modules
    }
    for module, more in (extra or {}).items():
        imports[module] |= more
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(imports[start])))]
        order[start] = low[start] = len(order)
        stack.append(start)
        while work:
            module, pending = work[-1]
            for target in pending:
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    work.append((target, iter(sorted(imports[target]))))
                    break
                if target in stack:
                    low[module] = min(low[module], order[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == order[module]:
                    members = []
                    while True:
                        member = stack.pop()
                        members.append(member)
                        if member == module:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))

    for module in sorted(imports):
        if module not in order:
            visit(module)
    return found


@pytest.mark.parametrize("package", ["coordinator_svc", "runner_svc", "turnwire"])
def test_no_modules_import_each_other_in_a_circle(package: str) -> None:
    """No module of the package imports, directly or through others, one that imports it."""
    assert circles(package) == []


def test_the_check_finds_a_planted_circle() -> None:
    """Teeth: the engine importing the watch that imports it back is found."""
    engine, watch = "coordinator_svc.dispatcher.engine", "coordinator_svc.dispatcher.watching"
    (found,) = circles("coordinator_svc", {watch: {engine}})
    assert {engine, watch} <= set(found)
