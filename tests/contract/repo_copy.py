"""Throwaway copies of the repository's contract tooling, for tests that break things.

The tests here check that the tooling *fails* when it should (a stale stub, a
renamed field, a forbidden import), which needs a tree to damage: never the
real one, which other work shares.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# What proto/generate.py writes (and compares): *_pb2.py(i) and *_pb2_grpc.py(i).
_GENERATED_GLOB = "turnwire/**/*_pb2*.py*"
_BUF = REPO_ROOT / "node_modules" / ".bin" / "buf"
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def copy_proto_and_stubs(target: Path) -> Path:
    """Copy proto/ (sources, generator, buf config, baseline) and every generated stub."""
    shutil.copytree(REPO_ROOT / "proto", target / "proto", ignore=_IGNORED)
    for stub in REPO_ROOT.glob(_GENERATED_GLOB):
        copied = target / stub.relative_to(REPO_ROOT)
        copied.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(stub, copied)
    return target


def copy_python_packages(target: Path) -> Path:
    """Copy the importable packages and .importlinter, for lint-imports to analyse."""
    for package in ("turnwire", "coordinator_svc", "runner_svc", "bench"):
        shutil.copytree(REPO_ROOT / package, target / package, ignore=_IGNORED)
    shutil.copy2(REPO_ROOT / ".importlinter", target / ".importlinter")
    return target


def buf_path() -> Path | None:
    """The pinned buf from node_modules (installed by scripts/test), or None."""
    return _BUF if _BUF.exists() else None


def require_buf() -> Path:
    """The pinned buf; without it a test fails under CI=true and is skipped elsewhere."""
    path = buf_path()
    if path is None:
        if in_ci():
            pytest.fail("buf is missing from node_modules: scripts/test runs npm ci first")
        pytest.skip("buf is not installed (run scripts/test once: it runs npm ci)")
    return path


# `buf generate` runs every generator of a template; the Java ones start a JVM.
GENERATE_SECONDS = 240


def buf_generate(template: str, out: Path) -> None:
    """`buf generate --template TEMPLATE -o OUT` from the repository root; it must succeed."""
    result = subprocess.run(
        [str(require_buf()), "generate", "--template", template, "-o", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=GENERATE_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion with a bound on its time; output captured as text."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=90, check=False)
