"""The fault rule language: parsing, serialization, selection (pure, no gRPC)."""

from __future__ import annotations

import pytest

from turnwire.faults.rules import (
    Action,
    Phase,
    Rule,
    RuleError,
    RuleSet,
    method_matches,
    operation_ids,
    parse_duration_ms,
    parse_rule,
    rule_from_json,
    rule_to_json,
)
from turnwire.runner.v1 import runner_pb2

DISPATCH = "/turnwire.runner.v1.RunnerService/Dispatch"
STATUS = "/turnwire.runner.v1.RunnerService/GetOperationStatus"


class FakeClock:
    """A settable monotonic clock (the RuleSet's injected time source)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


PARSED = [
    ("drop-request", Rule(Action.DROP_REQUEST)),
    ("drop-response method=Dispatch nth=1", Rule(Action.DROP_RESPONSE, method="Dispatch", nth=1)),
    ("delay-request ms=300", Rule(Action.DELAY_REQUEST, delay_ms=300)),
    (
        "delay-response ms=2s method=GetOperationStatus",
        Rule(Action.DELAY_RESPONSE, delay_ms=2000, method="GetOperationStatus"),
    ),
    ("reset at=response", Rule(Action.RESET, at=Phase.RESPONSE)),
    ("blackhole for=1.5s", Rule(Action.BLACKHOLE, duration_ms=1500)),
    (
        "drop-request op=op-7 count=2 p=0.5",
        Rule(Action.DROP_REQUEST, operation_id="op-7", count=2, probability=0.5),
    ),
    (
        "drop-response method=WatchOperations messages=2",
        Rule(Action.DROP_RESPONSE, method="WatchOperations", messages=2),
    ),
    ("  DROP-REQUEST   operation_id=x  ", Rule(Action.DROP_REQUEST, operation_id="x")),
]


@pytest.mark.parametrize(("text", "expected"), PARSED, ids=[t for t, _ in PARSED])
def test_parse_rule_text(text: str, expected: Rule) -> None:
    """Text form: each documented spelling parses to the rule it names."""
    assert parse_rule(text) == expected


@pytest.mark.parametrize(("text", "expected"), PARSED, ids=[t for t, _ in PARSED])
def test_text_and_json_round_trip(text: str, expected: Rule) -> None:
    """Text and JSON forms both round-trip to the same rule."""
    assert parse_rule(expected.to_text()) == expected
    assert rule_from_json(rule_to_json(expected)) == expected


BAD_TEXT = [
    ("", "empty rule"),
    ("explode", "unknown action"),
    ("drop-request nth=0", "nth must be >= 1"),
    ("drop-request count=-1", "count must be >= 1"),
    ("drop-request p=0", "probability"),
    ("drop-request p=1.5", "probability"),
    ("drop-request p=x", "not a number"),
    ("delay-request", "needs ms="),
    ("drop-request ms=5", "ms= applies only"),
    ("drop-request at=response", "at= applies only to reset"),
    ("reset at=sideways", "at must be request or response"),
    ("drop-request messages=1", "messages= applies only"),
    ("reset messages=1", "needs at=response"),
    ("blackhole for=soon", "duration must look like"),
    ("drop-request colour=red", "unknown key"),
    ("drop-request method", "expected key=value"),
    ("drop-request nth=1 nth=2", "given twice"),
    ("drop-request method=/", "method must not be empty"),
]


@pytest.mark.parametrize(("text", "message"), BAD_TEXT, ids=[t or "<empty>" for t, _ in BAD_TEXT])
def test_bad_rule_text_is_refused_with_the_reason(text: str, message: str) -> None:
    """Bad input: a rule that cannot mean anything is refused with a clear reason."""
    with pytest.raises(RuleError, match=message):
        parse_rule(text)


BAD_JSON = [
    ({}, "action"),
    ({"action": "drop-request", "colour": "red"}, "unknown rule fields"),
    ({"action": "drop-request", "nth": "1"}, "nth: wrong type"),
    ({"action": "drop-request", "nth": True}, "nth: wrong type"),
    ({"action": "drop-request", "method": 3}, "method: wrong type"),
    ({"action": "reset", "at": "later"}, "at must be"),
]


@pytest.mark.parametrize(("data", "message"), BAD_JSON, ids=[m for _, m in BAD_JSON])
def test_bad_rule_json_is_refused_with_the_reason(data: dict[str, object], message: str) -> None:
    """Bad input: JSON rules with unknown fields or wrong types are refused."""
    with pytest.raises(RuleError, match=message):
        rule_from_json(data)


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("2s", 2000), ("1.5s", 1500), ("1m", 60000)]
)
def test_durations(text: str, ms: int) -> None:
    """Durations accept ms, s and m units."""
    assert parse_duration_ms(text) == ms


METHODS = [
    ("Dispatch", DISPATCH, True),
    ("turnwire.runner.v1.RunnerService/Dispatch", DISPATCH, True),
    ("/turnwire.runner.v1.RunnerService/Dispatch", DISPATCH, True),
    ("*", DISPATCH, True),
    ("Cancel", DISPATCH, False),
    ("Dispatc", DISPATCH, False),
    ("other.Service/Dispatch", DISPATCH, False),
]


@pytest.mark.parametrize(("selector", "method", "hit"), METHODS)
def test_method_selector(selector: str, method: str, hit: bool) -> None:
    """Method selectors match full or short names, nothing else."""
    assert method_matches(selector, method) is hit


REQUESTS = [
    (runner_pb2.DispatchRequest(operation_id="op-1", envelope=b"\xff" * 5, attempt=3), ("op-1",)),
    (runner_pb2.GetOperationStatusRequest(operation_id="op-2"), ("op-2",)),
    (runner_pb2.CancelRequest(operation_id="op-3", fencing_token=9), ("op-3",)),
    (runner_pb2.ReleaseRequest(operation_id="op-4"), ("op-4",)),
    (runner_pb2.BatchGetOperationStatusRequest(operation_ids=["a", "b"]), ("a", "b")),
    (runner_pb2.WatchOperationsRequest(after_sequence=42), ()),
    (runner_pb2.GetRunnerInfoRequest(), ()),
]


@pytest.mark.parametrize(
    ("request_message", "ids"), REQUESTS, ids=[type(r).__name__ for r, _ in REQUESTS]
)
def test_operation_id_is_read_from_field_one(request_message: object, ids: tuple[str, ...]) -> None:
    """Operation ids come from field 1 of the runner contract's requests."""
    assert operation_ids(request_message.SerializeToString()) == ids  # type: ignore[attr-defined]


def test_garbage_request_bytes_yield_no_operation_id() -> None:
    """Bytes that are not protobuf give no id (the proxy forwards what it cannot read)."""
    assert operation_ids(b"\x0a\xff") == ()
    assert operation_ids(b"\x0f") == ()


def _dispatch(op: str) -> bytes:
    return runner_pb2.DispatchRequest(operation_id=op).SerializeToString()


def _fired(rules: RuleSet, calls: list[tuple[str, str]]) -> list[int | None]:
    """The rule id that fired on each (method, op) call, None where none did."""
    out: list[int | None] = []
    for method, op in calls:
        decision = rules.decide(method, _dispatch(op))
        out.append(None if decision is None else decision.rule_id)
    return out


SELECTION = [
    (
        "nth picks only the N-th selected call",
        ["drop-response method=Dispatch nth=2"],
        [(DISPATCH, "a")] * 4,
        [None, 1, None, None],
    ),
    (
        "count fires on the first K selected calls",
        ["drop-request count=2"],
        [(DISPATCH, "a")] * 4,
        [1, 1, None, None],
    ),
    (
        "op selects by operation id",
        ["drop-request op=b"],
        [(DISPATCH, "a"), (DISPATCH, "b"), (STATUS, "b"), (DISPATCH, "c")],
        [None, 1, 1, None],
    ),
    (
        "method selects by method",
        ["reset method=GetOperationStatus"],
        [(DISPATCH, "a"), (STATUS, "a")],
        [None, 1],
    ),
    (
        "first firing rule wins; later rules still count the call",
        ["drop-request nth=1", "drop-response nth=2"],
        [(DISPATCH, "a")] * 3,
        [1, 2, None],
    ),
    (
        "nth and op combine: the 2nd call for that op",
        ["drop-response op=x nth=2"],
        [(DISPATCH, "x"), (DISPATCH, "y"), (DISPATCH, "x"), (DISPATCH, "x")],
        [None, None, 1, None],
    ),
]


@pytest.mark.parametrize(
    ("name", "rules", "calls", "expected"), SELECTION, ids=[row[0] for row in SELECTION]
)
def test_rule_selection(
    name: str, rules: list[str], calls: list[tuple[str, str]], expected: list[int | None]
) -> None:
    """Selectors (method, op, nth, count, order) pick exactly the calls they name."""
    rule_set = RuleSet()
    for text in rules:
        rule_set.add(parse_rule(text))
    assert _fired(rule_set, calls) == expected


def test_hits_and_selected_are_counted_per_rule() -> None:
    """Listing shows each rule's hits (acted on) and selected (picked) counts."""
    rules = RuleSet()
    rules.add(parse_rule("drop-request method=Dispatch count=1"))
    for _ in range(3):
        rules.decide(DISPATCH, _dispatch("a"))
    [status] = rules.rules()
    assert (status.hits, status.selected, status.expired) == (1, 3, False)


def test_probability_is_reproducible_from_the_seed() -> None:
    """Probabilistic rules fire on the same calls for the same seed, differently for another."""

    def pattern(seed: int) -> list[int | None]:
        rules = RuleSet(seed=seed)
        rules.add(parse_rule("drop-request p=0.5"))
        return _fired(rules, [(DISPATCH, "a")] * 64)

    assert pattern(7) == pattern(7)
    assert pattern(7) != pattern(8)
    assert 0 < pattern(7).count(1) < 64


def test_duration_expires_the_rule_and_bounds_the_blackhole_hold() -> None:
    """for=: the rule fires only while it lives; a blackhole holds at most until then."""
    clock = FakeClock()
    rules = RuleSet(clock=clock)
    rules.add(parse_rule("blackhole for=2s"))
    clock.now += 0.5
    decision = rules.decide(DISPATCH, b"")
    assert decision is not None and decision.hold_seconds == pytest.approx(1.5)
    clock.now += 1.5
    assert rules.decide(DISPATCH, b"") is None
    assert rules.rules()[0].expired is True


def test_blackhole_without_duration_holds_until_the_caller_gives_up() -> None:
    """A blackhole with no for= gives no hold limit (the caller's deadline ends it)."""
    rules = RuleSet()
    rules.add(parse_rule("blackhole"))
    decision = rules.decide(DISPATCH, b"")
    assert decision is not None and decision.hold_seconds is None


def test_stats_count_calls_per_method_and_faults_per_kind() -> None:
    """Stats: calls per method, and each injected fault under its kind."""
    rules = RuleSet()
    rules.add(parse_rule("drop-request nth=1"))
    rules.add(parse_rule("drop-response nth=2"))
    rules.add(parse_rule("delay-request ms=1 nth=3"))
    rules.add(parse_rule("reset nth=4"))
    rules.add(parse_rule("blackhole nth=5"))
    for _ in range(6):
        rules.decide(DISPATCH, b"")
    rules.decide(STATUS, b"")
    stats = rules.stats()
    assert dict(stats.calls_by_method) == {DISPATCH: 6, STATUS: 1}
    counts = (
        stats.dropped_requests,
        stats.dropped_responses,
        stats.delayed,
        stats.reset,
        stats.blackholed,
    )
    assert counts == (1, 1, 1, 1, 1)


def test_remove_and_clear() -> None:
    """Rules can be removed by id or all at once; stats survive a clear."""
    rules = RuleSet()
    first = rules.add(parse_rule("drop-request"))
    rules.add(parse_rule("reset"))
    rules.decide(DISPATCH, b"")
    assert rules.remove(first) is True
    assert rules.remove(first) is False
    assert [s.rule.action for s in rules.rules()] == [Action.RESET]
    assert rules.clear() == 1
    assert rules.rules() == []
    assert rules.decide(DISPATCH, b"") is None
    assert rules.stats().calls_by_method[DISPATCH] == 2
