"""The fault rule language shared by the fault proxy and the fault interceptor.

Pure: no gRPC, no I/O. A :class:`Rule` is an action plus a selector; a
:class:`RuleSet` decides, for each call, which rule (if any) applies, keeps hit
counts and traffic stats, and does so deterministically given its seed and
clock.

Text form (one rule; the CLI's ``--rule`` and ``rules add``)::

    ACTION [key=value ...]

    drop-request   method=Dispatch op=op-1          never reaches the upstream
    drop-response  method=Dispatch nth=1            upstream acts, caller sees UNAVAILABLE
    delay-request  ms=300                           wait, then forward
    delay-response ms=300 method=GetOperationStatus forward, wait, then reply
    reset          at=request|response              UNAVAILABLE "connection reset"
    blackhole      for=2s                           hold calls, never forward

Selector keys: ``method`` (full ``/pkg.Service/Method``, ``pkg.Service/Method``
or the short ``Method``; default every method), ``op`` (operation id read from
the request's field 1), ``nth`` (only the N-th selected call), ``count`` (fire
at most K times), ``p`` (probability, drawn from the rule set's seeded RNG),
``for`` (the rule lives this long after it is added: ``500ms``, ``2s``).
Action keys: ``ms`` (delay), ``at`` (reset: before or after forwarding),
``messages`` (streams: responses passed before drop-response/reset cuts in).
"""

from __future__ import annotations

import enum
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class RuleError(ValueError):
    """A rule that cannot be parsed or does not make sense."""


class Action(enum.Enum):
    DROP_REQUEST = "drop-request"
    DROP_RESPONSE = "drop-response"
    DELAY_REQUEST = "delay-request"
    DELAY_RESPONSE = "delay-response"
    RESET = "reset"
    BLACKHOLE = "blackhole"


class Phase(enum.Enum):
    """When a reset cuts the call: before forwarding, or after the upstream replied."""

    REQUEST = "request"
    RESPONSE = "response"


_DELAYS = (Action.DELAY_REQUEST, Action.DELAY_RESPONSE)
_CUTS_RESPONSES = (Action.DROP_RESPONSE, Action.RESET)


@dataclass(frozen=True)
class Rule:
    """One fault: what to do (action) to which calls (selector)."""

    action: Action
    method: str | None = None
    operation_id: str | None = None
    nth: int | None = None
    count: int | None = None
    probability: float | None = None
    duration_ms: int | None = None
    delay_ms: int = 0
    at: Phase = Phase.REQUEST
    messages: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    def selects(self, method: str, operation_ids: tuple[str, ...]) -> bool:
        """Does the selector (method, operation id) pick this call?"""
        if self.method is not None and not method_matches(self.method, method):
            return False
        return self.operation_id is None or self.operation_id in operation_ids

    def to_text(self) -> str:
        return rule_to_text(self)

    def to_json(self) -> dict[str, Any]:
        return rule_to_json(self)


def _validate(rule: Rule) -> None:
    for name in ("nth", "count", "duration_ms"):
        value = getattr(rule, name)
        if value is not None and value < 1:
            raise RuleError(f"{name} must be >= 1, got {value}")
    if rule.probability is not None and not 0.0 < rule.probability <= 1.0:
        raise RuleError(f"probability must be in (0, 1], got {rule.probability}")
    if rule.method is not None and not rule.method.strip("/"):
        raise RuleError("method must not be empty")
    if rule.operation_id == "":
        raise RuleError("operation id must not be empty")
    if rule.action in _DELAYS and rule.delay_ms < 1:
        raise RuleError(f"{rule.action.value} needs ms=N (N >= 1)")
    if rule.action not in _DELAYS and rule.delay_ms:
        raise RuleError(
            f"ms= applies only to delay-request/delay-response, not {rule.action.value}"
        )
    if rule.action is not Action.RESET and rule.at is not Phase.REQUEST:
        raise RuleError("at= applies only to reset")
    if rule.messages < 0:
        raise RuleError(f"messages must be >= 0, got {rule.messages}")
    if rule.messages and rule.action not in _CUTS_RESPONSES:
        raise RuleError("messages= applies only to drop-response and reset at=response")
    if rule.messages and rule.action is Action.RESET and rule.at is not Phase.RESPONSE:
        raise RuleError("messages= on reset needs at=response")


def method_matches(selector: str, method: str) -> bool:
    """``Dispatch``, ``pkg.Svc/Dispatch`` and ``/pkg.Svc/Dispatch`` select ``/pkg.Svc/Dispatch``."""
    wanted = selector.strip("/")
    actual = method.strip("/")
    if wanted in ("*", actual):
        return True
    return "/" not in wanted and actual.rpartition("/")[2] == wanted


# ---------------------------------------------------------------- request ids


def operation_ids(request: bytes) -> tuple[str, ...]:
    """Every UTF-8 string in protobuf field 1 of a serialized request.

    Field 1 is ``operation_id`` in GetOperationStatusRequest, DispatchRequest,
    CancelRequest, ReleaseRequest (and the coordinator's per-operation
    requests), and the repeated ``operation_ids`` of BatchGetOperationStatus.
    A request that is not valid protobuf yields no ids rather than an error:
    the proxy must forward what it cannot read.
    """
    found: list[str] = []
    try:
        for number, wire_type, value in _fields(request):
            if number == 1 and wire_type == 2 and isinstance(value, bytes):
                found.append(value.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return tuple(found)
    return tuple(found)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while pos < len(data) and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("truncated varint")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            out.append((number, wire_type, value))
        elif wire_type == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated field")
            out.append((number, wire_type, data[pos : pos + size]))
            pos += size
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    if pos != len(data):
        raise ValueError("truncated message")
    return out


# ------------------------------------------------------------ text and JSON

_TEXT_KEYS = {
    "method": "method",
    "op": "operation_id",
    "operation_id": "operation_id",
    "nth": "nth",
    "count": "count",
    "p": "probability",
    "probability": "probability",
    "for": "duration_ms",
    "ms": "delay_ms",
    "at": "at",
    "messages": "messages",
}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``2s``, ``1.5s``, ``1m`` -> milliseconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise RuleError(f"duration must look like 500ms, 2s or 1m, got {text!r}")
    return round(float(match.group(1)) * _UNIT_MS[match.group(2)])


def _action(text: str) -> Action:
    try:
        return Action(text.strip().lower())
    except ValueError:
        known = ", ".join(a.value for a in Action)
        raise RuleError(f"unknown action {text!r}; known: {known}") from None


def _convert(name: str, raw: str) -> object:
    try:
        if name in ("nth", "count", "messages"):
            return int(raw)
        if name == "delay_ms":
            return parse_duration_ms(raw) if raw[-1:].isalpha() else int(raw)
        if name == "probability":
            return float(raw)
    except ValueError:
        raise RuleError(f"{name}: not a number: {raw!r}") from None
    if name == "duration_ms":
        return parse_duration_ms(raw)
    if name == "at":
        try:
            return Phase(raw)
        except ValueError:
            raise RuleError(f"at must be request or response, got {raw!r}") from None
    return raw


def parse_rule(text: str) -> Rule:
    """Parse the compact text form: ``drop-response method=Dispatch nth=1``."""
    words = text.split()
    if not words:
        raise RuleError("empty rule")
    values: dict[str, object] = {}
    for word in words[1:]:
        key, sep, raw = word.partition("=")
        if not sep or not raw:
            raise RuleError(f"expected key=value, got {word!r}")
        name = _TEXT_KEYS.get(key)
        if name is None:
            raise RuleError(f"unknown key {key!r}; known: {', '.join(sorted(set(_TEXT_KEYS)))}")
        if name in values:
            raise RuleError(f"{key} given twice")
        values[name] = _convert(name, raw)
    return Rule(_action(words[0]), **values)  # type: ignore[arg-type]


def _format_ms(value: int) -> str:
    return f"{value // 1000}s" if value % 1000 == 0 else f"{value}ms"


def rule_to_text(rule: Rule) -> str:
    """The compact text form; ``parse_rule(rule_to_text(r)) == r``."""
    parts = [rule.action.value]
    optional: list[tuple[str, object]] = [
        ("method", rule.method),
        ("op", rule.operation_id),
        ("nth", rule.nth),
        ("count", rule.count),
        ("p", rule.probability),
        ("for", None if rule.duration_ms is None else _format_ms(rule.duration_ms)),
        ("ms", rule.delay_ms or None),
        ("at", rule.at.value if rule.at is not Phase.REQUEST else None),
        ("messages", rule.messages or None),
    ]
    parts.extend(f"{key}={value}" for key, value in optional if value is not None)
    return " ".join(parts)


_JSON_FIELDS = (
    "method",
    "operation_id",
    "nth",
    "count",
    "probability",
    "duration_ms",
    "delay_ms",
    "messages",
)


def rule_to_json(rule: Rule) -> dict[str, Any]:
    """A JSON-ready dict; ``rule_from_json(rule_to_json(r)) == r``."""
    out: dict[str, Any] = {"action": rule.action.value, "at": rule.at.value}
    out.update({name: getattr(rule, name) for name in _JSON_FIELDS})
    return out


def rule_from_json(data: Mapping[str, Any]) -> Rule:
    """Build a rule from a dict; unknown keys and wrong types are refused."""
    unknown = set(data) - {"action", "at", *_JSON_FIELDS}
    if unknown:
        raise RuleError(f"unknown rule fields: {sorted(unknown)}")
    if not isinstance(data.get("action"), str):
        raise RuleError("rule needs an action string")
    values: dict[str, Any] = {}
    for name in _JSON_FIELDS:
        value = data.get(name)
        if value is None:
            continue
        wanted: tuple[type, ...] = (str,) if name in ("method", "operation_id") else (int,)
        if name == "probability":
            wanted = (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise RuleError(f"{name}: wrong type {type(value).__name__}")
        values[name] = value
    at = data.get("at", Phase.REQUEST.value)
    return Rule(_action(data["action"]), at=_convert("at", str(at)), **values)  # type: ignore[arg-type]


# -------------------------------------------------------------- the rule set


@dataclass(frozen=True)
class Decision:
    """The fault to inject into one call."""

    rule_id: int
    rule: Rule
    # How long a blackhole may hold this call (None: until the caller gives up).
    hold_seconds: float | None = None

    @property
    def action(self) -> Action:
        return self.rule.action

    @property
    def fails_before_forward(self) -> bool:
        """UNAVAILABLE at once; the upstream never sees the call."""
        return self.action is Action.DROP_REQUEST or (
            self.action is Action.RESET and self.rule.at is Phase.REQUEST
        )

    @property
    def cuts_response(self) -> bool:
        """The upstream acts, then the caller gets UNAVAILABLE instead of its reply."""
        return self.action is Action.DROP_RESPONSE or (
            self.action is Action.RESET and self.rule.at is Phase.RESPONSE
        )

    @property
    def acts_on_reply(self) -> bool:
        """The fault happens once the upstream replied (a cut or a reply delay)."""
        return self.cuts_response or self.action is Action.DELAY_RESPONSE


@dataclass(frozen=True)
class RuleStatus:
    """A rule as listed: its id, hits, how many calls it selected, expiry."""

    rule_id: int
    rule: Rule
    hits: int
    selected: int
    expired: bool


@dataclass(frozen=True)
class FaultStats:
    """Traffic seen and faults injected since the rule set was made."""

    calls_by_method: Mapping[str, int]
    dropped_requests: int = 0
    dropped_responses: int = 0
    delayed: int = 0
    reset: int = 0
    blackholed: int = 0


_STAT_FIELD = {
    Action.DROP_REQUEST: "dropped_requests",
    Action.DROP_RESPONSE: "dropped_responses",
    Action.DELAY_REQUEST: "delayed",
    Action.DELAY_RESPONSE: "delayed",
    Action.RESET: "reset",
    Action.BLACKHOLE: "blackholed",
}


@dataclass
class _Entry:
    rule: Rule
    added_at: float
    rng: random.Random
    hits: int = 0
    selected: int = 0

    def expires_at(self) -> float | None:
        if self.rule.duration_ms is None:
            return None
        return self.added_at + self.rule.duration_ms / 1000.0


class RuleSet:
    """Ordered rules; the first rule that fires on a call decides its fault.

    Every rule counts every call its selector picks (so ``nth=2`` means the
    second such call, whether or not an earlier rule fired on the first);
    only the rule that fires records a hit. Each rule draws from its own RNG
    seeded by (seed, rule id), so probabilities replay exactly. Thread-safe.
    """

    def __init__(self, *, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seed = seed
        self._clock = clock
        self._entries: dict[int, _Entry] = {}
        self._next_id = 1
        self._calls: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, rule: Rule) -> int:
        """Add a rule (it lives from now); returns its id."""
        with self._lock:
            rule_id = self._next_id
            self._next_id += 1
            rng = random.Random(f"{self.seed}:{rule_id}")
            self._entries[rule_id] = _Entry(rule, self._clock(), rng)
            return rule_id

    def remove(self, rule_id: int) -> bool:
        with self._lock:
            return self._entries.pop(rule_id, None) is not None

    def clear(self) -> int:
        """Drop every rule; returns how many there were. Stats are kept."""
        with self._lock:
            count = len(self._entries)
            self._entries.clear()
            return count

    def rules(self) -> list[RuleStatus]:
        with self._lock:
            now = self._clock()
            return [
                RuleStatus(rule_id, e.rule, e.hits, e.selected, _expired(e, now))
                for rule_id, e in self._entries.items()
            ]

    def stats(self) -> FaultStats:
        with self._lock:
            counters = {name: self._counters.get(name, 0) for name in set(_STAT_FIELD.values())}
            return FaultStats(calls_by_method=dict(self._calls), **counters)

    def decide(self, method: str, request: bytes) -> Decision | None:
        """The fault for this call (None: pass it through), counting the call."""
        ids = operation_ids(request)
        with self._lock:
            now = self._clock()
            self._calls[method] = self._calls.get(method, 0) + 1
            decision: Decision | None = None
            for rule_id, entry in self._entries.items():
                if _expired(entry, now) or not entry.rule.selects(method, ids):
                    continue
                entry.selected += 1
                if decision is None and _fires(entry):
                    entry.hits += 1
                    decision = Decision(rule_id, entry.rule, _hold(entry, now))
            if decision is not None:
                name = _STAT_FIELD[decision.action]
                self._counters[name] = self._counters.get(name, 0) + 1
            return decision


def _expired(entry: _Entry, now: float) -> bool:
    expires = entry.expires_at()
    return expires is not None and now >= expires


def _fires(entry: _Entry) -> bool:
    rule = entry.rule
    if rule.nth is not None and entry.selected != rule.nth:
        return False
    if rule.count is not None and entry.hits >= rule.count:
        return False
    # Draw only for calls that passed the deterministic gates, so the sequence
    # of draws depends on this rule's own traffic alone.
    return rule.probability is None or entry.rng.random() < rule.probability


def _hold(entry: _Entry, now: float) -> float | None:
    expires = entry.expires_at()
    return None if expires is None else max(0.0, expires - now)
