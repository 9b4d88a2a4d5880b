"""Issue 11 (R11): transport security is chosen explicitly, refused when unsafe, works end to end.

- nothing starts without a choice (TLS, or plaintext on loopback with a secret);
- plaintext is refused on any non-loopback address, before anything is opened;
- secret and key files that others may read are refused;
- a whole turn runs over TLS: the SDK to the coordinator (server TLS) and the
  coordinator to its runner (mutual TLS), certificates from ``turnwire certs``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator_svc.app import start_coordinator
from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
from runner_svc.app import RunnerConfig, start_runner
from tests.support import runner_access
from turnwire.certs import issue_deployment
from turnwire.client import AsyncTurnwireClient
from turnwire.client.failures import CheckConnectionSettings
from turnwire.secure_channels import channel_credentials
from turnwire.testing.stack import Stack
from turnwire.transport_security import (
    RunnerAccess,
    RunnerCredentials,
    SecurityConfigError,
    TlsMaterial,
    new_secret,
    read_secret_file,
    write_secret_file,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tw_security_test_token"


def _cli(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)},
    )


def test_a_runner_without_an_access_rule_does_not_start(tmp_path: Path) -> None:
    """No TLS and no secret: ValueError naming both ways, and no store was created."""
    with pytest.raises(ValueError, match="serves only its coordinator"):
        asyncio.run(start_runner(RunnerConfig(store_path=tmp_path / "r.db")))
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "192.0.2.1:0", "[::]:0", "example.com:0"])
def test_a_plaintext_runner_is_refused_off_loopback(tmp_path: Path, listen: str) -> None:
    """Plaintext on any non-loopback address is refused before the store is opened."""
    config = RunnerConfig(store_path=tmp_path / "r.db", access=runner_access.ACCESS, listen=listen)
    with pytest.raises(SecurityConfigError, match="not a loopback address"):
        asyncio.run(start_runner(config))
    assert not (tmp_path / "r.db").exists()


def test_a_coordinator_with_runners_but_no_runner_credentials_opens_nothing(
    tmp_path: Path,
) -> None:
    """Runners configured, no credentials: refused before the journal is created."""
    journal = tmp_path / "journal.db"
    config = CoordinatorConfig(
        journal_url=f"sqlite:///{journal}", runners=(RunnerEndpoint("r1", "127.0.0.1:9"),)
    )
    with pytest.raises(SecurityConfigError, match="no runner credentials"):
        asyncio.run(start_coordinator(config))
    assert not journal.exists()


def test_a_plaintext_coordinator_is_refused_off_loopback(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    config = CoordinatorConfig(listen="0.0.0.0:0", journal_url=f"sqlite:///{journal}")
    with pytest.raises(SecurityConfigError, match="not a loopback address"):
        asyncio.run(start_coordinator(config))
    assert not journal.exists()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_secret_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secret"
    write_secret_file(path)
    path.chmod(mode)
    with pytest.raises(SecurityConfigError, match="chmod 600"):
        read_secret_file(path)


@pytest.mark.parametrize("text", ["", "short", "has a space in the middle of it", "\x00" * 20])
def test_a_secret_file_without_a_usable_secret_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(SecurityConfigError, match="at least 16"):
        read_secret_file(path)


def test_a_secret_file_round_trips_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    secret = write_secret_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_secret_file(path) == secret and len(secret) >= 40


def test_a_tls_key_others_may_read_is_refused(tmp_path: Path) -> None:
    issue_deployment(tmp_path)
    (tmp_path / "runner-1.key").chmod(0o644)
    with pytest.raises(SecurityConfigError, match="TLS private key"):
        TlsMaterial.from_files(
            tmp_path / "runner-1.pem", tmp_path / "runner-1.key", tmp_path / "ca.pem"
        )


def test_access_and_credentials_take_exactly_one_way() -> None:
    tls = TlsMaterial(b"cert", b"key", b"ca")
    for make in (RunnerAccess, RunnerCredentials):
        with pytest.raises(SecurityConfigError, match="exactly one"):
            make()
        with pytest.raises(SecurityConfigError, match="exactly one"):
            make(secret=new_secret(), tls=tls)
    assert "key" not in repr(RunnerAccess(tls=tls)) and "PRIVATE" not in repr(tls)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "--tls-cert"),
        (("--plaintext",), "--coordinator-secret-file"),
        (("--tls-cert", "c.pem"), "all of --tls-cert, --tls-key and --tls-ca"),
    ],
    ids=["no-choice", "plaintext-without-secret", "half-tls"],
)
def test_runner_cli_refuses_to_start_without_a_complete_choice(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    done = _cli("runner_svc", "serve", "--store", str(tmp_path / "r.db"), *args)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r.db").exists()


def test_runner_cli_refuses_plaintext_off_loopback(tmp_path: Path) -> None:
    done = _cli(
        "runner_svc", "serve", "--store", str(tmp_path / "r.db"), "--listen", "0.0.0.0:0",
        *runner_access.runner_flags(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "not a loopback address" in done.stderr
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "choose transport security"),
        (("--plaintext", "--listen", "0.0.0.0:0"), "not a loopback address"),
        (("--plaintext", "--runner", "r1=127.0.0.1:9"), "needs --runner-secret-file"),
    ],
    ids=["no-choice", "plaintext-off-loopback", "runners-without-secret"],
)
def test_coordinator_cli_refuses_to_start_without_a_safe_choice(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    journal = tmp_path / "journal.db"
    done = _cli("coordinator_svc", "serve", "--journal-url", f"sqlite:///{journal}", *args)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not journal.exists()


def test_coordinator_security_comes_from_environment_variables_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TURNWIRE_COORDINATOR_PLAINTEXT=1 and TURNWIRE_RUNNER_SECRET_FILE configure what the
    flags do (a deployment that configures by environment)."""
    monkeypatch.setenv("TURNWIRE_COORDINATOR_PLAINTEXT", "1")
    monkeypatch.setenv("TURNWIRE_RUNNER_SECRET_FILE", str(runner_access.secret_file()))
    from coordinator_svc.__main__ import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args(["serve", "--runner", "r1=127.0.0.1:9"]))
    assert config.tls is None
    assert config.runner_credentials is not None
    assert config.runner_credentials.call_metadata == (
        ("x-turnwire-runner-secret", runner_access.SECRET),
    )


def test_a_turn_runs_over_tls_end_to_end(tmp_path: Path) -> None:
    """turnwire certs material: the SDK reaches the coordinator over TLS (trusting the
    deployment CA), the coordinator its runner over mutual TLS; the turn SUCCEEDS. A
    plaintext client cannot talk to that coordinator."""
    certs = tmp_path / "certs"
    issue_deployment(certs)

    def material(name: str) -> TlsMaterial:
        return TlsMaterial.from_files(
            certs / f"{name}.pem", certs / f"{name}.key", certs / "ca.pem"
        )

    coordinator_tls = material("coordinator")
    stack = Stack(
        tmp_path,
        access=RunnerAccess(tls=material("runner-1")),
        credentials=RunnerCredentials(tls=coordinator_tls),
    )

    async def scenario() -> None:
        async with stack:
            runner = await stack.start_runner("r1", executor="echo")
            stack.add_token("alice", TOKEN)
            coordinator = await stack.start_coordinator(tls=coordinator_tls)
            trust = channel_credentials(coordinator_tls, present_certificate=False)
            async with AsyncTurnwireClient(coordinator.address, TOKEN, credentials=trust) as client:
                done = await client.submit_and_wait(
                    items=["over tls"], model="builtin/echo", idempotency_key="tls-1"
                )
                assert done.state.name == "SUCCEEDED", done
            async with AsyncTurnwireClient(
                coordinator.address, TOKEN, retries=0, timeout=3
            ) as plaintext:
                with pytest.raises(CheckConnectionSettings, match="speaks TLS"):
                    await plaintext.get(done.operation_id)
            await stack.stop_coordinator()
            await runner.stop()  # drained, as a runner is told to stop
        assert runner.gate.refused == 0

    asyncio.run(scenario())
