"""Issue 11 (R11): the local deployment (``turnwire up``, the demo, chaos) runs on TLS.

Real processes: a coordinator, a runner and (for the demo) fault proxies, each
started by the test and ended by PID. What a user would try: the CLI with the
deployment's CA gets a turn through; without it, or straight at a runner, it
does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from turnwire.cli.exit_codes import ExitCode
from turnwire.deployment import LocalDeployment
from turnwire.errors import error_info
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_sync_channel
from turnwire.transport_security import RunnerCredentials, TlsMaterial

REPO_ROOT = Path(__file__).resolve().parents[2]


def _turnwire(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnwire.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")},
            **(env or {}),
        },
    )


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[LocalDeployment]:
    running = LocalDeployment(tmp_path / "data", runner_count=1, executor="echo", tls=True)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.mark.slow
def test_a_tls_deployment_serves_the_cli_that_trusts_its_ca(deployment: LocalDeployment) -> None:
    """`turnwire submit --wait` with the deployment's CA (flag or TURNWIRE_CA_FILE) runs a
    turn to SUCCEEDED; without it the plaintext client cannot connect and is told to give
    the CA (exit CONFIGURATION, naming --ca-file)."""
    assert deployment.ca_file is not None and deployment.ca_file.exists()
    common = ("--address", deployment.address, "--token", deployment.token)
    done = _turnwire(
        "submit", *common, "--ca-file", str(deployment.ca_file), "--input", "hi", "--wait"
    )
    assert done.returncode == 0, done.stderr
    assert "SUCCEEDED" in done.stdout
    by_env = _turnwire(
        "submit", *common, "--input", "hi", "--wait",
        env={"TURNWIRE_CA_FILE": str(deployment.ca_file)},
    )  # fmt: skip
    assert by_env.returncode == 0, by_env.stderr
    plaintext = _turnwire("submit", *common, "--input", "hi", "--retries", "0")
    assert plaintext.returncode == ExitCode.CONFIGURATION, plaintext.stderr
    assert "--ca-file" in plaintext.stderr


@pytest.mark.slow
def test_a_tls_deployments_runner_serves_only_the_coordinator_certificate(
    deployment: LocalDeployment,
) -> None:
    """The runner process of a TLS deployment: the coordinator's certificate is served;
    the runner's own certificate (same CA, not a coordinator identity) is
    PERMISSION_DENIED; a plaintext caller never gets past the handshake."""
    runner = deployment.runners[0].process.address
    request = runner_pb2.GetRunnerInfoRequest()
    with runner_sync_channel(deployment.runner_credentials, runner) as channel:
        info = runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(request, timeout=10)
        assert len(info.incarnation_id) == 32
    certs = deployment.certs_dir
    own = TlsMaterial.from_files(certs / "runner-1.pem", certs / "runner-1.key", certs / "ca.pem")
    with (
        runner_sync_channel(RunnerCredentials(tls=own), runner) as channel,
        pytest.raises(grpc.RpcError) as denied,
    ):
        runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(request, timeout=10)
    assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
    typed = error_info(denied.value)
    assert typed is not None and typed.reason == "CALLER_NOT_ALLOWED"
    with grpc.insecure_channel(runner) as channel, pytest.raises(grpc.RpcError) as refused:
        runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(request, timeout=10)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow
def test_the_demo_runs_on_mutual_tls_by_default(tmp_path: Path) -> None:
    """`turnwire demo` (what scripts/demo runs): TLS to the coordinator, mutual TLS through
    the fault proxies to the runners, and the promise still holds (exit 0)."""
    data = tmp_path / "demo"
    done = _turnwire("demo", "--turns", "12", "--data-dir", str(data))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "TLS: the public API and every runner hop" in done.stdout
    assert "promise held" in done.stdout
    for name in ("runner-1", "runner-2"):
        assert "mutual TLS" in (data / "logs" / f"{name}.log").read_text()
    assert (data / "certs" / "fault-proxy.pem").exists()
    assert not (data / "runner-secret").exists()
