"""The Debian packages a client test needs (clients/debian-packages.txt), checked with dpkg.

A test whose packages are missing fails under CI=true, naming each one, and is
skipped with the same words elsewhere: scripts/test installs them with apt-get.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.contract.repo_copy import REPO_ROOT, in_ci

PACKAGE_LIST = REPO_ROOT / "clients" / "debian-packages.txt"


def packages_for(use: str) -> list[str]:
    """The packages clients/debian-packages.txt lists for `use` ("go", "java")."""
    names = []
    for line in PACKAGE_LIST.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 2 and fields[1] == use:
            names.append(fields[0])
    assert names, f"{PACKAGE_LIST} lists no package for {use!r}"
    return names


def installed_versions(names: list[str]) -> dict[str, str]:
    """Each installed package's version, as dpkg reports it (a missing one is absent)."""
    if shutil.which("dpkg-query") is None:
        return {}
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status} ${Version}\n", *names],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    versions = {}
    for line in result.stdout.splitlines():
        name, state, version = line.split(" ", 2)
        if state == "installed":
            versions[name.split(":")[0]] = version
    return versions


def require_packages(use: str, *extra: str) -> dict[str, str]:
    """Every package for `use` (and `extra`) installed, or fail under CI / skip, naming them."""
    names = [*packages_for(use), *extra]
    versions = installed_versions(names)
    missing = [name for name in names if name not in versions]
    if missing:
        problem = (
            f"the {use} client needs the Debian package(s) {', '.join(missing)} "
            "(scripts/test installs them with apt-get when it runs as root)"
        )
        if in_ci():
            pytest.fail(problem)
        pytest.skip(problem)
    return versions
