"""The version skew docs/DEPLOYMENT.md allows, between real processes of different builds.

- **Works:** a runner built from the commit before the skew rule existed (the
  previous build: `git archive` of that commit, its own wheel) serves this
  coordinator: a turn SUCCEEDS. That is real older code on the wire, not a
  runner pretending to be old.
- **Refused, both ways:** this tree's wheel rebuilt as version 0.3.0 (two minor
  versions ahead; the code is the same, so only the version differs, which is
  exactly what the rule reads), as the runner of a 0.1 coordinator and as the
  coordinator of a 0.1 runner: the coordinator sends the runner nothing (the
  metered executor's ledger stays empty), logs why, and the turn ends
  TIMED_OUT / QUEUE_TIMEOUT / NOT_STARTED: honest, never run.

Each build is installed with `pip --no-deps --target` and run by the server
venv's interpreter with that directory first on PYTHONPATH, so its packages
and its dist-info (the version it reports) win over the venv's; everything
else (grpcio, SQLAlchemy...) is the venv's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.venvs import REPO_ROOT, PackagingError, Venv, copy_working_tree, run
from turnwire.launcher import ManagedProcess

pytestmark = pytest.mark.slow
THIS_VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
RULE_FILE = "coordinator_svc/core/compatibility.py"


def _checked(argv: list[str], cwd: Path) -> str:
    done = run(argv, cwd=cwd)
    if done.returncode != 0:
        raise PackagingError(f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def _previous_commit() -> str:
    """The commit before the skew rule was added (HEAD while it is not committed yet)."""
    added = _checked(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", RULE_FILE], REPO_ROOT
    ).split()
    return f"{added[-1]}^" if added else "HEAD"


def _install(tree: Path, target: Path, venv: Venv) -> Path:
    """Build ``tree``'s wheel and install it, without dependencies, into ``target``."""
    out = tree.parent / f"{tree.name}-dist"
    _checked([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(tree)], tree)
    (wheel,) = out.glob("turnwire-*.whl")
    _checked([str(venv.python), "-m", "pip", "install", "--quiet", "--no-deps", "--target",
              str(target), str(wheel)], tree)  # fmt: skip
    return target


@pytest.fixture(scope="module")
def previous_build(server_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous commit's own wheel, installed on its own."""
    work = tmp_path_factory.mktemp("previous")
    archive = work / "tree.tar"
    try:
        _checked(["git", "archive", "--format=tar", "-o", str(archive), _previous_commit()],
                 REPO_ROOT)  # fmt: skip
    except PackagingError as error:  # a shallow clone has no earlier commit to build
        pytest.fail(f"cannot read the previous commit from git: {error}")
    with tarfile.open(archive) as tar:
        tar.extractall(work / "tree", filter="data")
    return _install(work / "tree", work / "site", server_venv)


@pytest.fixture(scope="module")
def two_minors_ahead(server_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's wheel, built as version 0.3.0."""
    work = tmp_path_factory.mktemp("ahead")
    tree = copy_working_tree(work / "tree")
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    assert f'version = "{THIS_VERSION}"' in text
    pyproject.write_text(text.replace(f'version = "{THIS_VERSION}"', 'version = "0.3.0"', 1))
    return _install(tree, work / "site", server_venv)


@dataclass
class Pair:
    workdir: Path
    venv: Venv
    coordinator: ManagedProcess
    runner: ManagedProcess
    token: str

    def submit(self) -> dict[str, object]:
        """Submit a turn, wait for its end; the operation as `turnwire get --json` shows it."""
        flags = ["--address", self.coordinator.address, "--token", self.token,
                 "--ca-file", str(self.workdir / "tls" / "ca.pem")]  # fmt: skip
        done = self.venv.run(
            "turnwire", "submit", "-i", "hello", "--model", "builtin/echo", "--wait", "--json",
            *flags, cwd=self.workdir, timeout=90,
        )  # fmt: skip
        assert done.stdout, done.stderr
        operation_id = json.loads(done.stdout.splitlines()[0])["operation_id"]
        got = self.venv.run("turnwire", "get", operation_id, "--json", *flags, cwd=self.workdir)
        parsed: dict[str, object] = json.loads(got.stdout)
        return parsed

    def ledger(self) -> str:
        path = self.workdir / "ledger.jsonl"
        return path.read_text() if path.exists() else ""


def _process(venv: Venv, workdir: Path, name: str, site: Path | None, *argv: str) -> ManagedProcess:
    module = "coordinator_svc" if name == "coordinator" else "runner_svc"
    return ManagedProcess(
        name,
        [str(venv.python), "-m", module, *argv],
        workdir / f"{name}.log",
        workdir / f"{name}.addr",
        env={"PATH": venv.env()["PATH"], "PYTHONPATH": str(site) if site else ""},
        cwd=workdir,
    )


@pytest.fixture
def pair_of(server_venv: Venv, tmp_path: Path) -> Iterator[object]:
    """Starts a runner and a coordinator from the given builds (None: the server venv's);
    both ended by PID afterwards."""
    started: list[ManagedProcess] = []

    def start(runner_site: Path | None, coordinator_site: Path | None) -> Pair:
        venv = server_venv
        assert (
            venv.run("turnwire", "certs", "--dir", tmp_path / "tls", cwd=tmp_path).returncode == 0
        )
        journal = f"sqlite:///{tmp_path / 'journal.db'}"
        tokens = tmp_path / "tokens"
        added = venv.run("turnwire-coordinator", "tokens", "add", "--file", tokens,
                         "--principal", "alice", cwd=tmp_path)  # fmt: skip
        token = added.stdout.strip().splitlines()[-1].split()[-1]
        tls = tmp_path / "tls"
        runner = _process(
            venv, tmp_path, "runner", runner_site, "serve", "--listen", "127.0.0.1:0",
            "--store", str(tmp_path / "runner.db"), "--executor", "metered",
            "--ledger", str(tmp_path / "ledger.jsonl"), "--tls-cert", str(tls / "runner-1.pem"),
            "--tls-key", str(tls / "runner-1.key"), "--tls-ca", str(tls / "ca.pem"),
        )  # fmt: skip
        started.append(runner)
        runner_address = runner.start(timeout=60)
        coordinator = _process(
            venv, tmp_path, "coordinator", coordinator_site, "serve", "--migrate",
            "--listen", "127.0.0.1:0", "--journal-url", journal, "--tokens-file", str(tokens),
            "--runner", f"runner-1={runner_address}", "--queue-timeout", "4",
            "--tls-cert", str(tls / "coordinator.pem"), "--tls-key", str(tls / "coordinator.key"),
            "--tls-ca", str(tls / "ca.pem"),
        )  # fmt: skip
        started.append(coordinator)
        coordinator.start(timeout=60)
        return Pair(tmp_path, venv, coordinator, runner, token)

    yield start
    for process in reversed(started):
        process.terminate()


def test_a_runner_of_the_previous_build_serves_this_coordinator(
    pair_of: object, previous_build: Path
) -> None:
    """Real older runner code, this coordinator: the turn SUCCEEDS, run once."""
    pair = pair_of(previous_build, None)  # type: ignore[operator]
    final = pair.submit()
    assert final["state"] == "SUCCEEDED", final
    assert len(pair.ledger().splitlines()) == 1


@pytest.mark.parametrize("newer", ["runner", "coordinator"])
def test_two_minor_versions_apart_the_coordinator_sends_the_runner_nothing(
    pair_of: object, two_minors_ahead: Path, newer: str
) -> None:
    """A 0.3.0 runner under a 0.1 coordinator, or the reverse: nothing is sent (the
    ledger stays empty), the coordinator's log says why, and the turn ends TIMED_OUT
    QUEUE_TIMEOUT NOT_STARTED."""
    if newer == "runner":
        pair = pair_of(two_minors_ahead, None)  # type: ignore[operator]
        versions = f"runs Turnwire 0.3.0 and this coordinator {THIS_VERSION}"
    else:
        pair = pair_of(None, two_minors_ahead)  # type: ignore[operator]
        versions = f"runs Turnwire {THIS_VERSION} and this coordinator 0.3.0"
    final = pair.submit()
    assert final["state"] == "TIMED_OUT", final
    assert final["execution"] == "NOT_STARTED", final
    assert "QUEUE_TIMEOUT" in json.dumps(final)
    assert pair.ledger() == ""
    assert versions in pair.coordinator.log_tail(200)


def test_installed_builds_report_their_own_version(
    server_venv: Venv, two_minors_ahead: Path, tmp_path: Path
) -> None:
    """What GetRunnerInfo carries is the installed distribution's version."""
    probe = "from runner_svc.service import VERSION; print(VERSION)"
    for site, expected in ((None, THIS_VERSION), (two_minors_ahead, "0.3.0")):
        env = {**server_venv.env(), "PYTHONPATH": str(site) if site else ""}
        done = subprocess.run([str(server_venv.python), "-c", probe], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.stdout.strip() == expected, done.stderr
