"""What `python -m build` makes: a wheel with every file the services read; its sdist."""

from __future__ import annotations

import tarfile
import zipfile
from email.parser import Parser

from tests.packaging.venvs import Distributions, tree_files

PACKAGES = ("turnwire/", "coordinator_svc/", "runner_svc/")
# Source folder -> where the wheel installs it (pyproject.toml, [tool.setuptools.package-dir]).
MAPPED = {
    "migrations/coordinator/": "coordinator_svc/migrations/",
    "migrations/runner/": "runner_svc/migrations/",
}
CLIENT_REQUIREMENTS = {"grpcio", "grpcio-status", "protobuf", "googleapis-common-protos"}


def _installed_name(source: str) -> str | None:
    """Where a file of the tree lands in the wheel (None: not shipped)."""
    if source.startswith(PACKAGES):
        return source
    for folder, package in MAPPED.items():
        if source.startswith(folder):
            return package + source.removeprefix(folder)
    return None


def _wheel_files(distributions: Distributions) -> set[str]:
    with zipfile.ZipFile(distributions.wheel) as wheel:
        return {name for name in wheel.namelist() if ".dist-info/" not in name}


def test_the_wheel_holds_every_file_of_the_packages_and_migrations(
    distributions: Distributions,
) -> None:
    """Every file of turnwire/, coordinator_svc/, runner_svc/ (code, stubs, py.typed, the
    console's static files) and of both Alembic environments is in the wheel, the
    migrations under their services' packages; nothing else is, no bare `migrations`."""
    expected = {name for name in map(_installed_name, tree_files()) if name is not None}
    shipped = _wheel_files(distributions)
    assert sorted(expected - shipped) == []
    assert sorted(shipped - expected) == []
    for data in (
        "turnwire/py.typed",
        "coordinator_svc/py.typed",
        "runner_svc/py.typed",
        "coordinator_svc/migrations/env.py",
        "coordinator_svc/migrations/script.py.mako",
        "runner_svc/migrations/env.py",
        "coordinator_svc/console/static/index.html",
    ):
        assert data in shipped


def test_the_wheel_metadata_declares_the_two_install_shapes(distributions: Distributions) -> None:
    """METADATA: Apache-2.0 with its LICENSE file; the plain install requires only the
    client's four distributions, everything else is behind the `server` extra; three
    console scripts."""
    with zipfile.ZipFile(distributions.wheel) as wheel:
        dist_info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(dist_info).decode())
        entry_points = wheel.read(dist_info.replace("METADATA", "entry_points.txt")).decode()
        assert dist_info.replace("METADATA", "licenses/LICENSE") in wheel.namelist()
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    requirements = metadata.get_all("Requires-Dist") or []
    plain = {r.split(">")[0].split(";")[0].strip() for r in requirements if "extra ==" not in r}
    assert plain == CLIENT_REQUIREMENTS
    assert any('extra == "server"' in r and r.startswith("SQLAlchemy") for r in requirements)
    assert "server" in (metadata.get_all("Provides-Extra") or [])
    for script in ("turnwire =", "turnwire-coordinator =", "turnwire-runner ="):
        assert script in entry_points


def test_the_sdist_holds_the_sources_the_wheel_is_built_from(distributions: Distributions) -> None:
    """The sdist has LICENSE, README.md, pyproject.toml and all of migrations/ and proto/
    (the wheel fixture was built from this sdist alone)."""
    with tarfile.open(distributions.sdist) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        names = {name.removeprefix(root + "/") for name in sdist.getnames()}
    wanted = {"LICENSE", "README.md", "pyproject.toml", "MANIFEST.in"}
    wanted |= {name for name in tree_files() if name.startswith(("migrations/", "proto/"))}
    assert sorted(wanted - names) == []
