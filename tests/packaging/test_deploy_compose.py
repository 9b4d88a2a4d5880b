"""deploy/compose.yaml, run without a container engine: the same commands, from the wheel.

No container engine runs here, so this runs what compose would run, as it would
run it: each service's `command` through deploy/entrypoint.sh (the image's
ENTRYPOINT), with the service's `environment`, and its health check as the
image's HEALTHCHECK runs it, all from the server venv (the wheel with
[server], as the image installs it). What a container engine would provide is
stood in for, and only that:

- each named volume is a directory, mounted where the service mounts it (the
  paths in its flags and variables are rewritten to that directory);
- each service's host name is a loopback address of its own (127.0.0.11,
  127.0.0.21, ...: all of 127.0.0.0/8 is this machine's loopback), and
  `0.0.0.0` inside a service is that address, so every port is the one compose
  uses; `--host NAME` in the certs job names that address;
- the postgres service is the test cluster (a role and database named as
  compose's), `postgres:5432` its address;
- /tmp (a tmpfs in compose) is a directory per service.

Then: the certs job, the migrate job, two runners and two coordinator replicas
start, each after its own --check-config; each becomes healthy by the image's
HEALTHCHECK; a turn submitted to one replica is read SUCCEEDED from the other;
Prometheus' targets (prometheus.yml) answer /metrics over HTTPS trusting the
CA; SIGTERM (by PID) reaches each service itself (the entrypoint exec'd it)
and each exits 0.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import artefacts
from tests.packaging.venvs import REPO_ROOT, Venv
from turnwire.testing.postgres import PostgresCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
ENTRYPOINT = REPO_ROOT / "deploy" / "entrypoint.sh"
PASSWORD = "0123456789abcdef0123456789abcdef"
HOSTS = {
    "coordinator-1": "127.0.0.11",
    "coordinator-2": "127.0.0.12",
    "runner-1": "127.0.0.21",
    "runner-2": "127.0.0.22",
}
HEALTHY_WITHIN = 90.0


@dataclass
class Stand:
    """Where a compose project's services run on this machine."""

    root: Path
    venv: Venv
    postgres_port: int

    def volume(self, name: str) -> Path:
        path = self.root / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mounts(self, service: Mapping[str, Any]) -> dict[str, Path]:
        """Each mount target of the service -> the directory standing for its volume."""
        found = {}
        for spec in service.get("volumes", []):
            source, target = str(spec).split(":")[:2]
            if not source.startswith("."):  # a named volume (prometheus.yml is a file)
                found[target] = self.volume(source)
        return found

    def translate(self, name: str, service: Mapping[str, Any], text: str) -> str:
        for target, directory in sorted(self.mounts(service).items(), key=lambda m: -len(m[0])):
            text = re.sub(rf"(?<![\w/]){re.escape(target)}(?=/|\b|$)", str(directory), text)
        text = text.replace("postgres:5432", f"127.0.0.1:{self.postgres_port}")
        for host, address in HOSTS.items():
            text = re.sub(rf"\b{re.escape(host)}:(\d+)", rf"{address}:\1", text)
            text = re.sub(rf"--host {re.escape(host)}\b", f"--host {address}", text)
        return text.replace("0.0.0.0", HOSTS.get(name, "127.0.0.1"))

    def environment(self, name: str, service: Mapping[str, Any]) -> dict[str, str]:
        tmp = self.root / "tmp" / name
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            k: v
            for k, v in self.venv.env().items()
            if not k.startswith(("TURNWIRE_", "PG", "OTEL_"))
        }
        env["TMPDIR"] = str(tmp)
        for key, value in artefacts.environment_of(service).items():
            env[key] = self.translate(name, service, value)
        return env

    def argv(self, name: str, service: Mapping[str, Any]) -> list[str]:
        command = [self.translate(name, service, str(w)) for w in service.get("command", [])]
        entrypoint = service.get("entrypoint")
        if entrypoint:
            return [*map(str, entrypoint), *command]
        return ["sh", str(ENTRYPOINT), *command]

    def run(self, name: str, service: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(name, service), env=self.environment(name, service), cwd=self.root,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def start(self, name: str, service: Mapping[str, Any]) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        try:
            return subprocess.Popen(
                self.argv(name, service), env=self.environment(name, service), cwd=self.root,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()

    def healthy(self, name: str, service: Mapping[str, Any]) -> bool:
        """The image's HEALTHCHECK (Dockerfile: turnwire-entrypoint health) exits 0."""
        done = subprocess.run(
            ["sh", str(ENTRYPOINT), "health"], env=self.environment(name, service),
            cwd=self.root, capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        return done.returncode == 0

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    return artefacts.compose({"POSTGRES_PASSWORD": PASSWORD})


@pytest.fixture(scope="module")
def compose_database(postgres_cluster: PostgresCluster) -> Iterator[int]:
    """The postgres service: compose's role and database, on the test cluster."""
    postgres_cluster.admin(f"CREATE ROLE turnwire LOGIN PASSWORD '{PASSWORD}'")
    postgres_cluster.admin("CREATE DATABASE turnwire OWNER turnwire")
    try:
        yield postgres_cluster.port
    finally:
        postgres_cluster.drop_database("turnwire")
        postgres_cluster.admin("DROP ROLE turnwire")


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _wait_healthy(stand: Stand, project: dict[str, Any], processes: dict[str, Any]) -> None:
    deadline = time.monotonic() + HEALTHY_WITHIN
    waiting = set(processes)
    while waiting and time.monotonic() < deadline:
        for name in sorted(waiting):
            process = processes[name]
            assert process.poll() is None, f"{name} exited {process.returncode}:\n{stand.log(name)}"
            if stand.healthy(name, project["services"][name]):
                waiting.discard(name)
        time.sleep(0.5)
    assert not waiting, {name: stand.log(name) for name in waiting}


def test_the_compose_project_runs_from_the_wheel_through_the_entrypoint(
    server_venv: Venv,
    compose_database: int,
    project: dict[str, Any],
    tmp_path: Path,
) -> None:
    """certs and migrate complete; two runners and two replicas check their configuration,
    serve, turn healthy; a turn submitted to one replica is SUCCEEDED on the other;
    every Prometheus target serves /metrics; SIGTERM stops each with exit 0."""
    stand = Stand(tmp_path, server_venv, compose_database)
    services = project["services"]
    _ok(stand.run("certs", services["certs"]))
    assert "journal schema: (empty) -> " in _ok(stand.run("migrate", services["migrate"]))
    # The documented step (docs/DEPLOYMENT.md): a token in the coordinators' tokens volume.
    tokens = stand.mounts(services["coordinator-1"])["/etc/turnwire/tokens"] / "tokens"
    added = _ok(server_venv.run(
        "turnwire-coordinator", "tokens", "add", "--file", tokens, "--principal", "alice",
        cwd=tmp_path,
    ))  # fmt: skip
    token = added.strip().splitlines()[-1].split()[-1]
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("runner-1", "runner-2", "coordinator-1", "coordinator-2"):
            processes[name] = stand.start(name, services[name])
        _wait_healthy(stand, project, processes)
        ca = stand.volume("ca") / "ca.pem"
        flags = ["--token", token, "--ca-file", str(ca)]
        submitted = _ok(server_venv.run(
            "turnwire", "submit", "-i", "hello", "--model", "builtin/echo", "--wait", "--json",
            "--address", f"{HOSTS['coordinator-1']}:50051", *flags, cwd=tmp_path,
        ))  # fmt: skip
        operation_id = re.search(r'"operation_id": "([^"]+)"', submitted)
        assert operation_id and "SUCCEEDED" in submitted, submitted
        read = _ok(server_venv.run(
            "turnwire", "get", operation_id.group(1),
            "--address", f"{HOSTS['coordinator-2']}:50051", *flags, cwd=tmp_path,
        ))  # fmt: skip
        assert "SUCCEEDED" in read
        _scrape_every_target(stand, project)
        for name in ("coordinator-1", "coordinator-2", "runner-1", "runner-2"):
            processes[name].send_signal(signal.SIGTERM)
            assert processes[name].wait(60) == 0, stand.log(name)
        for name, program in (
            ("runner-1", "turnwire-runner"),
            ("coordinator-1", "turnwire-coordinator"),
        ):
            first = (stand.root / f"{name}.log").read_text().split("listening on")[0]
            assert f"{program}: configuration ok" in first  # --check-config ran first
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def _scrape_every_target(stand: Stand, project: dict[str, Any]) -> None:
    config = yaml.safe_load((artefacts.DEPLOY / "prometheus.yml").read_text())
    prometheus = project["services"]["prometheus"]
    for job in config["scrape_configs"]:
        ca_file = stand.translate("prometheus", prometheus, job["tls_config"]["ca_file"])
        context = ssl.create_default_context(cafile=ca_file)
        for group in job["static_configs"]:
            for target in group["targets"]:
                url = f"{job['scheme']}://{stand.translate('prometheus', prometheus, target)}"
                with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=10) as r:
                    body = r.read().decode()
                assert r.status == 200 and "turnwire_" in body, (target, body[:300])


def test_a_configuration_problem_stops_the_entrypoint_before_the_service_starts(
    server_venv: Venv, project: dict[str, Any], tmp_path: Path
) -> None:
    """runner-1 as compose runs it, with no certificates in its volume: --check-config
    lists the problems and the entrypoint exits 2; the service never ran (no state left
    for the health check, which then fails)."""
    stand = Stand(tmp_path, server_venv, 5432)
    service = project["services"]["runner-1"]
    done = stand.run("runner-1", service)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "PROBLEM  who may call: cannot read TLS" in done.stdout
    assert not stand.healthy("runner-1", service)
