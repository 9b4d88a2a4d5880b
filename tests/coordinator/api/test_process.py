"""`python -m coordinator_svc` as a real process: serve, signals, exit codes, CLI."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator_svc.api.auth import Authenticator, load_tokens
from coordinator_svc.storage import head_revision
from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 30.0
EXIT_TIMEOUT = 20.0


def _command(*args: str) -> list[str]:
    """``python -m coordinator_svc ARGS``; a ``serve`` runs plaintext on loopback with the
    tests' runner secret (issue 11: one of TLS or --plaintext is required)."""
    if args[:1] == ("serve",) and "--help" not in args:
        args = ("serve", *runner_access.coordinator_flags(), *args[1:])
    return [sys.executable, "-m", "coordinator_svc", *args]


def _env() -> dict[str, str]:
    """The parent's environment minus TURNWIRE_* settings, so only flags configure the child."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run to completion in ``cwd`` (a tmp dir: default paths like ./data land there)."""
    return subprocess.run(
        _command(*args), capture_output=True, text=True, timeout=60, env=_env(), cwd=cwd
    )


def _read_address(proc: subprocess.Popen[str]) -> str:
    """The address from the 'listening on HOST:PORT' line (bounded wait)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("listening on "):
                return line.removeprefix("listening on ").strip()
            if not line and proc.poll() is not None:
                break
    raise AssertionError(f"no address announced; exit code {proc.poll()}")


def _end(proc: subprocess.Popen[str]) -> None:
    """Make sure the child is gone (by its PID), whatever the test did."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=EXIT_TIMEOUT)


def test_serve_announces_address_is_healthy_and_exits_zero_on_sigterm(tmp_path: Path) -> None:
    """serve --listen :0 --migrate: prints its address, SERVING; SIGTERM ends watches, exit 0."""
    tokens = tmp_path / "tokens"
    added = _run("tokens", "add", "--file", str(tokens), "--principal", "alice", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    journal = f"sqlite:///{tmp_path / 'data' / 'journal.db'}"
    proc = subprocess.Popen(
        _command(
            "serve", "--listen", "127.0.0.1:0", "--journal-url", journal, "--migrate",
            "--tokens-file", str(tokens), "--runner", "r1=127.0.0.1:9;pool=default",
            "--address-file", str(tmp_path / "address"),
        ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    try:
        address = _read_address(proc)
        address_file = tmp_path / "address"
        for _ in range(50):  # announce() prints first, then writes the file
            if address_file.exists():
                break
            time.sleep(0.1)
        assert address_file.read_text().strip() == address
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            stub = coordinator_pb2_grpc.TurnServiceStub(channel)
            submitted = stub.SubmitTurn(submit_request(), metadata=bearer(token), timeout=10)
            watch = stub.WatchOperation(
                coordinator_pb2.WatchOperationRequest(
                    operation_id=submitted.operation.operation_id
                ),
                metadata=bearer(token),
                timeout=EXIT_TIMEOUT,
            )
            assert next(watch).event.sequence == 1
            os.kill(proc.pid, signal.SIGTERM)
            with pytest.raises(grpc.RpcError) as ended:
                next(watch)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.wait(timeout=EXIT_TIMEOUT) == 0
    finally:
        _end(proc)


def test_serve_on_a_used_port_exits_nonzero_with_a_clear_message(tmp_path: Path) -> None:
    """A taken port: exit 1 and one 'cannot listen' line; never shares the port."""
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _run(
            "serve", "--listen", f"127.0.0.1:{port}", "--journal-url", journal, "--migrate",
            cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert result.stdout == ""


def test_serve_refuses_an_unmigrated_journal(tmp_path: Path) -> None:
    """No schema: exit 1 telling the operator to run migrate; nothing served."""
    result = _run(
        "serve", "--listen", "127.0.0.1:0", "--journal-url", f"sqlite:///{tmp_path}/j.db",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "coordinator_svc migrate" in result.stderr
    assert "listening on" not in result.stdout


def test_bad_flags_exit_two_with_one_line(tmp_path: Path) -> None:
    """Bad flags or config: exit 2 and a single error line on stderr."""
    bad_tokens = tmp_path / "bad-tokens"
    bad_tokens.write_text("alice not-a-digest\n")
    bad_tokens.chmod(0o600)  # malformed, not merely open to others
    journal = f"sqlite:///{tmp_path / 'j.db'}"
    cases = [
        ("serve", "--listen", "127.0.0.1:0", "--journal-url", journal, "--migrate",
         "--tokens-file", str(bad_tokens)),
        ("serve", "--journal-url", "not a url"),
        ("serve", "--listen", "nowhere"),
        ("serve", "--runner", "not-a-spec"),
        ("serve", "--reconcile-deadline", "-1"),
        ("serve", "--runner", "a=127.0.0.1:1", "--runner", "a=127.0.0.1:2"),
        ("serve", "--no-such-flag"),
        ("tokens", "add", "--file", str(tmp_path / "t"), "--principal", "has space"),
        ("tokens", "add", "--principal", "alice"),
        (),
    ]  # fmt: skip
    for args in cases:
        result = _run(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert "error" in result.stderr


def test_every_subcommand_answers_help(tmp_path: Path) -> None:
    """--help works for the program and each subcommand (exit 0, usage shown)."""
    for args in [(), ("serve",), ("migrate",), ("tokens",), ("tokens", "add")]:
        result = _run(*args, "--help", cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.startswith("usage:")
    serve_help = _run("serve", "--help", cwd=tmp_path).stdout
    for flag in ("--listen", "--journal-url", "--runner", "--tokens-file", "--migrate",
                 "--reconcile-deadline", "--log-level", "TURNWIRE_RUNNERS"):  # fmt: skip
        assert flag in serve_help


def test_migrate_prints_from_and_to_revisions(tmp_path: Path) -> None:
    """migrate: '(empty) -> head' on a new journal, 'head -> head' when repeated."""
    url = f"sqlite:///{tmp_path / 'new' / 'journal.db'}"
    first = _run("migrate", "--journal-url", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    head = head_revision()
    assert f"(empty) -> {head}" in first.stdout
    second = _run("migrate", "--journal-url", url, cwd=tmp_path)
    assert f"{head} -> {head}" in second.stdout


def test_tokens_add_prints_a_fresh_token_once_and_stores_its_digest(tmp_path: Path) -> None:
    """tokens add: the raw token goes to stdout only; the file holds its sha256."""
    path = tmp_path / "tokens"
    first = _run("tokens", "add", "--file", str(path), "--principal", "alice", cwd=tmp_path)
    second = _run("tokens", "add", "--file", str(path), "--principal", "alice", cwd=tmp_path)
    tokens = [first.stdout.strip(), second.stdout.strip()]
    assert tokens[0] != tokens[1]
    text = path.read_text()
    assert all(token not in text for token in tokens)
    auth = Authenticator(load_tokens(path))
    assert [auth.authenticate(bearer(t)) for t in tokens] == ["alice", "alice"]


def test_runners_and_listen_come_from_environment_variables(tmp_path: Path) -> None:
    """Env config: TURNWIRE_RUNNERS (comma-separated) and TURNWIRE_JOURNAL_URL are read."""
    env = {
        **_env(),
        "TURNWIRE_RUNNERS": "a=127.0.0.1:1,b=127.0.0.1:2;kinds=read_only",
        "TURNWIRE_JOURNAL_URL": f"sqlite:///{tmp_path / 'j.db'}",
        "TURNWIRE_COORDINATOR_LISTEN": "127.0.0.1:0",
        "TURNWIRE_MIGRATE": "1",
    }
    proc = subprocess.Popen(
        _command("serve", "--log-level", "info"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        _read_address(proc)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=EXIT_TIMEOUT) == 0
        assert proc.stderr is not None
        assert "2 runner(s)" in proc.stderr.read()
        assert (tmp_path / "j.db").exists()
    finally:
        _end(proc)


@pytest.mark.rule("C2a", "C1a")
@pytest.mark.parametrize(
    ("flag", "env", "field"),
    [
        # C2a: a status read before every first attempt too (the scenario cells
        # that fault the first preflight run the coordinator that way).
        (
            "--preflight-first-attempts",
            "TURNWIRE_PREFLIGHT_FIRST_ATTEMPTS",
            "preflight_first_attempts",
        ),
        # C1a: every turn stored QUEUED alone before its first attempt.
        (
            "--queue-before-first-attempt",
            "TURNWIRE_QUEUE_BEFORE_FIRST_ATTEMPT",
            "queue_before_first_attempt",
        ),
    ],
)
def test_a_protocol_shortcut_is_on_by_default_and_a_flag_or_variable_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, flag: str, env: str, field: str
) -> None:
    """C2a and C1a are on by default; each one's flag, or its environment variable
    set to 1, turns it off."""
    from coordinator_svc.__main__ import build_parser, config_from_args

    def parsed(*flags: str) -> bool:
        args = build_parser().parse_args(["serve", "--plaintext", *flags])
        value: bool = getattr(config_from_args(args), field)
        return value

    monkeypatch.delenv(env, raising=False)
    assert parsed() is False
    assert parsed(flag) is True
    monkeypatch.setenv(env, "1")
    assert parsed() is True
