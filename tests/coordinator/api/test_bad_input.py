"""Bad input gets a typed answer from TurnService (issue 8, items 3 and 6).

Real TurnService on 127.0.0.1:0, real channels, real journals. Covers: uint64
fields >= 2^63, undecodable bytes and invalid UTF-8, forged or foreign page
tokens, and a tokens file others may write or read.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.__main__ import main as coordinator_main
from coordinator_svc.api.auth import Authenticator, TokensFileError, add_token, load_tokens
from coordinator_svc.api.servicer import SERVICE_NAME
from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import ALICE, rpc_error, serving, submit_request, typed_error
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import error_info

pytestmark = pytest.mark.timeout(60)

_S = coordinator_pb2
_QUEUED = _S.OPERATION_STATE_QUEUED
_CANCELLED = _S.OPERATION_STATE_CANCELLED
_METHODS = _S.DESCRIPTOR.services_by_name["TurnService"].methods_by_name
TOO_BIG = (2**63, 2**64 - 1)


# --- uint64 >= 2^63 -------------------------------------------------------------------


@pytest.mark.parametrize("value", TOO_BIG)
def test_watch_after_sequence_at_or_above_2_63_is_argument_invalid(
    store: Store, value: int
) -> None:
    """Issue 8.3: WatchOperation after_sequence >= 2^63 is INVALID_ARGUMENT /
    ARGUMENT_INVALID naming the field (was INTERNAL on SQLite, a hang on the fake)."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            call = stub.WatchOperation(
                _S.WatchOperationRequest(operation_id=op_id, after_sequence=value), metadata=ALICE
            )
            error = await typed_error(asyncio.wait_for(call.read(), 10))
            assert (error.code, error.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "ARGUMENT_INVALID",
            )
            assert error.metadata["field"] == "after_sequence"
            last = _S.WatchOperationRequest(operation_id=op_id, after_sequence=2**63 - 1)
            ok = stub.WatchOperation(last, metadata=ALICE)
            read = asyncio.ensure_future(ok.read())
            await asyncio.sleep(0.3)  # nothing after 2^63-1: the stream waits, no error
            assert not read.done()
            ok.cancel()
            read.cancel()

    store.run(scenario)


@pytest.mark.parametrize(
    ("field", "turn_fields"),
    [
        ("turn.limits.budget_ms", {"limits": turn_pb2.Limits(budget_ms=2**63)}),
        (
            "turn.files[1].size_bytes",
            {
                "files": [
                    turn_pb2.FileRef(uri="s3://a", size_bytes=2**63 - 1),
                    turn_pb2.FileRef(uri="s3://b", size_bytes=2**64 - 1),
                ]
            },
        ),
    ],
)
def test_submit_with_uint64_at_or_above_2_63_is_turn_invalid(
    sqlite_store: Store, field: str, turn_fields: dict[str, Any]
) -> None:
    """Issue 8.3: a uint64 in the turn >= 2^63 is TURN_INVALID naming the field; nothing
    is accepted (it used to be accepted into the journal)."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            error = await typed_error(
                stub.SubmitTurn(submit_request(**turn_fields), metadata=ALICE)
            )
            assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TURN_INVALID")
            assert error.metadata["field"] == field
            listed = await stub.ListOperations(_S.ListOperationsRequest(), metadata=ALICE)
            assert list(listed.operations) == []

    sqlite_store.run(scenario)


# --- undecodable requests ---------------------------------------------------------------


def _undecodable_cases() -> list[tuple[str, str, bytes]]:
    cases = []
    for name in sorted(_METHODS):
        cases.append((name, "corrupt", b"\xff\xff\xff\xff"))
        strings = [f for f in _METHODS[name].input_type.fields if f.type == f.TYPE_STRING]
        if strings:
            bad = b"k\xc3\x28"
            tag = bytes([(strings[0].number << 3) | 2])
            cases.append((name, "bad-utf8", tag + bytes([len(bad)]) + bad))
    return cases


@pytest.mark.parametrize(("method", "label", "raw"), _undecodable_cases())
def test_undecodable_request_is_request_malformed(
    sqlite_store: Store, method: str, label: str, raw: bytes
) -> None:
    """Issue 8.6: bytes that do not decode, or invalid UTF-8 in a string field, are
    INVALID_ARGUMENT / REQUEST_MALFORMED, never UNKNOWN with a Python class name."""
    path = f"/{SERVICE_NAME}/{method}"

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            h.stub()  # opens a channel the harness closes
            channel = h.channels[-1]
            for metadata in (ALICE, ()):  # decoding comes before authentication
                if _METHODS[method].server_streaming:
                    pending: Any = channel.unary_stream(path)(raw, metadata=metadata).read()
                else:
                    pending = channel.unary_unary(path)(raw, metadata=metadata)
                error = await rpc_error(pending)
                details = error.details() or ""
                assert "<class" not in details and "DecodeError" not in details, details
                typed = error_info(error)
                assert typed is not None, (error.code(), details)
                assert typed.code == grpc.StatusCode.INVALID_ARGUMENT
                assert typed.reason == "REQUEST_MALFORMED"

    sqlite_store.run(scenario)


# --- page tokens --------------------------------------------------------------------------


def _forge(token: str, principal: str, iso: str) -> str:
    """Re-sign ``token`` with another time, as anyone who reads paging.py can (keyless)."""
    text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    payload, _, _ = text.rpartition("|")
    version, _, operation_id = payload.split("|")
    payload = f"{version}|{iso}|{operation_id}"
    bound = principal + "\0" + payload if version == "v1" else f"{principal}\0\0{payload}"
    check = hashlib.sha256(bound.encode()).hexdigest()[:16]
    return base64.urlsafe_b64encode(f"{payload}|{check}".encode()).decode().rstrip("=")


def test_forged_page_token_with_naive_or_out_of_range_time_is_page_token_invalid(
    store: Store,
) -> None:
    """Issue 8.6: a well-signed token whose time is naive (or overflows UTC) is
    PAGE_TOKEN_INVALID, not INTERNAL with a logged traceback."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            for n in range(2):
                await stub.SubmitTurn(submit_request(f"k{n}"), metadata=ALICE)
            first = await stub.ListOperations(_S.ListOperationsRequest(page_size=1), metadata=ALICE)
            good = first.next_page_token
            assert good
            # The forger's format is right: re-signing the true time still works.
            text = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)).decode()
            true_time = text.split("|")[1]
            same = _forge(good, "alice", true_time)
            again = await stub.ListOperations(
                _S.ListOperationsRequest(page_size=1, page_token=same), metadata=ALICE
            )
            assert len(again.operations) == 1
            for iso in ("2026-01-01T00:00:00.000000", "0001-01-01T00:00:00+01:00"):
                forged = _forge(good, "alice", iso)
                error = await typed_error(
                    stub.ListOperations(_S.ListOperationsRequest(page_token=forged), metadata=ALICE)
                )
                assert (error.code, error.reason) == (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "PAGE_TOKEN_INVALID",
                ), iso

    store.run(scenario)


def test_page_token_is_bound_to_its_filter(sqlite_store: Store) -> None:
    """Issue 8.6: a token minted for one state filter is PAGE_TOKEN_INVALID with another;
    the same filter (any order, duplicates) pages on."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            for n in range(3):
                await stub.SubmitTurn(submit_request(f"k{n}"), metadata=ALICE)
            queued = await stub.ListOperations(
                _S.ListOperationsRequest(states=[_QUEUED], page_size=1), metadata=ALICE
            )
            token = queued.next_page_token
            assert token
            for states in ([], [_CANCELLED], [_QUEUED, _CANCELLED]):
                error = await typed_error(
                    stub.ListOperations(
                        _S.ListOperationsRequest(states=states, page_token=token), metadata=ALICE
                    )
                )
                assert error.reason == "PAGE_TOKEN_INVALID", states
            unfiltered = await stub.ListOperations(
                _S.ListOperationsRequest(page_size=1), metadata=ALICE
            )
            error = await typed_error(
                stub.ListOperations(
                    _S.ListOperationsRequest(
                        states=[_QUEUED], page_token=unfiltered.next_page_token
                    ),
                    metadata=ALICE,
                )
            )
            assert error.reason == "PAGE_TOKEN_INVALID"
            same = await stub.ListOperations(
                _S.ListOperationsRequest(states=[_QUEUED, _QUEUED], page_size=5, page_token=token),
                metadata=ALICE,
            )
            assert len(same.operations) == 2

    sqlite_store.run(scenario)


# --- the tokens file's mode ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        (0o620, "writable by group"),
        (0o602, "writable by others"),
        (0o666, "writable by group and others, readable by others"),
        (0o604, "readable by others"),
        (0o644, "readable by others"),
    ],
)
def test_tokens_file_others_may_write_or_read_is_refused(
    tmp_path: Path, mode: int, problem: str
) -> None:
    """Issue 8.6: a tokens file group/others may write, or others may read, is refused,
    naming the file and the fix."""
    path = tmp_path / "tokens"
    add_token(path, "alice")
    path.chmod(mode)
    with pytest.raises(TokensFileError) as caught:
        Authenticator.from_file(path)
    message = str(caught.value)
    assert str(path) in message and problem in message and f"{mode:03o}" in message
    assert f"chmod 600 {path}" in message


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400, 0o440])
def test_tokens_file_owner_only_or_group_readable_is_accepted(tmp_path: Path, mode: int) -> None:
    """Owner-only is the default (what `tokens add` writes); group-readable is accepted."""
    path = tmp_path / "tokens"
    add_token(path, "alice")
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(mode)
    assert [e.principal for e in load_tokens(path)] == ["alice"]


def test_serve_refuses_an_open_tokens_file_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` exits 2 with one line naming the tokens file and the chmod fix; nothing
    was created (the journal directory included)."""
    path = tmp_path / "tokens"
    add_token(path, "alice")
    path.chmod(0o664)
    journal_dir = tmp_path / "data"
    code = coordinator_main(
        [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--journal-url",
            f"sqlite:///{journal_dir / 'journal.db'}",
            "--tokens-file",
            str(path),
            "--plaintext",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert str(path) in err and "chmod 600" in err
    assert not journal_dir.exists()
