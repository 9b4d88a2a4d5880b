"""Meaningful values for the RPC fuzzer (tests/security/rpc_fuzz.py): what gets a request
past the first validation some of the time, and what a call presents.

:class:`Known` collects values from replies (operation ids, the runner's
incarnation, page tokens, idempotency keys); ``coordinator_hints`` and
``runner_hints`` turn them, and fully valid messages (a Dispatch whose
envelope hashes to its digest and is stamped now, a valid SubmitTurnRequest),
into the ``hints`` :func:`rpc_fuzz.message_strategy` takes. :class:`Target`
and :func:`calls_for` pair each service with its credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from tests.security.rpc_fuzz import (
    MAX_SLEEP_MS,
    Hints,
    Metadata,
    Method,
    Outcome,
    every_method,
    is_map,
    message_strategy,
    raw_bytes_strategy,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.ids import sha256_hex, stamp_now
from turnwire.runner.v1 import runner_pb2

# --- meaningful values --------------------------------------------------------------------


@dataclass
class Known:
    """Values seen in replies, for hints: operation ids, the runner's incarnation, page
    tokens, idempotency keys. Bounded: the newest LIMIT of each."""

    incarnation_id: str = ""
    operation_ids: list[str] = field(default_factory=list)
    page_tokens: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    LIMIT = 200

    def note(self, outcome: Outcome, method: Method) -> None:
        if outcome.code is not grpc.StatusCode.OK or outcome.undecodable_reply:
            return
        for reply in outcome.replies:
            self._walk(method.output.FromString(reply))
        try:
            request = GetMessageClass(method.input).FromString(outcome.request)
        except DecodeError:
            return
        key = getattr(getattr(request, "submit", request), "idempotency_key", "")
        if key:
            self._add(self.keys, key)

    def _walk(self, message: Message) -> None:
        for fd, value in message.ListFields():
            if fd.name == "operation_id" and value:
                self._add(self.operation_ids, value)
            elif fd.name == "incarnation_id" and value:
                self.incarnation_id = value
            elif fd.name == "next_page_token" and value:
                self._add(self.page_tokens, value)
            elif fd.type == FieldDescriptor.TYPE_MESSAGE and not is_map(fd):
                for item in value if fd.is_repeated else (value,):
                    self._walk(item)

    def _add(self, values: list[str], value: str) -> None:
        if value not in values:
            values.append(value)
            del values[: -self.LIMIT]

    @staticmethod
    def pick(values: Callable[[], Sequence[str]]) -> SearchStrategy[str]:
        """One of the values known when drawn (a fresh-looking id while none is)."""

        def one(index: int) -> str:
            now = values()
            return now[index % len(now)] if now else "op_" + "f" * 32

        return st.integers(0, 10**6).map(one)


def _safe_parameters() -> SearchStrategy[dict[str, str]]:
    knob = st.sampled_from(("sleep_ms", "fail", "output", "x"))
    value = st.one_of(st.integers(0, MAX_SLEEP_MS).map(str), st.sampled_from(("1", "true", "")))
    return st.dictionaries(knob, value, max_size=3)


def bound_knobs(message: Message) -> Message:
    """Cap every ModelRef's "sleep_ms" at MAX_SLEEP_MS (in place), so no fuzzed turn holds a
    slot longer than that: a random map could name the knob with a huge value."""
    for fd, value in message.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE or is_map(fd):
            continue
        for item in value if fd.is_repeated else (value,):
            bound_knobs(item)
    if isinstance(message, turn_pb2.ModelRef) and "sleep_ms" in message.parameters:
        raw = message.parameters["sleep_ms"]
        if not (raw.isascii() and raw.isdigit() and int(raw) <= MAX_SLEEP_MS):
            message.parameters["sleep_ms"] = "50"
    return message


def _valid_kind() -> SearchStrategy[int]:
    return st.sampled_from((turn_pb2.TURN_KIND_WRITABLE, turn_pb2.TURN_KIND_READ_ONLY))


def _common_hints(known: Known) -> dict[str, SearchStrategy[Any]]:
    model = st.builds(turn_pb2.ModelRef, provider=st.just("builtin"), name=st.just("echo"),
                      parameters=_safe_parameters())  # fmt: skip
    return {
        "operation_id": known.pick(lambda: known.operation_ids),
        "operation_ids": known.pick(lambda: known.operation_ids),
        "parameters": _safe_parameters(),
        "model": model,
        "kind": _valid_kind(),
        "pool": st.sampled_from(("", "default")),
        "after_sequence": st.integers(0, 5),
    }


def coordinator_hints(known: Known) -> dict[str, SearchStrategy[Any]]:
    """Hints for TurnService: known ids, keys and page tokens, valid turns and submissions."""
    hints = _common_hints(known)
    hints.update(
        idempotency_key=st.one_of(st.uuids().map(str), known.pick(lambda: known.keys)),
        page_token=known.pick(lambda: known.page_tokens),
        page_size=st.integers(0, 3),
        max_attempts=st.integers(0, 3),
    )
    turn = message_strategy(coordinator_pb2.Turn.DESCRIPTOR, 1, hints)
    item = st.builds(turn_pb2.InputItem, item_id=st.just("i1"), content=st.binary(max_size=16))
    valid_turn = st.builds(coordinator_pb2.Turn, model=hints["model"], kind=_valid_kind(),
                           input_items=st.lists(item, max_size=2))  # fmt: skip
    submit = coordinator_pb2.SubmitTurnRequest
    hints["turnwire.coordinator.v1.SubmitTurnRequest"] = st.one_of(
        st.builds(submit, idempotency_key=st.uuids().map(str), turn=valid_turn),
        st.builds(submit, idempotency_key=hints["idempotency_key"], turn=turn),
    )
    return hints


def runner_hints(known: Known) -> dict[str, SearchStrategy[Any]]:
    """Hints for RunnerService: the real incarnation, small fencing tokens and attempts,
    stamps near now, and whole Dispatches that pass every check (new or known ids)."""
    hints = _common_hints(known)
    hints.update(
        expected_incarnation_id=st.builds(lambda: known.incarnation_id),
        fencing_token=st.integers(1, 3),
        attempt=st.integers(1, 3),
        dispatch_stamp=st.sampled_from((0, -10_000_000, 3_600_000_000)).map(
            lambda delta: stamp_now() + delta
        ),
        reply_hold_ms=st.integers(0, 300),
        envelope_digest=st.builds(lambda: sha256_hex(b"")),
    )
    envelope = message_strategy(runner_pb2.TurnEnvelope.DESCRIPTOR, 1, hints)
    hints["envelope"] = envelope.map(lambda e: bound_knobs(e).SerializeToString())

    @st.composite
    def dispatch(draw: Any) -> runner_pb2.DispatchRequest:
        fresh = draw(st.uuids()).hex
        op = draw(st.one_of(st.just("op_fuzz_" + fresh), known.pick(lambda: known.operation_ids)))
        body = draw(envelope)
        body.operation_id = op
        body.kind = draw(_valid_kind())
        data = bound_knobs(body).SerializeToString(deterministic=True)
        return runner_pb2.DispatchRequest(
            operation_id=op, envelope=data, envelope_digest=sha256_hex(data),
            expected_incarnation_id=known.incarnation_id, fencing_token=draw(st.integers(1, 3)),
            attempt=draw(st.integers(1, 3)), dispatch_stamp=stamp_now(),
            reply_hold_ms=draw(st.integers(0, 300)),
        )  # fmt: skip

    hints["turnwire.runner.v1.DispatchRequest"] = dispatch()
    return hints


def normal_submit(key: str | None = None) -> coordinator_pb2.SubmitTurnRequest:
    """A plain valid submission (as tests/coordinator/api/harness.py ``submit_request``)."""
    return coordinator_pb2.SubmitTurnRequest(
        idempotency_key=key or f"normal-{time.time_ns()}",
        turn=coordinator_pb2.Turn(
            model=turn_pb2.ModelRef(provider="builtin", name="echo"),
            input_items=[turn_pb2.InputItem(item_id="i1", role="user", content=b"hello")],
            kind=turn_pb2.TURN_KIND_WRITABLE,
        ),
    )


@dataclass(frozen=True)
class Target:
    """One service under fuzz: what a call presents, and the hints for its requests."""

    service: ServiceDescriptor
    valid: Metadata
    wrong: Metadata
    hints: Hints

    def methods(self) -> list[Method]:
        return every_method(self.service)


@dataclass(frozen=True)
class FuzzCall:
    payload: bytes
    credentials: str
    metadata: Metadata


def calls_for(target: Target, method: Method, raw: bool) -> SearchStrategy[FuzzCall]:
    """Requests for ``method`` (typed: walked and bounded; raw: mutated bytes), each with
    valid credentials eight times in ten, none or wrong ones otherwise."""
    messages = message_strategy(method.input, 0, target.hints).map(bound_knobs)
    typed = messages.map(lambda m: m.SerializeToString())
    payloads = raw_bytes_strategy(method.input, messages) if raw else typed
    who = st.sampled_from(("valid",) * 8 + ("missing", "wrong"))
    metadata = {"valid": target.valid, "wrong": target.wrong, "missing": ()}
    return st.builds(lambda p, c: FuzzCall(p, c, metadata[c]), payloads, who)
