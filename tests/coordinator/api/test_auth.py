"""Authentication: the principal comes from the bearer token, never the body (§7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.auth import (
    Authenticator,
    TokensFileError,
    add_token,
    load_tokens,
    parse_tokens,
    token_digest,
)
from coordinator_svc.api.errors import ApiError
from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import ALICE, bearer, serving, submit_request, typed_error
from turnwire.coordinator.v1 import coordinator_pb2


def _every_rpc(stub: Any) -> dict[str, Any]:
    return {
        "SubmitTurn": lambda md: stub.SubmitTurn(submit_request(), metadata=md),
        "GetOperation": lambda md: stub.GetOperation(
            coordinator_pb2.GetOperationRequest(operation_id="op_x"), metadata=md
        ),
        "ListOperations": lambda md: stub.ListOperations(
            coordinator_pb2.ListOperationsRequest(), metadata=md
        ),
        "CancelOperation": lambda md: stub.CancelOperation(
            coordinator_pb2.CancelOperationRequest(operation_id="op_x"), metadata=md
        ),
        "WatchOperation": lambda md: stub.WatchOperation(
            coordinator_pb2.WatchOperationRequest(operation_id="op_x"), metadata=md
        ).read(),
        "SubmitAndWatch": lambda md: stub.SubmitAndWatch(
            coordinator_pb2.SubmitAndWatchRequest(submit=submit_request()), metadata=md
        ).read(),
    }


MISSING: list[tuple[tuple[str, str], ...] | None] = [
    None,
    (("authorization", "Basic abc"),),
    (("authorization", "Bearer "),),
]


def test_every_rpc_without_credentials_is_unauthenticated_missing(store: Store) -> None:
    """§7: no bearer token -> UNAUTHENTICATED / CREDENTIALS_MISSING; nothing stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            for name, call in _every_rpc(h.stub()).items():
                for metadata in MISSING:
                    error = await typed_error(call(metadata))
                    assert error.code == grpc.StatusCode.UNAUTHENTICATED, name
                    assert error.reason == "CREDENTIALS_MISSING", name
            assert journal.commits == 0

    store.run(scenario)


def test_every_rpc_with_an_unknown_token_is_unauthenticated_unknown(store: Store) -> None:
    """§7: a token mapping to no principal -> UNAUTHENTICATED / CREDENTIALS_UNKNOWN."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            for name, call in _every_rpc(h.stub()).items():
                error = await typed_error(call(bearer("tw_nobody")))
                assert error.code == grpc.StatusCode.UNAUTHENTICATED, name
                assert error.reason == "CREDENTIALS_UNKNOWN", name
            assert journal.commits == 0

    store.run(scenario)


def test_principal_comes_from_the_token_not_the_body(store: Store) -> None:
    """§7: the stored principal is the token's, whatever the request carries."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            request = submit_request(item_metadata={"principal": "bob"})
            metadata = (*ALICE, ("x-principal", "bob"))
            op = (await h.stub().SubmitTurn(request, metadata=metadata)).operation
            record = await journal.get(op.operation_id)
            assert record is not None and record.principal == "alice"

    store.run(scenario)


def test_tokens_file_stores_only_digests_and_maps_tokens_to_principals(tmp_path: Path) -> None:
    """Auth: `tokens add` keeps sha256(token) only; the raw token authenticates."""
    path = tmp_path / "tokens"
    alice = add_token(path, "alice")
    bob = add_token(path, "bob")
    alice2 = add_token(path, "alice")
    text = path.read_text()
    for token in (alice, bob, alice2):
        assert token not in text
        assert token_digest(token) in text
    assert path.stat().st_mode & 0o077 == 0
    auth = Authenticator.from_file(path)
    assert auth.authenticate(bearer(alice)) == "alice"
    assert auth.authenticate(bearer(alice2)) == "alice"
    assert auth.authenticate((("authorization", f"bearer {bob}"),)) == "bob"
    assert [e.principal for e in load_tokens(path)] == ["alice", "bob", "alice"]


@pytest.mark.parametrize(
    "text",
    [
        "alice\n",
        "alice abc\n",
        "al ice " + "0" * 64 + "\n",
        "alice " + "G" * 64 + "\n",
        "ali\u00e7e " + "0" * 64 + "\n",
    ],
)
def test_malformed_tokens_file_is_refused_naming_the_line(text: str) -> None:
    """Auth: a malformed line fails start-up with its line number, never half-loaded."""
    with pytest.raises(TokensFileError, match=r"tokens:2"):
        parse_tokens("# header\n" + text, "tokens")


def test_no_tokens_file_refuses_every_token() -> None:
    """Auth fails closed: with no tokens configured every token is unknown."""
    auth = Authenticator.from_file(None)
    with pytest.raises(ApiError) as caught:
        auth.authenticate(bearer("anything"))
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
