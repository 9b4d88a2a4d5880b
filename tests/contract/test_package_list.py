"""pyproject.toml lists every package of the tree (setuptools' list is explicit).

The migrations are mapped into the services' packages (package-dir), which
setuptools' ``find`` cannot do, so pyproject lists its packages by hand; a
new package left out of the list is left out of the wheel. tests/packaging
finds that from a built wheel; this finds it in a second, in the quick tier.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tree_is_in_the_wheel_list():
    """Each directory with an __init__.py under the three packages is listed (and nothing else)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    mapped = {name for name in listed if name in setuptools["package-dir"]} | {
        name for name in listed if any(name.startswith(m + ".") for m in setuptools["package-dir"])
    }
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in ("turnwire", "coordinator_svc", "runner_svc")
        for init in (ROOT / root).rglob("__init__.py")
    }
    assert sorted(found - listed) == [], "add these to [tool.setuptools] packages"
    assert sorted(listed - mapped - found) == [], "these are listed but not in the tree"
