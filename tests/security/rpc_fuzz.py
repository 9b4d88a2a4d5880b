"""A property-based fuzzer over every RPC of both services, driven by the protobuf descriptors.

Nothing here knows a message by hand. :func:`message_strategy` walks any
Descriptor (scalars at their extremes, open enums with unknown numbers,
repeated fields, maps, nested messages to depth 3, oneofs, Timestamp and
Duration valid and absurd); :func:`raw_bytes_strategy` makes bytes that do not
decode, or decode only just. ``hints`` (field name, or a message's full name,
to a strategy) add *meaningful* values some of the time so requests get past
the first validation: an operation id that exists, the runner's real
incarnation, a Dispatch whose envelope hashes to its digest and is stamped now.
:class:`Known` collects those values from the replies as the run goes.

:func:`classify` is the oracle (PROTOCOL.md §7 "Bad input", R11): a reply is a
crash when it is INTERNAL, a non-OK status without a Turnwire ErrorInfo (except
the fuzzer's own deadline or cancel, and UNAVAILABLE while shutting down), a
reply that does not decode, an answer to a caller without valid credentials,
or a dead process. Calls are made with synchronous gRPC on raw bytes, so the
CI test (tests/security/test_fuzz_budget.py) and the long run (fuzz_long_run.py)
share every line of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import TypedError, error_info
from turnwire.runner.v1 import runner_pb2

Hints = Mapping[str, SearchStrategy[Any]]
Metadata = tuple[tuple[str, str], ...]
MAX_DEPTH = 3
MAX_REPEATED = 5
MAX_SLEEP_MS = 200  # a fuzzed turn may run, but never long enough to look like a leaked slot
F = FieldDescriptor

# --- scalars ------------------------------------------------------------------------------

_I32, _I64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)
_U32, _U64 = (0, 2**32 - 1), (0, 2**64 - 1)
_INT_EXTREMES: tuple[int, ...] = (0, -1, 1, 2**31 - 1, -(2**31), 2**31, 2**32 - 1, 2**63 - 1)
_INT_EXTREMES += (-(2**63), 2**63, 2**64 - 1)
_RANGES = {
    F.TYPE_INT32: _I32, F.TYPE_SINT32: _I32, F.TYPE_SFIXED32: _I32,
    F.TYPE_INT64: _I64, F.TYPE_SINT64: _I64, F.TYPE_SFIXED64: _I64,
    F.TYPE_UINT32: _U32, F.TYPE_FIXED32: _U32, F.TYPE_UINT64: _U64, F.TYPE_FIXED64: _U64,
}  # fmt: skip
_STRING_EXTREMES = (
    "", " ", "a" * 255, "a" * 256, "\x00", "\x00\x01\x1f\x7f\n\r\t", "é漢字🙂", "\u202e\u200b",
    "\ufeff", "op_" + "0" * 32, "default", "%s%n{0}", "../../etc/passwd", "'; DROP TABLE x; --",
    "\U0010ffff",
)  # fmt: skip
_BYTES_EXTREMES = (b"", b"\x00", b"\xff\xfe\xfd", b"\x00" * 5000, b"\x08\x96\x01", b"\x80" * 11)


def _ints(lo: int, hi: int) -> SearchStrategy[int]:
    extremes = [v for v in _INT_EXTREMES if lo <= v <= hi]
    return st.one_of(st.sampled_from(extremes), st.integers(lo, hi))


def _long(piece: SearchStrategy[Any]) -> SearchStrategy[Any]:
    """Up to ~5 kB by repetition: cheap to draw, unlike a 5,000-character draw."""
    return st.tuples(piece, st.integers(50, 625)).map(lambda t: (t[0] * t[1])[:5000])


STRINGS: SearchStrategy[str] = st.one_of(
    st.text(max_size=40), st.sampled_from(_STRING_EXTREMES), _long(st.text(min_size=1, max_size=8))
)  # fmt: skip
BYTES: SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=64), st.sampled_from(_BYTES_EXTREMES),
    _long(st.binary(min_size=1, max_size=8)),
)  # fmt: skip
_FLOAT_EXTREMES = (0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4e38)


def _scalar(fd: FieldDescriptor) -> SearchStrategy[Any]:
    if fd.type in _RANGES:
        return _ints(*_RANGES[fd.type])
    if fd.type == F.TYPE_BOOL:
        return st.booleans()
    if fd.type in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        floats = st.floats(width=32) if fd.type == F.TYPE_FLOAT else st.floats()
        return st.one_of(st.sampled_from(_FLOAT_EXTREMES), floats)
    if fd.type == F.TYPE_STRING:
        return STRINGS
    if fd.type == F.TYPE_BYTES:
        return BYTES
    if fd.type == F.TYPE_ENUM and fd.enum_type is not None:
        named = st.sampled_from([v.number for v in fd.enum_type.values])
        # An open (proto3) enum carries any int32 on the wire; a closed one only its names.
        return named if fd.enum_type.is_closed else st.one_of(named, _ints(*_I32))
    raise TypeError(f"no strategy for field type {fd.type} ({fd.full_name})")


# --- messages -----------------------------------------------------------------------------

_TIME_SECONDS = (0, 1, -1, -62135596800, 253402300799, 253402300800, 2**63 - 1, -(2**63))
_NANOS = (0, 999_999_999, 1_000_000_000, -1, -999_999_999, 2**31 - 1, -(2**31))


def _well_known(descriptor: Descriptor) -> SearchStrategy[Message] | None:
    """Timestamp and Duration: valid values, and seconds/nanos at their extremes."""
    cls = GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Timestamp":
        valid = st.tuples(st.integers(0, 4_102_444_800), st.integers(0, 999_999_999))
    elif descriptor.full_name == "google.protobuf.Duration":
        valid = st.tuples(st.integers(0, 10**9), st.just(0))
    else:
        return None
    now = st.builds(lambda: (int(time.time()) + 3600, 0))
    absurd = st.tuples(st.sampled_from(_TIME_SECONDS), st.sampled_from(_NANOS))
    return st.one_of(valid, now, absurd).map(lambda sn: cls(seconds=sn[0], nanos=sn[1]))


def is_map(fd: FieldDescriptor) -> bool:
    mt = fd.message_type
    return mt is not None and mt.GetOptions().map_entry


def _message_type(fd: FieldDescriptor) -> Descriptor:
    if fd.message_type is None:
        raise TypeError(f"{fd.full_name} is not a message field")
    return fd.message_type


def _value(fd: FieldDescriptor, depth: int, hints: Hints) -> SearchStrategy[Any] | None:
    """One value (one element of a repeated field); None: the field is left out here."""
    if fd.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        if depth >= MAX_DEPTH:
            return None
        walked = message_strategy(_message_type(fd), depth + 1, hints)
    else:
        walked = _scalar(fd)
    return st.one_of(walked, hints[fd.name]) if fd.name in hints else walked


def _field(fd: FieldDescriptor, depth: int, hints: Hints) -> SearchStrategy[Any] | None:
    if is_map(fd):
        key_fd, value_fd = (_message_type(fd).fields_by_name[n] for n in ("key", "value"))
        value = _value(value_fd, depth, _NO_HINTS)
        if value is None:
            return None
        walked = st.dictionaries(_scalar(key_fd), value, max_size=MAX_REPEATED)
        return st.one_of(walked, hints[fd.name]) if fd.name in hints else walked
    element = _value(fd, depth, hints)
    if element is None or not fd.is_repeated:
        return element
    return st.lists(element, max_size=MAX_REPEATED)


_CACHE: dict[tuple[str, int, int], tuple[Hints, SearchStrategy[Message]]] = {}
_NO_HINTS: Hints = {}


def message_strategy(
    descriptor: Descriptor, depth: int = 0, hints: Hints | None = None
) -> SearchStrategy[Message]:
    """Messages of ``descriptor``: every field present or not, each value from its type's
    strategy or, when ``hints`` names the field, sometimes from the hint (an element's
    value for a repeated field, the whole dict for a map). A hint keyed by the message's
    full name gives whole messages, also some of the time. Nested to depth MAX_DEPTH."""
    hints = _NO_HINTS if hints is None else hints
    key = (descriptor.full_name, depth, id(hints))
    if key in _CACHE:
        return _CACHE[key][1]
    known = _well_known(descriptor)
    strategy = known if known is not None else _walk(descriptor, depth, hints)
    if descriptor.full_name in hints:  # two in three: a whole message is worth more
        strategy = st.one_of(strategy, hints[descriptor.full_name], hints[descriptor.full_name])
    _CACHE[key] = (hints, strategy)  # keeps ``hints`` alive: its id stays its own
    return strategy


def _named(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {name: value}


def _walk(descriptor: Descriptor, depth: int, hints: Hints) -> SearchStrategy[Message]:
    cls = GetMessageClass(descriptor)
    in_oneof = {fd.name for oneof in descriptor.oneofs for fd in oneof.fields}
    optional: dict[str, SearchStrategy[Any]] = {}
    for fd in descriptor.fields:
        strategy = _field(fd, depth, hints) if fd.name not in in_oneof else None
        if strategy is not None:
            optional[fd.name] = strategy
    choices: list[SearchStrategy[dict[str, Any]]] = []
    for oneof in descriptor.oneofs:  # at most one member of each, or none
        members = [(fd.name, _field(fd, depth, hints)) for fd in oneof.fields]
        picks = [s.map(_named(n)) for n, s in members if s is not None]
        choices.append(st.one_of(st.just({}), *picks))

    def build(parts: tuple[Any, ...]) -> Message:
        values: dict[str, Any] = {}
        for part in parts:
            values.update(part)
        return cls(**values)

    return st.tuples(st.fixed_dictionaries({}, optional=optional), *choices).map(build)


# --- bytes that do not decode, or only just -----------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


_JUNK_TAILS = (
    _tag(0, 0) + b"\x01",  # field number 0
    _tag(1, 6) + b"\x01",  # wire types 6 and 7 do not exist
    _tag(2, 7),
    _tag(3, 3),  # a group start that never ends
    _tag(1, 2) + _varint(2**31),  # a length far past the end
    _tag(1, 0) + b"\xff" * 11,  # an 11-byte varint
)


@st.composite
def _mutated(draw: Any, base: SearchStrategy[Message], descriptor: Descriptor) -> bytes:
    data = bytearray(draw(base).SerializeToString())
    how = draw(st.sampled_from(("flip", "truncate", "unknown", "utf8", "junk")))
    if how == "flip" and data:
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif how == "truncate" and data:
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif how == "unknown":  # decodes: unknown fields are kept, then ignored
        top = max((fd.number for fd in descriptor.fields), default=0)
        number = draw(st.integers(top + 1, 2**29 - 1))
        wire = draw(st.sampled_from((0, 1, 2, 5)))
        tail = {0: _varint(draw(st.integers(0, 2**64 - 1))), 1: b"\x00" * 8, 5: b"\x00" * 4}
        payload = draw(st.binary(max_size=32))
        data += _tag(number, wire) + tail.get(wire, _varint(len(payload)) + payload)
    elif how == "utf8":  # invalid UTF-8 in a string field: REQUEST_MALFORMED
        strings = [fd.number for fd in descriptor.fields if fd.type == F.TYPE_STRING]
        number = draw(st.sampled_from(strings)) if strings else 1
        bad = draw(st.sampled_from((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"ok\x80")))
        data += _tag(number, 2) + _varint(len(bad)) + bad
    else:
        data += draw(st.sampled_from(_JUNK_TAILS))
    return bytes(data)


def raw_bytes_strategy(
    descriptor: Descriptor | None = None, base: SearchStrategy[Message] | None = None
) -> SearchStrategy[bytes]:
    """Random bytes; with a ``descriptor``, also a valid message's bytes (from ``base``, or
    walked) with bytes flipped, cut short, an unknown field or bad UTF-8 or junk appended."""
    random = st.binary(max_size=512)
    if descriptor is None:
        return random
    valid = message_strategy(descriptor) if base is None else base
    return st.one_of(random, _mutated(valid, descriptor))


# --- the services -------------------------------------------------------------------------


@dataclass(frozen=True)
class Method:
    path: str  # "/turnwire.runner.v1.RunnerService/Dispatch"
    input: Descriptor
    output: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def every_method(service: ServiceDescriptor) -> list[Method]:
    """(full method path, input Descriptor, output message class, streaming flags) of each."""
    return [
        Method(f"/{service.full_name}/{m.name}", m.input_type, GetMessageClass(m.output_type),
               m.client_streaming, m.server_streaming)
        for m in service.methods
    ]  # fmt: skip


TURN_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["TurnService"]
RUNNER_SERVICE = runner_pb2.DESCRIPTOR.services_by_name["RunnerService"]


# --- calls and the oracle -----------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One call and what came back."""

    method: str
    request: bytes
    code: grpc.StatusCode  # OK when it answered
    details: str = ""
    typed: TypedError | None = None
    credentials: str = "valid"  # "valid", "missing" or "wrong"
    elapsed: float = 0.0
    timeout: float = 10.0
    cancelled_by_us: bool = False
    shutting_down: bool = False
    process_alive: bool = True
    replies: tuple[bytes, ...] = ()
    undecodable_reply: bool = False

    def describe(self) -> str:
        typed = f" {self.typed.reason}" if self.typed else " (no ErrorInfo)"
        return (
            f"{self.method} [{self.credentials} credentials] request hex "
            f"{self.request.hex() or '(empty)'} -> {self.code.name}{typed}: {self.details!r}"
        )


_OWN_ENDINGS = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


def classify(outcome: Outcome) -> str | None:
    """A description of the crash this outcome shows, or None when it is acceptable."""
    if not outcome.process_alive:
        return f"the server process died: {outcome.describe()}"
    if outcome.undecodable_reply:
        return f"a reply does not decode as the method's response: {outcome.describe()}"
    if outcome.code is grpc.StatusCode.OK:
        if outcome.credentials != "valid":
            return f"served a caller without valid credentials: {outcome.describe()}"
        return None
    if outcome.code is grpc.StatusCode.INTERNAL:
        return f"INTERNAL: {outcome.describe()}"
    if "Traceback (most recent call last)" in outcome.details:
        return f"a reply carries a traceback: {outcome.describe()}"
    if outcome.typed is not None:
        return None
    own = outcome.cancelled_by_us or outcome.elapsed >= outcome.timeout * 0.95
    if outcome.code in _OWN_ENDINGS and own:
        return None
    if outcome.code is grpc.StatusCode.UNAVAILABLE and outcome.shutting_down:
        return None
    return f"untyped {outcome.code.name}: {outcome.describe()}"


def call(channel: Any, method: Method, payload: bytes, metadata: Metadata, *,
         credentials: str = "valid", timeout: float = 10.0, max_messages: int = 2,
         alive: Callable[[], bool] = lambda: True) -> Outcome:  # fmt: skip
    """Send ``payload`` as the request bytes; for a stream read at most ``max_messages``
    (then cancel). Every reply is decoded as the method's response message."""
    started = time.monotonic()
    replies: list[bytes] = []
    cancelled = False
    code, details, typed = grpc.StatusCode.OK, "", None
    try:
        if method.server_streaming:
            stream = channel.unary_stream(method.path)(payload, timeout=timeout, metadata=metadata)
            for reply in stream:
                replies.append(reply)
                if len(replies) >= max_messages:
                    stream.cancel()
                    cancelled = True
                    break
        else:
            replies.append(channel.unary_unary(method.path)(payload, timeout, metadata))
    except grpc.RpcError as error:
        code = error.code()
        details = error.details() or ""
        typed = error_info(error)
    undecodable = False
    for reply in replies:
        try:
            method.output.FromString(reply)
        except DecodeError:
            undecodable = True
    return Outcome(
        method=method.path, request=payload, code=code, details=details, typed=typed,
        credentials=credentials, elapsed=time.monotonic() - started, timeout=timeout,
        cancelled_by_us=cancelled, process_alive=alive(), replies=tuple(replies),
        undecodable_reply=undecodable,
    )  # fmt: skip
