"""From the installed wheel alone: migrate, serve, and run turns through the CLI and the SDK.

Every command here is a console script of a fresh venv (tests/packaging/venvs.py),
run from a temporary directory with no PYTHONPATH: nothing of the checkout is
on its sys.path. The coordinator and the runner are real processes over mutual
TLS, with certificates from the venv's own `turnwire certs`. The deployment
runs twice: from the newest releases the index has (the SDK then from a
client-only venv), and from every requirement at its floor.
"""

from __future__ import annotations

import subprocess
import textwrap
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.packaging.venvs import REPO_ROOT, Venv
from turnwire.launcher import ManagedProcess

pytestmark = pytest.mark.slow
PYPROJECT_VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


@dataclass(frozen=True)
class Deployment:
    venv: Venv  # where the services run from
    sdk_venv: Venv  # where the SDK and the client commands run from
    address: str
    token: str
    admin_token: str
    ca_file: Path
    workdir: Path

    def client_flags(self, token: str | None = None) -> list[str]:
        return [
            "--address", self.address,
            "--token", token or self.token,
            "--ca-file", str(self.ca_file),
        ]  # fmt: skip


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must have exited 0 (else the failure shows its output)."""
    assert done.returncode == 0, (
        f"{done.args} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done.stdout


def _token(venv: Venv, workdir: Path, principal: str, *scopes: str) -> str:
    scope_flags = [flag for scope in scopes for flag in ("--scope", scope)]
    out = _ok(
        venv.run(
            "turnwire-coordinator", "tokens", "add",
            "--file", workdir / "tokens", "--principal", principal, *scope_flags,
            cwd=workdir,
        )
    )  # fmt: skip
    return out.strip().splitlines()[-1].split()[-1]


def _service(venv: Venv, workdir: Path, name: str, *argv: str | Path) -> ManagedProcess:
    return ManagedProcess(
        name,
        [str(venv.bin(str(argv[0]))), *map(str, argv[1:])],
        workdir / f"{name}.log",
        workdir / f"{name}.addr",
        env={"PATH": venv.env()["PATH"], "PYTHONPATH": ""},
        cwd=workdir,
    )


@pytest.fixture(scope="module", params=["newest", "floors"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A coordinator and a runner from the server venv (or the floor venv), each store
    migrated by its own console script first; both ended by PID (SIGTERM, then
    SIGKILL) afterwards."""
    server_venv: Venv = request.getfixturevalue(
        "server_venv" if request.param == "newest" else "floor_venv"
    )
    sdk_venv: Venv = request.getfixturevalue(
        "client_venv" if request.param == "newest" else "floor_venv"
    )
    workdir = tmp_path_factory.mktemp(f"deployment-{request.param}")
    journal = f"sqlite:///{workdir / 'journal.db'}"
    migrated = _ok(
        server_venv.run("turnwire-coordinator", "migrate", "--journal-url", journal, cwd=workdir)
    )
    assert "journal schema: (empty) -> " in migrated
    _ok(
        server_venv.run(
            "turnwire-runner", "migrate", "--store", workdir / "runner-1.db", cwd=workdir
        )
    )
    _ok(server_venv.run("turnwire", "certs", "--dir", workdir / "tls", cwd=workdir))
    tls = workdir / "tls"
    token = _token(server_venv, workdir, "alice")
    admin_token = _token(server_venv, workdir, "operator", "admin")
    runner = _service(
        server_venv, workdir, "runner-1",
        "turnwire-runner", "serve", "--listen", "127.0.0.1:0", "--name", "runner-1",
        "--store", workdir / "runner-1.db",
        "--tls-cert", tls / "runner-1.pem", "--tls-key", tls / "runner-1.key",
        "--tls-ca", tls / "ca.pem",
    )  # fmt: skip
    coordinator: ManagedProcess | None = None
    try:
        runner_address = runner.start(timeout=60)
        coordinator = _service(
            server_venv, workdir, "coordinator",
            "turnwire-coordinator", "serve", "--listen", "127.0.0.1:0", "--journal-url", journal,
            "--runner", f"runner-1={runner_address}", "--tokens-file", workdir / "tokens",
            "--tls-cert", tls / "coordinator.pem", "--tls-key", tls / "coordinator.key",
            "--tls-ca", tls / "ca.pem",
        )  # fmt: skip
        address = coordinator.start(timeout=60)
        credentials = grpc.ssl_channel_credentials((tls / "ca.pem").read_bytes())
        coordinator.wait_healthy(60, lambda at: grpc.secure_channel(at, credentials))
        ca_file = tls / "ca.pem"
        yield Deployment(server_venv, sdk_venv, address, token, admin_token, ca_file, workdir)
    finally:
        for process in (coordinator, runner):
            if process is not None:
                process.terminate()


def test_the_services_run_from_the_venv_not_the_checkout(server_venv: Venv, tmp_path: Path) -> None:
    """Installed with [server], every package imports from the venv's site-packages and
    the checkout is not on sys.path."""
    probe = (
        "import sys, turnwire, coordinator_svc, runner_svc, coordinator_svc.migrations; "
        "print(turnwire.__file__, coordinator_svc.__file__, runner_svc.__file__, "
        "coordinator_svc.migrations.__file__); print(*sys.path, sep='\\n')"
    )
    files, *path = _ok(server_venv.run("python", "-c", probe, cwd=tmp_path)).splitlines()
    for file in files.split():
        assert Path(file).is_relative_to(server_venv.site_packages), file
    entries = [Path(entry or tmp_path).resolve() for entry in path]  # "": the cwd, tmp_path
    assert not [entry for entry in entries if entry.is_relative_to(REPO_ROOT)], entries


def test_every_command_prints_the_distribution_version(server_venv: Venv, tmp_path: Path) -> None:
    """--version on turnwire, turnwire-coordinator and turnwire-runner, and
    turnwire.__version__, are pyproject.toml's version."""
    for command in ("turnwire", "turnwire-coordinator", "turnwire-runner"):
        assert _ok(server_venv.run(command, "--version", cwd=tmp_path)) == (
            f"{command} {PYPROJECT_VERSION}\n"
        )
    printed = _ok(
        server_venv.run(
            "python", "-c", "import turnwire; print(turnwire.__version__)", cwd=tmp_path
        )
    )
    assert printed.strip() == PYPROJECT_VERSION


def test_a_turn_submitted_with_the_cli_succeeds(deployment: Deployment) -> None:
    """`turnwire submit --wait` from the services' venv: the turn ends SUCCEEDED (exit 0)."""
    out = _ok(
        deployment.venv.run(
            "turnwire", "submit", "-i", "hello", "--model", "builtin/echo", "--wait",
            *deployment.client_flags(), cwd=deployment.workdir,
        )
    )  # fmt: skip
    assert "SUCCEEDED" in out


SDK_TURN = textwrap.dedent(
    """
    import sys
    import grpc
    from turnwire.client import OperationState, TurnwireClient

    address, token, ca_file = sys.argv[1:]
    credentials = grpc.ssl_channel_credentials(open(ca_file, "rb").read())
    with TurnwireClient(address, token=token, credentials=credentials) as client:
        final = client.submit_and_wait(items=["from the SDK"], model="builtin/echo", timeout=60)
    assert final.state is OperationState.SUCCEEDED, final
    print(final.operation_id)
    """
)


def test_the_sdk_runs_a_turn_over_tls_and_the_client_commands_read_it(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The SDK (newest: from a plain `pip install turnwire`, no extra) submits a turn over
    TLS and it SUCCEEDS; the client commands then read it back (get, list, watch,
    admin runners)."""
    client_venv = deployment.sdk_venv
    script = tmp_path / "sdk_turn.py"
    script.write_text(SDK_TURN)
    flags = deployment.client_flags()
    out = _ok(
        client_venv.run(
            "python", script, deployment.address, deployment.token, deployment.ca_file, cwd=tmp_path
        )
    )
    operation_id = out.strip().splitlines()[-1]
    assert "SUCCEEDED" in _ok(
        client_venv.run("turnwire", "get", operation_id, *flags, cwd=tmp_path)
    )
    assert operation_id in _ok(client_venv.run("turnwire", "list", *flags, cwd=tmp_path))
    assert "SUCCEEDED" in _ok(
        client_venv.run("turnwire", "watch", operation_id, *flags, cwd=tmp_path)
    )
    admin = deployment.client_flags(deployment.admin_token)
    assert "runner-1" in _ok(client_venv.run("turnwire", "admin", "runners", *admin, cwd=tmp_path))
