"""Issue 11, PROTOCOL §7: hostile input to the coordinator's public TurnService, end to end.

Every case runs against a live stack of its own (a real runner with the metered
executor and its ledger, a real coordinator on a SQLite journal, real gRPC on
127.0.0.1). Starting and stopping one costs about 0.1 s, so no stack is shared
and no case can leak state into another. Each case sends one kind of hostile
input and asserts (1) the gRPC status code, (2) the google.rpc.ErrorInfo reason
(and the field it names), then ``Stack.assert_unharmed``: (3) nothing was stored
that should not be (every principal's operations, the runner's rows and the
metered ledger, against a snapshot taken before the hostile call) and (4) a
normal turn still succeeds (submitted, watched to SUCCEEDED, run exactly once).

Sections: authentication, tenancy, idempotency keys, operation ids, numeric
extremes and enums, sizes, undecodable bytes and unknown fields, deadlines.
Floods and concurrency limits are not covered here. test_hostile_runner.py
uses the same stack (``run``, ``Stack``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tests.security.hostile_stack import (
    BY_ID,
    LIMIT,
    SUCCEEDED,
    Metadata,
    S,
    Stack,
    by_id,
    drain,
    expect,
    raw_call,
    refused,
    run,
    submission,
    submits,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.errors import error_info

pytestmark = pytest.mark.timeout(60)


# --- authentication -------------------------------------------------------------------


def _bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


UNAUTH, MISSING, UNKNOWN = S.UNAUTHENTICATED, "CREDENTIALS_MISSING", "CREDENTIALS_UNKNOWN"
AUTH_CASES: dict[str, tuple[Callable[[Stack], Metadata], grpc.StatusCode, str]] = {
    "no-metadata": (lambda s: (), UNAUTH, MISSING),
    "empty-bearer": (lambda s: _bearer(""), UNAUTH, MISSING),
    "forged-token": (lambda s: _bearer("tw_" + "A" * 43), UNAUTH, UNKNOWN),
    "in-x-authorization": (lambda s: (("x-authorization", s.auth()[0][1]),), UNAUTH, MISSING),
    "basic-scheme": (lambda s: (("authorization", "Basic " + s.tokens["alice"]),), UNAUTH, MISSING),
    "binary-header": (lambda s: (("authorization-bin", s.auth()[0][1].encode()),), UNAUTH, MISSING),
    "forged-then-valid": (lambda s: (*_bearer("tw_forged"), *s.auth()), UNAUTH, UNKNOWN),
    "expired": (lambda s: s.auth("alice-expired"), UNAUTH, "CREDENTIALS_EXPIRED"),
    "read-scope-only": (lambda s: s.auth("alice-reader"), S.PERMISSION_DENIED, "SCOPE_MISSING"),
}


@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_submit_without_valid_credentials_is_refused_and_consumes_nothing(
    tmp_path: Path, case: str
) -> None:
    """Typed refusal from SubmitTurn and SubmitAndWatch; no operation, no execution; the
    key the refused calls carried is still free for alice's own turn afterwards."""
    metadata, code, reason = AUTH_CASES[case]

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        scope = {"scope": "submit"} if reason == "SCOPE_MISSING" else {}
        for call in submits(stack, submission("hostile"), metadata(stack)):
            await expect(call, code, reason, scope)
        await stack.assert_unharmed(before, key="hostile")

    run(tmp_path, scenario)


# --- tenancy --------------------------------------------------------------------------


@pytest.mark.parametrize("rpc", BY_ID)
def test_another_principals_operation_is_not_found_exactly_like_a_random_id(
    tmp_path: Path, rpc: str
) -> None:
    """Bob naming alice's running operation gets what a random id gets (code, message,
    ErrorInfo alike); alice's turn runs on untouched: no cancel recorded."""

    async def scenario(stack: Stack) -> None:
        slow = submission("alice-slow", sleep_ms=700)
        op = (await stack.stub.SubmitTurn(slow, metadata=stack.auth())).operation.operation_id
        await stack.wait_executed(op)
        before = await stack.snapshot()
        bob = stack.auth("bob")
        foreign = await expect(by_id(stack, rpc, op, bob), S.NOT_FOUND, "OPERATION_NOT_FOUND")
        random, _ = await refused(by_id(stack, rpc, f"op_{uuid.uuid4().hex}", bob))
        assert (random.code(), error_info(random)) == (S.NOT_FOUND, foreign)
        assert op not in str(foreign)
        final, replayed = await stack.submit_and_wait(slow)
        assert replayed and final.state == SUCCEEDED
        assert not final.cancel_requested and not final.HasField("error")
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


def test_another_principals_page_token_is_page_token_invalid(tmp_path: Path) -> None:
    async def scenario(stack: Stack) -> None:
        for n in range(2):
            await stack.submit_and_wait(submission(f"a{n}"))
        first = C.ListOperationsRequest(page_size=1)
        page = await stack.stub.ListOperations(first, metadata=stack.auth())
        before = await stack.snapshot()
        assert page.next_page_token and before.operations["bob"] == frozenset()
        stolen = C.ListOperationsRequest(page_token=page.next_page_token)
        call = stack.stub.ListOperations(stolen, metadata=stack.auth("bob"))
        await expect(call, S.INVALID_ARGUMENT, "PAGE_TOKEN_INVALID", {"field": "page_token"})
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


def test_alices_idempotency_key_used_by_bob_is_bobs_own_new_operation(tmp_path: Path) -> None:
    """Keys are per principal: no reuse refusal and no replay of alice's turn; bob gets an
    operation of his own (stored and run by design) that alice cannot see."""

    async def scenario(stack: Stack) -> None:
        alice_op, _ = await stack.submit_and_wait(submission("shared"))
        before = await stack.snapshot()
        bob_op, replayed = await stack.submit_and_wait(submission("shared", sleep_ms=1), "bob")
        bob = bob_op.operation_id
        assert not replayed and bob != alice_op.operation_id
        get = C.GetOperationRequest(operation_id=alice_op.operation_id)
        assert (await stack.stub.GetOperation(get, metadata=stack.auth())).operation == alice_op
        call = by_id(stack, "GetOperation", bob, stack.auth())
        await expect(call, S.NOT_FOUND, "OPERATION_NOT_FOUND")
        await stack.assert_unharmed(before, stored=[("bob", bob)], executed=[bob], rows=[bob])

    run(tmp_path, scenario)


# --- idempotency keys -----------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["", "k" * 256, "nul\x00byte", "line\nbreak", "tab\there", "zero\u200bwidth"],
    ids=["empty", "256-chars", "nul", "newline", "tab", "zero-width-space"],
)
def test_a_malformed_idempotency_key_is_refused_naming_the_field(tmp_path: Path, key: str) -> None:
    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        field = {"field": "idempotency_key"}
        for call in submits(stack, submission(key), stack.auth()):
            await expect(call, S.INVALID_ARGUMENT, "IDEMPOTENCY_KEY_INVALID", field)
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


def test_a_key_reused_with_another_request_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """FAILED_PRECONDITION / IDEMPOTENCY_KEY_REUSED naming the caller's own operation, from
    SubmitTurn and SubmitAndWatch alike; the first operation is exactly as it was."""

    async def scenario(stack: Stack) -> None:
        first, _ = await stack.submit_and_wait(submission("once"))
        before = await stack.snapshot()
        named = {"operation_id": first.operation_id}
        for call in submits(stack, submission("once", max_attempts=3), stack.auth()):
            await expect(call, S.FAILED_PRECONDITION, "IDEMPOTENCY_KEY_REUSED", named)
        get = C.GetOperationRequest(operation_id=first.operation_id)
        assert (await stack.stub.GetOperation(get, metadata=stack.auth())).operation == first
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


# --- operation ids ----------------------------------------------------------------------


ID_CASES = {
    "empty": "",
    "10-kB": "x" * 10_000,
    "256-chars-of-2-bytes": "é" * 256,
    "control-chars": "op_\x00\x01\n\x7f",
    "path-and-sql": "../../%_*' OR '1'='1",
}


@pytest.mark.parametrize("case", list(ID_CASES))
def test_a_malformed_operation_id_is_refused_by_get_cancel_and_watch(
    tmp_path: Path, case: str
) -> None:
    """Out of 1..255 characters: ARGUMENT_INVALID naming the field; anything else that is
    no operation of the caller's: OPERATION_NOT_FOUND. Nothing is created."""
    operation_id = ID_CASES[case]
    out_of_bounds = not operation_id or len(operation_id) > 255

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        for rpc in BY_ID:
            call = by_id(stack, rpc, operation_id, stack.auth())
            if out_of_bounds:
                await expect(
                    call, S.INVALID_ARGUMENT, "ARGUMENT_INVALID", {"field": "operation_id"}
                )
            else:
                await expect(call, S.NOT_FOUND, "OPERATION_NOT_FOUND", {})
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


# --- numeric extremes and enums -------------------------------------------------------


@pytest.mark.parametrize(
    ("rpc", "value"),
    [("WatchOperation", 2**63), ("WatchOperation", 2**64 - 1), ("SubmitAndWatch", 2**63)],
)
def test_a_cursor_at_or_above_2_63_is_argument_invalid(
    tmp_path: Path, rpc: str, value: int
) -> None:
    """No stored form: refused naming the field, before SubmitAndWatch stores anything.
    The largest storable cursor, on a finished turn, ends the stream at once, empty."""

    async def scenario(stack: Stack) -> None:
        done, _ = await stack.submit_and_wait(submission("done"))
        before = await stack.snapshot()
        me, field = stack.auth(), {"field": "after_sequence"}
        watch = C.WatchOperationRequest(operation_id=done.operation_id, after_sequence=value)
        both = C.SubmitAndWatchRequest(submit=submission("cursor"), after_sequence=value)
        call = (
            stack.stub.WatchOperation(watch, metadata=me)
            if rpc == "WatchOperation"
            else stack.stub.SubmitAndWatch(both, metadata=me)
        )
        await expect(drain(call), S.INVALID_ARGUMENT, "ARGUMENT_INVALID", field)
        watch.after_sequence = 2**63 - 1
        assert await drain(stack.stub.WatchOperation(watch, metadata=me, timeout=10)) == []
        await stack.assert_unharmed(before, key="cursor")

    run(tmp_path, scenario)


def _limits(**fields: Any) -> dict[str, Any]:
    return {"limits": turn_pb2.Limits(**fields)}


TURN_CASES: dict[str, tuple[dict[str, Any], str]] = {
    # numeric extremes
    "budget_ms=2^63": (_limits(budget_ms=2**63), "turn.limits.budget_ms"),
    "size_bytes=2^64-1": (
        {"files": [turn_pb2.FileRef(uri="s3://a", size_bytes=2**64 - 1)]},
        "turn.files[0].size_bytes",
    ),
    "max_attempts=2^32-1": ({"max_attempts": 2**32 - 1}, "turn.max_attempts"),
    "deadline=-2^62s": (_limits(deadline=Timestamp(seconds=-(2**62))), "turn.limits.deadline"),
    "deadline-nanos=-1": (_limits(deadline=Timestamp(nanos=-1)), "turn.limits.deadline"),
    "queue_timeout=-1s": (_limits(queue_timeout=Duration(seconds=-1)), "turn.limits.queue_timeout"),
    # enums
    "kind=999": ({"kind": 999}, "turn.kind"),
    "kind=-1": ({"kind": -1}, "turn.kind"),
    "kind=UNSPECIFIED": ({"kind": turn_pb2.TURN_KIND_UNSPECIFIED}, "turn.kind"),
    "replay_policy=999": ({"replay_policy": 999}, "turn.replay_policy"),
}


@pytest.mark.parametrize("case", list(TURN_CASES))
def test_a_turn_field_out_of_range_is_turn_invalid_naming_the_field(
    tmp_path: Path, case: str
) -> None:
    """SubmitTurn and SubmitAndWatch refuse alike, before any message; the key stays free."""
    fields, field = TURN_CASES[case]

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        for call in submits(stack, submission("out-of-range", **fields), stack.auth()):
            info = await expect(call, S.INVALID_ARGUMENT, "TURN_INVALID")
            assert info.metadata["field"] == field
        await stack.assert_unharmed(before, key="out-of-range")

    run(tmp_path, scenario)


@pytest.mark.parametrize("states", [[999], [C.OPERATION_STATE_QUEUED, -5], [0]])
def test_an_unknown_state_filter_is_argument_invalid_and_a_huge_page_is_capped(
    tmp_path: Path, states: list[Any]
) -> None:
    async def scenario(stack: Stack) -> None:
        done, _ = await stack.submit_and_wait(submission("listed"))
        before = await stack.snapshot()
        listed = C.ListOperationsRequest(states=states)
        call = stack.stub.ListOperations(listed, metadata=stack.auth())
        await expect(call, S.INVALID_ARGUMENT, "ARGUMENT_INVALID", {"field": "states"})
        huge = C.ListOperationsRequest(page_size=2**32 - 1)
        page = await stack.stub.ListOperations(huge, metadata=stack.auth())
        assert [op.operation_id for op in page.operations] == [done.operation_id]
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


# --- sizes ------------------------------------------------------------------------------


def _with_content(key: str, size: int, items: int = 1) -> C.SubmitTurnRequest:
    content = [turn_pb2.InputItem(item_id=f"i{n}", content=b"x" * size) for n in range(items)]
    return submission(key, input_items=content)


@pytest.mark.parametrize(
    ("size", "items", "field"),
    [
        (LIMIT - 900, 1, "turn"),
        (LIMIT + 1024, 1, "turn"),
        (1, 1001, "turn.input_items"),
        (3 * LIMIT, 1, None),
    ],
    ids=["envelope-just-over", "request-over", "1001-input-items", "over-grpc-limit"],
)
def test_a_turn_that_could_not_reach_a_runner_is_refused_and_never_stored(
    tmp_path: Path, size: int, items: int, field: str | None
) -> None:
    """README "Message limits": an envelope over R - 1024 (or a request that cannot make
    one) is TURN_INVALID naming ``turn``; past R - 1024 + 64 KiB gRPC itself refuses the
    bytes before any handler: RESOURCE_EXHAUSTED with no ErrorInfo. The key stays free."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        call = stack.stub.SubmitTurn(_with_content("big", size, items), metadata=stack.auth())
        if field is None:
            error, info = await refused(call)
            assert (error.code(), info) == (S.RESOURCE_EXHAUSTED, None)
            assert "larger than max" in (error.details() or "")
        else:
            info = await expect(call, S.INVALID_ARGUMENT, "TURN_INVALID")
            assert info.metadata["field"] == field
        await stack.assert_unharmed(before, key="big")

    run(tmp_path, scenario)


def test_a_turn_over_a_smaller_runners_limit_ends_rejected_and_never_runs(tmp_path: Path) -> None:
    """A runner configured below the coordinator's R: the turn is accepted (stored by
    design), its Dispatch refused by the runner's gRPC before any handler, and it ends
    REJECTED / DISPATCH_REJECTED, NOT_STARTED, with no runner row and no execution."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        operation, replayed = await stack.submit_and_wait(_with_content("over", 2 * LIMIT))
        assert not replayed and operation.state == C.OPERATION_STATE_REJECTED
        assert operation.error.reason == "DISPATCH_REJECTED"
        assert operation.execution == turn_pb2.EXECUTION_NOT_STARTED
        await stack.assert_unharmed(before, stored=[("alice", operation.operation_id)])

    run(tmp_path, scenario, coordinator_limit=4 * LIMIT)


# --- undecodable bytes and unknown fields ----------------------------------------------


NOT_UTF8_ID = b"\x0a\x05op_\xc3\x28"  # field 1 (operation_id, on all three): not UTF-8


@pytest.mark.parametrize(
    ("method", "raw"),
    [
        ("SubmitTurn", b"\xff\xff\xff"),
        ("SubmitAndWatch", b"\xff\xff\xff"),
        ("SubmitTurn", b"\x0a\x04k\xc3\x28y"),  # idempotency_key
        ("ListOperations", b"\x1a\x02\xed\xa0"),  # page_token: half a surrogate
        ("GetOperation", NOT_UTF8_ID),
        ("CancelOperation", NOT_UTF8_ID),
        ("WatchOperation", NOT_UTF8_ID),
    ],
    ids=["submit", "submit-and-watch", "key", "page-token", "get-id", "cancel-id", "watch-id"],
)
def test_undecodable_request_bytes_are_request_malformed(
    tmp_path: Path, method: str, raw: bytes
) -> None:
    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        call = raw_call(stack, method, raw, stack.auth())
        info = await expect(call, S.INVALID_ARGUMENT, "REQUEST_MALFORMED")
        assert "DecodeError" not in info.message and "<class" not in info.message
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


def test_an_unknown_field_on_the_request_is_ignored_as_if_absent(tmp_path: Path) -> None:
    """Field 127 appended to a valid SubmitTurnRequest: accepted, and the clean request
    with the same key is a replay of that very operation (one operation, one run)."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        clean = submission("extra")
        raw = clean.SerializeToString() + b"\xf8\x07\x01"
        reply = await raw_call(stack, "SubmitTurn", raw, stack.auth())
        first = C.SubmitTurnResponse.FromString(reply)
        operation, replayed = await stack.submit_and_wait(clean)
        op = first.operation.operation_id
        assert not first.replayed and replayed and operation.operation_id == op
        assert operation.state == SUCCEEDED
        await stack.assert_unharmed(before, stored=[("alice", op)], executed=[op], rows=[op])

    run(tmp_path, scenario)


def test_an_unknown_field_inside_the_turn_is_part_of_the_request_digest(tmp_path: Path) -> None:
    """The request digest is of the submitted turn's serialization (PROTOCOL.md §1), and
    that keeps unknown fields: the same key with the clean turn is IDEMPOTENCY_KEY_REUSED
    and stores nothing more; the first operation runs once."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        clean = submission("inner")
        turn = clean.turn.SerializeToString() + b"\xa0\x06\x01"  # Turn field 100 = 1
        raw = C.SubmitTurnRequest(idempotency_key="inner").SerializeToString()
        raw += b"\x12" + bytes([len(turn)]) + turn
        reply = await raw_call(stack, "SubmitTurn", raw, stack.auth())
        op = C.SubmitTurnResponse.FromString(reply).operation.operation_id
        call = stack.stub.SubmitTurn(clean, metadata=stack.auth())
        await expect(call, S.FAILED_PRECONDITION, "IDEMPOTENCY_KEY_REUSED", {"operation_id": op})
        await stack.wait_executed(op)
        await stack.assert_unharmed(before, stored=[("alice", op)], executed=[op], rows=[op])

    run(tmp_path, scenario)


# --- deadlines --------------------------------------------------------------------------


def test_a_submit_whose_deadline_passes_leaves_at_most_one_operation_for_its_key(
    tmp_path: Path,
) -> None:
    """A 1 ms deadline: DEADLINE_EXCEEDED on the client, with no ErrorInfo; the turn may
    or may not have been stored. (Now and then a call still answers within 1 ms: then a
    fresh key is tried, at most 20.) The same request again yields exactly one operation
    for each key used, run once."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        for n in range(20):  # bounded: 20 calls of 1 ms
            request = submission(f"hurried-{n}")
            try:
                await stack.stub.SubmitTurn(request, metadata=stack.auth(), timeout=0.001)
            except grpc.aio.AioRpcError as error:
                assert (error.code(), error_info(error)) == (S.DEADLINE_EXCEEDED, None)
                break
        else:
            raise AssertionError("no 1 ms SubmitTurn ever missed its deadline")
        ops = [(await stack.submit_and_wait(submission(f"hurried-{k}")))[0] for k in range(n + 1)]
        assert {op.state for op in ops} == {SUCCEEDED}
        made = [op.operation_id for op in ops]
        stored = [("alice", op) for op in made]
        await stack.assert_unharmed(before, stored=stored, executed=made, rows=made)

    run(tmp_path, scenario)


async def _read_to_end(call: Any) -> None:
    for _ in range(100):  # bounded: a turn has far fewer events
        if await call.read() is grpc.aio.EOF:
            return


@pytest.mark.parametrize("rpc", ["WatchOperation", "SubmitAndWatch"])
def test_a_stream_whose_deadline_passes_ends_only_the_stream_not_the_turn(
    tmp_path: Path, rpc: str
) -> None:
    """§7: DEADLINE_EXCEEDED on the client, with no ErrorInfo, ends the stream only: the
    turn stays accepted, runs once and succeeds; the same request again is a replay."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        request, me = submission("patient", sleep_ms=1200), stack.auth()
        if rpc == "WatchOperation":
            made = await stack.stub.SubmitTurn(request, metadata=me)
            watch = C.WatchOperationRequest(operation_id=made.operation.operation_id)
            call = stack.stub.WatchOperation(watch, metadata=me, timeout=0.6)
        else:
            asked = C.SubmitAndWatchRequest(submit=request)
            call = stack.stub.SubmitAndWatch(asked, metadata=me, timeout=0.6)
        assert (await call.read()).event.sequence == 1  # accepted, then the deadline passes
        error, info = await refused(_read_to_end(call))
        assert (error.code(), info) == (S.DEADLINE_EXCEEDED, None)
        operation, replayed = await stack.submit_and_wait(request)
        assert replayed and operation.state == SUCCEEDED
        op = operation.operation_id
        await stack.assert_unharmed(before, stored=[("alice", op)], executed=[op], rows=[op])

    run(tmp_path, scenario)
