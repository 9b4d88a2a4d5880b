"""`pip install turnwire` (no extra): the SDK and the client CLI, and nothing of the server.

The installed size is printed (and held under the 40 MB the client install
promises): site-packages without and with what `python -m venv` puts there
itself (pip, setuptools).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.packaging.venvs import VENV_OWN, Venv, report_figure, tree_size
from turnwire.cli import EXTENSIONS

CLIENT_SIZE_LIMIT = 40 * 1024 * 1024
SERVER_MODULES = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "cryptography",
    "prometheus_client",
    "opentelemetry",
    "uvloop",
    "grpc_health",
    "grpc_reflection",
)
INSTALL_HINT = "pip install 'turnwire[server]'"


def test_the_client_install_has_none_of_the_server_dependencies(
    client_venv: Venv, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """None of the server extra's modules is importable in a client-only venv, and
    turnwire.client imports there."""
    probe = (
        "import importlib.util, turnwire.client; "
        f"print([m for m in {SERVER_MODULES!r} if importlib.util.find_spec(m) is not None])"
    )
    done = client_venv.run("python", "-c", probe, cwd=tmp_path_factory.mktemp("probe"))
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_the_client_install_is_small(client_venv: Venv, pytestconfig: pytest.Config) -> None:
    """The client-only site-packages (pip and setuptools left out) is under 40 MB; both
    figures are printed."""
    without_pip = tree_size(client_venv.site_packages, leave_out=VENV_OWN)
    with_pip = tree_size(client_venv.site_packages)
    line = (
        f"client-only install (pip install turnwire): site-packages {without_pip / 2**20:.1f} MiB "
        f"without pip and setuptools, {with_pip / 2**20:.1f} MiB with them"
    )
    report_figure(pytestconfig, line)
    assert without_pip < CLIENT_SIZE_LIMIT, line


@pytest.mark.parametrize(
    "argv",
    [
        ("turnwire", "up"),
        ("turnwire", "certs", "--dir", "tls"),
        ("turnwire", "check", "--help"),
        ("turnwire-coordinator", "migrate"),
        ("turnwire-runner", "serve", "--store", "r.db"),
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_server_command_in_a_client_install_names_the_extra(
    client_venv: Venv, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """A command that needs the server extra exits 2 with one line naming
    `pip install 'turnwire[server]'` and the missing distributions, and changes nothing."""
    done = client_venv.run(*argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert INSTALL_HINT in done.stderr and "SQLAlchemy" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_client_help_lists_the_server_commands_as_needing_the_extra(
    client_venv: Venv, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`turnwire --help` in a client-only install works and marks each command that needs
    the server extra (up, demo, chaos, check, certs) `(needs turnwire[server])`."""
    done = client_venv.run("turnwire", "--help", cwd=tmp_path_factory.mktemp("help"))
    assert done.returncode == 0, done.stderr
    listing = " ".join(done.stdout.split())  # argparse wraps the lines
    for extension in EXTENSIONS:
        marked = f"{extension.name} {extension.summary} (needs turnwire[server])"
        assert (marked in listing) is extension.server, extension.name
