"""An install that lacks a data file the services need fails with one clear line, changing nothing.

The process tests copy a service's installed package out of the server venv
without one file of its Alembic environment and put that copy first on
PYTHONPATH (the shared venv itself stays whole).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.packaging.venvs import Venv, run
from turnwire.distribution import MissingPackageData, alembic_environment


def test_a_missing_environment_package_is_named() -> None:
    """No such package: MissingPackageData names it and says to reinstall."""
    with pytest.raises(MissingPackageData, match=r"no package no_such_svc\.migrations.*reinstall"):
        alembic_environment("no_such_svc.migrations")


def test_an_environment_without_env_py_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package with versions/ but no env.py: MissingPackageData names env.py."""
    package = tmp_path / "half_installed"
    (package / "versions").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingPackageData, match=r"half_installed lacks env\.py; reinstall"):
        alembic_environment("half_installed")


def _package_without(venv: Venv, package: str, missing: str, overlay: Path) -> Path:
    """A copy of ``package`` from the venv's site-packages into ``overlay``, less ``missing``."""
    copy = overlay / package
    shutil.copytree(venv.site_packages / package, copy)
    gone = copy / missing
    if gone.is_dir():
        shutil.rmtree(gone)
    else:
        gone.unlink()
    return overlay


@pytest.mark.parametrize(
    ("package", "missing", "argv", "status"),
    [
        (
            "coordinator_svc",
            "migrations/env.py",
            ["migrate", "--journal-url", "sqlite:///journal.db"],
            1,
        ),
        ("runner_svc", "migrations/versions", ["migrate", "--store", "store.db"], 2),
    ],
    ids=["coordinator without env.py", "runner without versions/"],
)
def test_a_service_missing_its_migrations_says_so(
    server_venv: Venv,
    tmp_path: Path,
    package: str,
    missing: str,
    argv: list[str],
    status: int,
) -> None:
    """`python -m SERVICE migrate` from an install lacking part of its Alembic environment
    exits non-zero with one line naming the missing file and 'reinstall', no traceback,
    and creates no database file."""
    overlay = _package_without(server_venv, package, missing, tmp_path / "overlay")
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {**server_venv.env(), "PYTHONPATH": str(overlay)}
    done = run([str(server_venv.python), "-m", package, *argv], cwd=workdir, env=env, timeout=60)
    assert done.returncode == status, done.stdout + done.stderr
    assert f"lacks {Path(missing).name}" in done.stderr and "reinstall" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(workdir.iterdir()) == []
