"""Run one bench: ``python -m bench NAME [args]`` calls ``bench.NAME``'s ``main(args)``.

``python -m bench --help`` lists every bench with the first line of its
docstring. A bench is any module of this package with a top-level ``main``;
they are found on disk (pkgutil), so a new module is listed and runnable
without an edit here. NAME may spell ``_`` as ``-`` (``turn-walk``). An
unknown NAME exits 2 with the list.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from dataclasses import dataclass
from importlib.machinery import FileFinder
from pathlib import Path

import bench

EXIT_USAGE = 2
USAGE = "usage: python -m bench NAME [ARGS ...]   (python -m bench NAME --help: its own flags)"


@dataclass(frozen=True)
class Bench:
    name: str
    summary: str  # the first line of its docstring


def _read(path: Path) -> Bench | None:
    """The bench a module file is, or None if it has no top-level ``main``. Read with
    ``ast``, not imported: listing must not load every bench's grpc, SQL and servers."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    if not any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main"
        for node in tree.body
    ):
        return None
    lines = (ast.get_docstring(tree) or "").strip().splitlines()
    return Bench(path.stem, lines[0] if lines else "")


def benches() -> list[Bench]:
    """Every bench of the package, by name."""
    found = []
    for module in pkgutil.iter_modules(bench.__path__):
        finder = module.module_finder
        if module.ispkg or module.name.startswith("_") or not isinstance(finder, FileFinder):
            continue  # __main__ (this dispatcher), a private helper, not a file
        source = Path(finder.path) / f"{module.name}.py"
        if source.is_file() and (one := _read(source)) is not None:
            found.append(one)
    return sorted(found, key=lambda b: b.name)


def listing(found: list[Bench]) -> str:
    width = max((len(b.name) for b in found), default=0)
    rows = "\n".join(f"  {b.name:<{width}}  {b.summary}" for b in found)
    return (
        f"{USAGE}\n\nTurnwire's benchmarks: each prints figures and never passes or fails on "
        f"time (docs/PERFORMANCE.md).\n\n{rows}"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(listing(benches()), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_USAGE
    name, rest = args[0].replace("-", "_"), args[1:]
    found = benches()
    if name not in {b.name for b in found}:
        print(f"python -m bench: no bench named {args[0]!r}\n\n{listing(found)}", file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(f"bench.{name}")
    # argparse names the program after sys.argv[0]: say what was typed, not __main__.py.
    sys.argv[0] = f"python -m bench {name}"
    code = module.main(rest)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
