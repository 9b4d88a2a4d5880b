"""Building Turnwire's sdist and wheel as a user's pip would, and venvs that hold only them.

The build runs on a copy of the working tree (what git tracks or would track),
so it never writes build/ or *.egg-info into the checkout, and sees uncommitted
changes. ``python -m build`` makes the sdist, then the wheel *from the sdist*:
a file the sdist forgot fails the wheel build. Each venv is a plain
``python -m venv`` with the wheel installed by its own pip from the configured
package index; nothing of the source tree is on its ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]
# Installed beside pip by `python -m venv` itself, not by Turnwire.
VENV_OWN = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")


class PackagingError(RuntimeError):
    """A build or install step failed; the message carries its output."""


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (bounded in time); its CompletedProcess, output captured as text."""
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _checked(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = run(argv, cwd=cwd, env=env)
    if done.returncode != 0:
        output = done.stdout[-4000:] + done.stderr[-4000:]
        raise PackagingError(f"{' '.join(argv)} exited {done.returncode}:\n{output}")
    return done.stdout


def tree_files() -> list[str]:
    """The checkout's files as git sees them (tracked, and untracked but not ignored),
    relative to its root; a tracked file deleted in the working tree is left out."""
    listing = _checked(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT
    )
    return sorted(name for name in set(listing.split("\0")) if (REPO_ROOT / name).is_file())


def copy_working_tree(target: Path) -> Path:
    for name in tree_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, destination)
    return target


@dataclass(frozen=True)
class Distributions:
    sdist: Path
    wheel: Path


def build_distributions(workdir: Path) -> Distributions:
    """``python -m build`` on a copy of the tree: the sdist, then the wheel from it."""
    tree = copy_working_tree(workdir / "tree")
    out = workdir / "dist"
    _checked([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], cwd=workdir)
    (sdist,) = out.glob("turnwire-*.tar.gz")
    (wheel,) = out.glob("turnwire-*.whl")
    return Distributions(sdist=sdist, wheel=wheel)


@dataclass(frozen=True)
class Venv:
    """A virtual environment with Turnwire installed from a wheel, and nothing else of ours."""

    root: Path

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def python(self) -> Path:
        return self.bin("python")

    @property
    def site_packages(self) -> Path:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "lib" / version / "site-packages"

    def env(self) -> dict[str, str]:
        """This process's environment with the venv first on PATH and no PYTHONPATH."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(
        self, *argv: str | Path, cwd: Path, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the venv's commands (``turnwire``, ``python``...) from ``cwd``."""
        command = [str(self.bin(str(argv[0]))), *map(str, argv[1:])]
        return run(command, cwd=cwd, env=self.env(), timeout=timeout)


def make_venv(root: Path, requirement: str, constraints: Sequence[str] = ()) -> Venv:
    """``python -m venv ROOT`` and ``ROOT/bin/pip install REQUIREMENT`` (under
    ``constraints``, pip's ``-c`` lines, when given)."""
    base = getattr(sys, "_base_executable", sys.executable)  # not this venv's site-packages
    _checked([base, "-m", "venv", str(root)], cwd=root.parent)
    venv = Venv(root)
    constraint_flags: list[str] = []
    if constraints:
        constraint_file = root / "floors.txt"
        constraint_file.write_text("".join(f"{line}\n" for line in constraints))
        constraint_flags = ["--constraint", str(constraint_file)]
    _checked(
        [str(venv.python), "-m", "pip", "install", "--quiet", *constraint_flags, requirement],
        cwd=root.parent,
        env=venv.env(),
    )
    return venv


def floors(wheel: Path, extra: str) -> list[str]:
    """``NAME==FLOOR`` for every requirement of the wheel and of its ``extra`` that
    applies here, FLOOR being its ``>=`` bound (pyproject.toml's floors)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    pins = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]
        pins.append(f"{requirement.name}=={floor}")
    return pins


def tree_size(folder: Path, *, leave_out: tuple[str, ...] = ()) -> int:
    """Bytes of the files below ``folder``, leaving out its entries named (or whose
    name starts with one of) ``leave_out``."""
    total = 0
    for entry in folder.iterdir():
        if entry.name.startswith(leave_out):
            continue
        if entry.is_dir() and not entry.is_symlink():
            total += sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
        elif entry.is_file():
            total += entry.stat().st_size
    return total


FIGURES = pytest.StashKey[list[str]]()


def report_figure(config: pytest.Config, line: str) -> None:
    """Print ``line`` under "packaging figures" at the end of the run (conftest.py's
    pytest_terminal_summary; a pytest-xdist worker's figures are not printed)."""
    config.stash.setdefault(FIGURES, []).append(line)
