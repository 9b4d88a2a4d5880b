"""Issue 11, PROTOCOL §7: bearer tokens have scopes and an expiry, and reload without a restart.

A real coordinator (in process, SQLite journal, no runners needed: what is
checked happens before any turn would be dispatched) on 127.0.0.1 and real
channels; one real process for SIGHUP. Every refusal asserts its status and
reason and that nothing was stored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.auth import Scope, TokenEntry, TokensFileError, add_token, parse_tokens
from coordinator_svc.app import RunningCoordinator
from tests.coordinator.api.harness import submit_request
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.coordinator.v1 import coordinator_pb2_grpc
from turnwire.errors import error_info
from turnwire.testing.stack import Stack

REPO_ROOT = Path(__file__).resolve().parents[2]
DIGEST = "ab" * 32


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# --- the file format ------------------------------------------------------------------


def test_a_line_carries_scopes_and_an_expiry_and_an_old_line_keeps_its_rights() -> None:
    entries = parse_tokens(
        f"alice {DIGEST}\n"
        f"bob {DIGEST} scopes=read\n"
        f"carol {DIGEST} scopes=submit,read expires=2027-01-31T00:00:00Z\n"
        f"root {DIGEST} expires=2027-01-31T00:00:00+02:00 scopes=admin\n"
    )
    alice, bob, carol, root = entries
    assert alice.scopes == {Scope.SUBMIT, Scope.READ, Scope.CANCEL} and alice.expires_at is None
    assert bob.scopes == {Scope.READ} and not bob.allows(Scope.SUBMIT)
    assert carol.expires_at == datetime(2027, 1, 31, tzinfo=UTC)
    assert all(root.allows(scope) for scope in Scope)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (f"alice {DIGEST} scopes=read,write", "unknown scope write"),
        (f"alice {DIGEST} scopes=", "names no scope"),
        (f"alice {DIGEST} expires=2027-01-31T00:00:00", "needs an offset"),
        (f"alice {DIGEST} expires=tomorrow", "not an ISO 8601 time"),
        (f"alice {DIGEST} scopes=read scopes=submit", "once each"),
        (f"alice {DIGEST} role=admin", "unexpected field"),
        ("alice", "expected '<principal> <sha256 hex>"),
    ],
)
def test_a_malformed_line_is_refused_naming_the_line(line: str, says: str) -> None:
    with pytest.raises(TokensFileError, match="tokens file:2: ") as caught:
        parse_tokens(f"# header\n{line}\n")
    assert says in str(caught.value)


def test_tokens_add_writes_scopes_and_expiry_and_the_line_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    when = datetime(2027, 1, 31, tzinfo=UTC)
    add_token(path, "alice", scopes={Scope.READ}, expires_at=when)
    add_token(path, "bob")
    alice, bob = parse_tokens(path.read_text())
    assert (alice.scopes, alice.expires_at) == ({Scope.READ}, when)
    assert bob == TokenEntry("bob", bob.digest)
    assert path.stat().st_mode & 0o777 == 0o600


def test_tokens_add_cli_takes_scopes_and_a_lifetime(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    done = _coordinator_cli(
        "tokens", "add", "--file", str(path), "--principal", "ci",
        "--scope", "submit", "--scope", "read", "--expires-in", "12h",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("tw_") and "scopes read,submit" in done.stderr
    (entry,) = parse_tokens(path.read_text())
    assert entry.scopes == {Scope.SUBMIT, Scope.READ}
    assert entry.expires_at is not None
    left = entry.expires_at - datetime.now(UTC)
    assert timedelta(hours=11) < left <= timedelta(hours=12)
    bad = _coordinator_cli(
        "tokens", "add", "--file", str(path), "--principal", "ci", "--expires-in", "soon"
    )
    assert bad.returncode == 2 and "positive duration" in bad.stderr
    assert len(parse_tokens(path.read_text())) == 1  # nothing was added


def _coordinator_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator_svc", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")},
    )


# --- scopes and expiry on a live coordinator -------------------------------------------


@asynccontextmanager
async def _coordinator(
    tmp_path: Path, tokens: Path, reload_seconds: float = 0.1
) -> AsyncIterator[tuple[RunningCoordinator, Any]]:
    # A runner nobody answers at: turns are accepted and stay QUEUED, which is all
    # these tests need (everything they check happens before a Dispatch would).
    async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
        stack.runner_at("r1", f"127.0.0.1:{_closed_port()}")
        running = await stack.start_coordinator(
            tokens_file=str(tokens), tokens_reload_seconds=reload_seconds
        )
        async with grpc.aio.insecure_channel(running.address) as channel:
            yield running, coordinator_pb2_grpc.TurnServiceStub(channel)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _refusal(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def _stored(stub: Any, token: str) -> int:
    listed = await stub.ListOperations(C.ListOperationsRequest(), metadata=bearer(token))
    return len(listed.operations)


def test_each_call_needs_its_scope_and_a_refusal_stores_nothing(tmp_path: Path) -> None:
    """§7 scopes: a read-only token cannot submit (SCOPE_MISSING, scope=submit) or cancel;
    a submit-only token cannot SubmitAndWatch (it needs read too) nor read; nothing is
    stored by any refusal; an admin token does everything."""
    tokens = tmp_path / "tokens"
    reader = add_token(tokens, "alice", scopes={Scope.READ})
    submitter = add_token(tokens, "alice", scopes={Scope.SUBMIT})
    admin = add_token(tokens, "alice", scopes={Scope.ADMIN})

    async def scenario() -> None:
        async with _coordinator(tmp_path, tokens) as (_, stub):
            cases = [
                (stub.SubmitTurn(submit_request("k1"), metadata=bearer(reader)), "submit"),
                (
                    _drain(stub.SubmitAndWatch(
                        C.SubmitAndWatchRequest(submit=submit_request("k2")),
                        metadata=bearer(submitter),
                    )),
                    "read",
                ),
                (stub.ListOperations(C.ListOperationsRequest(), metadata=bearer(submitter)),
                 "read"),
            ]  # fmt: skip
            for call, scope in cases:
                error = await _refusal(call)
                assert error.code() is grpc.StatusCode.PERMISSION_DENIED
                typed = error_info(error)
                assert typed is not None and typed.reason == "SCOPE_MISSING"
                assert typed.metadata == {"scope": scope}
            assert await _stored(stub, reader) == 0
            made = await stub.SubmitTurn(submit_request("k3"), metadata=bearer(submitter))
            op = made.operation.operation_id
            cancel = C.CancelOperationRequest(operation_id=op)
            error = await _refusal(stub.CancelOperation(cancel, metadata=bearer(reader)))
            typed = error_info(error)
            assert typed is not None and typed.metadata == {"scope": "cancel"}
            got = await stub.GetOperation(
                C.GetOperationRequest(operation_id=op), metadata=bearer(reader)
            )
            assert not got.operation.cancel_requested
            cancelled = await stub.CancelOperation(cancel, metadata=bearer(admin))
            assert cancelled.operation.operation_id == op

    asyncio.run(scenario())


async def _drain(stream: Any) -> list[Any]:
    return [message async for message in stream]


def test_an_expired_token_is_refused_and_an_unexpired_one_works(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    now = datetime.now(UTC)
    stale = add_token(tokens, "alice", expires_at=now - timedelta(seconds=1))
    fresh = add_token(tokens, "alice", expires_at=now + timedelta(hours=1))

    async def scenario() -> None:
        async with _coordinator(tmp_path, tokens) as (_, stub):
            error = await _refusal(stub.SubmitTurn(submit_request("k"), metadata=bearer(stale)))
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
            typed = error_info(error)
            assert typed is not None and typed.reason == "CREDENTIALS_EXPIRED"
            assert await _stored(stub, fresh) == 0
            await stub.SubmitTurn(submit_request("k"), metadata=bearer(fresh))
            assert await _stored(stub, fresh) == 1

    asyncio.run(scenario())


# --- reload without a restart -----------------------------------------------------------


async def _until(predicate: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the coordinator never picked up the tokens file change")


def test_a_changed_tokens_file_is_picked_up_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A token added to the file works within the poll; a removed line stops working; a
    broken file or one others may read changes nothing (the tokens in force stay) and
    logs an ERROR naming why."""
    tokens = tmp_path / "tokens"
    alice = add_token(tokens, "alice")

    async def works(stub: Any, token: str) -> bool:
        try:
            await stub.ListOperations(C.ListOperationsRequest(), metadata=bearer(token))
        except grpc.aio.AioRpcError:
            return False
        return True

    async def scenario() -> None:
        async with _coordinator(tmp_path, tokens) as (_, stub):
            bob = add_token(tokens, "bob")
            await _until(lambda: works(stub, bob))
            assert await works(stub, alice)
            lines = tokens.read_text().splitlines()
            tokens.write_text("\n".join(line for line in lines if not line.startswith("alice")))
            tokens.chmod(0o600)
            await _until(lambda: _not(works(stub, alice)))
            assert await works(stub, bob)
            good = tokens.read_text()
            tokens.write_text(good + "carol not-a-digest\n")
            await asyncio.sleep(0.5)  # five polls
            assert await works(stub, bob)
            tokens.write_text(good)
            tokens.chmod(0o644)
            await asyncio.sleep(0.5)
            assert await works(stub, bob)

    with caplog.at_level(logging.ERROR, logger="coordinator_svc.auth"):
        asyncio.run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("tokens:2" in e and "digest" in e for e in errors), errors
    assert any("chmod 600" in e for e in errors), errors
    assert all("the tokens in force stay" in e for e in errors)


async def _not(awaitable: Any) -> bool:
    return not await awaitable


@pytest.mark.slow
def test_sighup_reloads_the_tokens_file_of_a_running_coordinator(tmp_path: Path) -> None:
    """A coordinator process that does not poll (--tokens-reload-seconds 0) reads the file
    again on SIGHUP, keeps serving, and a token added before the signal works after it."""
    tokens = tmp_path / "tokens"
    alice = add_token(tokens, "alice")
    address_file = tmp_path / "address"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")}
    with (tmp_path / "log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator_svc", "serve", "--plaintext",
             "--listen", "127.0.0.1:0", "--journal-url", f"sqlite:///{tmp_path / 'j.db'}",
             "--migrate", "--tokens-file", str(tokens), "--tokens-reload-seconds", "0",
             "--address-file", str(address_file)],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        for _ in range(300):  # bounded: 30 s
            if address_file.exists() and address_file.read_text().strip():
                break
            time.sleep(0.1)
        address = address_file.read_text().strip()
        with grpc.insecure_channel(address) as channel:
            stub = coordinator_pb2_grpc.TurnServiceStub(channel)
            list_request = C.ListOperationsRequest()
            stub.ListOperations(list_request, metadata=bearer(alice), timeout=10)
            bob = add_token(tokens, "bob")
            time.sleep(0.5)  # no polling: bob is still unknown
            with pytest.raises(grpc.RpcError) as unknown:
                stub.ListOperations(list_request, metadata=bearer(bob), timeout=10)
            assert unknown.value.code() is grpc.StatusCode.UNAUTHENTICATED
            os.kill(process.pid, signal.SIGHUP)
            for _ in range(100):  # bounded: 10 s
                try:
                    stub.ListOperations(list_request, metadata=bearer(bob), timeout=10)
                    break
                except grpc.RpcError:
                    time.sleep(0.1)
            else:
                raise AssertionError("SIGHUP did not reload the tokens file")
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert "reloaded: 2 token(s)" in (tmp_path / "log").read_text()
