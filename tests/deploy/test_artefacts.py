"""deploy/: every flag and TURNWIRE_* variable the image, compose and the units pass
exists in the services' own parsers, and each artefact has the shape docs/DEPLOYMENT.md
promises (multi-stage wheel-only image, non-root, health check; two replicas on one
PostgreSQL journal; Prometheus on every /metrics; hardened units that check first).

No container engine runs here: the files are read with Docker's own Dockerfile
parser and PyYAML; deploy/entrypoint.sh runs for real in
tests/packaging/test_deploy_compose.py. The units go through `systemd-analyze verify`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.deploy import artefacts
from tests.deploy.artefacts import Invocation
from turnwire import event_loop
from turnwire.config_check import environment_names

VARIABLES = {"POSTGRES_PASSWORD": "0123456789abcdef"}


def _parser(program: str) -> Callable[[], argparse.ArgumentParser]:
    if program == "turnwire-coordinator":
        from coordinator_svc.__main__ import build_parser

        return build_parser
    if program == "turnwire-runner":
        from runner_svc.__main__ import _parser as runner_parser

        return runner_parser
    from turnwire.cli import build_parser as cli_parser

    return cli_parser


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _option_strings(sub)
    return found


INVOCATIONS = [
    *artefacts.dockerfile_invocations(),
    *artefacts.compose_invocations(VARIABLES),
    *artefacts.systemd_invocations(),
]


def test_the_scan_finds_every_artefacts_services() -> None:
    """A broken scan would pass vacuously: it finds both services in every artefact."""
    sources = {(i.source.split(":")[0], i.program) for i in INVOCATIONS}
    for source in ("compose.yaml", "turnwire-coordinator.service"):
        assert (source, "turnwire-coordinator") in sources
    assert ("compose.yaml", "turnwire-runner") in sources
    assert ("turnwire-runner@.service", "turnwire-runner") in sources
    assert ("compose.yaml", "turnwire") in sources  # the certs job
    assert ("Dockerfile", "turnwire-coordinator") in sources


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=str)
def test_every_flag_passed_is_one_the_program_accepts(
    invocation: Invocation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's own parser, under the environment the artefact gives it, takes the
    arguments: no unknown flag, no bad value, nothing required left out; and each flag
    is spelt in full (argparse would take a prefix, a reader would not find it)."""
    for name, value in invocation.environment.items():
        monkeypatch.setenv(name, value)
    parser = _parser(invocation.program)()
    spelt = {word.split("=", 1)[0] for word in invocation.argv if word.startswith("--")}
    assert spelt <= _option_strings(parser), (
        f"{invocation}: {sorted(spelt - _option_strings(parser))}"
    )
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            parser.parse_args(list(invocation.argv))
        except SystemExit as exit_:
            assert exit_.code in (0, None), f"{invocation}\n{err.getvalue()}"


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=str)
def test_every_turnwire_variable_passed_is_one_the_program_reads(invocation: Invocation) -> None:
    """Each TURNWIRE_* variable is one the program's --help names (a misspelt one would
    leave its flag at the default without a word)."""
    known = environment_names(_parser(invocation.program)()) | {event_loop.ENV}
    passed = {name for name in invocation.environment if name.startswith("TURNWIRE_")}
    assert passed <= known, f"{invocation}: not read by it: {sorted(passed - known)}"


def test_the_image_builds_the_wheel_and_installs_only_it_as_a_non_root_user() -> None:
    """Two stages; the runtime stage copies the built distributions and the entrypoint,
    never the tree; installs the wheel with [server]; a non-root USER; a HEALTHCHECK
    through the entrypoint's gRPC health; the entrypoint script is ENTRYPOINT."""
    commands = artefacts.dockerfile_commands()
    stages = [i for i, c in enumerate(commands) if c.cmd == "FROM"]
    assert len(stages) == 2
    build, runtime = commands[stages[0] : stages[1]], commands[stages[1] :]
    assert any("python -m build" in " ".join(c.value) for c in build if c.cmd == "RUN")
    copies = [c for c in runtime if c.cmd == "COPY"]
    assert [c.value for c in copies] == [
        ("/dist/", "/tmp/dist/"),
        ("deploy/entrypoint.sh", "/usr/local/bin/turnwire-entrypoint"),
    ]
    assert "--from=build" in copies[0].flags
    installs = [" ".join(c.value) for c in runtime if c.cmd == "RUN" and "pip" in c.value[0]]
    assert len(installs) == 1 and 'pip install --no-cache-dir "$1[server]"' in installs[0]
    assert "/tmp/dist/turnwire-*.whl" in installs[0]
    (user,) = [c.value[0] for c in runtime if c.cmd == "USER"]
    assert user not in ("root", "0")
    (health,) = [c for c in runtime if c.cmd == "HEALTHCHECK"]
    assert health.value[-2:] == ("turnwire-entrypoint", "health")
    (entrypoint,) = [c for c in runtime if c.cmd == "ENTRYPOINT"]
    assert entrypoint.value == ("turnwire-entrypoint",)


def test_compose_runs_two_replicas_on_one_postgresql_journal_and_two_runners() -> None:
    """Distinct --replica-id, the same PostgreSQL URL from the migrate job; every runner
    of TURNWIRE_RUNNERS is a service, with its own store volume and certificate."""
    project = artefacts.compose(VARIABLES)
    services = project["services"]
    coordinators = [
        i
        for i in INVOCATIONS
        if i.source.startswith("compose")
        and i.program == "turnwire-coordinator"
        and i.argv[:1] == ("serve",)
    ]
    assert len(coordinators) == 2
    ids = [i.argv[i.argv.index("--replica-id") + 1] for i in coordinators]
    assert len(set(ids)) == 2
    urls = {i.environment["TURNWIRE_JOURNAL_URL"] for i in coordinators}
    migrate_url = artefacts.environment_of(services["migrate"])["TURNWIRE_JOURNAL_URL"]
    assert urls == {migrate_url} and migrate_url.startswith("postgresql://")
    runners = coordinators[0].environment["TURNWIRE_RUNNERS"].split(",")
    for spec in runners:
        name, _, address = spec.partition("=")
        assert address == f"{name}:50061" and name in services
        volumes = services[name]["volumes"]
        assert f"{name}-data:/var/lib/turnwire" in volumes
        env = artefacts.environment_of(services[name])
        assert env["TURNWIRE_RUNNER_TLS_CERT"].endswith(f"/{name}.pem")
        assert env["TURNWIRE_RUNNER_NAME"] == name
    for name in ("coordinator-1", "coordinator-2"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["certs"]["condition"] == "service_completed_successfully"


def test_prometheus_scrapes_the_metrics_of_all_four_over_https() -> None:
    """prometheus.yml's targets are exactly the services' /metrics ports, trusting the CA."""
    project = artefacts.compose(VARIABLES)
    expected = set()
    for name, service in artefacts.turnwire_services(project).items():
        env = artefacts.environment_of(service)
        listen = env.get("TURNWIRE_METRICS_LISTEN") or env.get("TURNWIRE_RUNNER_METRICS_LISTEN")
        if listen:
            expected.add(f"{name}:{listen.rpartition(':')[2]}")
    config = yaml.safe_load((artefacts.DEPLOY / "prometheus.yml").read_text())
    targets = set()
    for job in config["scrape_configs"]:
        assert job["scheme"] == "https"
        assert job["tls_config"]["ca_file"] == "/etc/prometheus/tls/ca.pem"
        targets |= {t for group in job["static_configs"] for t in group["targets"]}
    assert targets == expected and len(targets) == 4


def test_only_the_certs_job_mounts_the_ca_key() -> None:
    """Each service sees its own certificate volume; the CA's key stays in the certs job."""
    services = artefacts.compose(VARIABLES)["services"]
    mounting = [
        name
        for name, service in services.items()
        if any(str(v).startswith("ca:") for v in service.get("volumes", []))
    ]
    assert mounting == ["certs"]
    for name in ("coordinator-1", "runner-1", "runner-2"):
        tls = [v for v in services[name]["volumes"] if "/etc/turnwire/tls" in v]
        assert len(tls) == 1 and tls[0].endswith(":ro")


def test_the_units_check_first_are_hardened_and_outwait_the_drain() -> None:
    """ExecStartPre runs --check-config; a dedicated user, NoNewPrivileges,
    ProtectSystem=strict, ReadWritePaths; SIGTERM, and a stop timeout above the drain."""
    for unit in artefacts.units():
        assert unit.value("ExecStartPre").endswith(" serve --check-config")
        assert unit.value("ExecStart").endswith(" serve")
        assert unit.value("User") == "turnwire"
        assert unit.value("NoNewPrivileges") == "yes"
        assert unit.value("ProtectSystem") == "strict"
        assert unit.values("ReadWritePaths")
        assert unit.value("KillSignal") == "SIGTERM"
        env = artefacts.env_file(artefacts.UNIT_ENV_FILES[unit.path.name])
        grace = env.get("TURNWIRE_SHUTDOWN_GRACE", "5")  # the coordinator's default
        drain = float(env.get("TURNWIRE_RUNNER_DRAIN_SECONDS", grace))
        assert float(unit.value("TimeoutStopSec")) > drain


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    """`systemd-analyze verify` prints nothing for the units (with ExecStart pointed at
    this checkout's console scripts, so the commands exist and are executable)."""
    bin_dir = Path(sys.executable).parent  # the venv running the tests has the scripts
    assert (bin_dir / "turnwire-coordinator").exists() and (bin_dir / "turnwire-runner").exists()
    paths = []
    for unit in artefacts.units():
        text = re.sub("/opt/turnwire/bin/", f"{bin_dir}/", unit.path.read_text())
        (tmp_path / unit.path.name).write_text(text)
        paths.append(str(tmp_path / unit.path.name))
    done = subprocess.run(
        ["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stderr
