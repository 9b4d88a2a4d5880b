"""The runner row transition table (R3, R5, R6, R7, R9, §6): legal changes and refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.core.transitions import (
    SOURCES,
    Admit,
    ConfirmStart,
    EndExecution,
    IllegalRowEvent,
    LaunchIntent,
    RaiseFencingToken,
    RecordStopReason,
    Release,
    RetryIntent,
    Settle,
    TakeOver,
    Tombstone,
    apply,
)

OURS = "a" * 32
OLD = "b" * 32
S = RowState


def row(state: RowState, *, incarnation: str = OURS, **changes: object) -> OperationRow:
    execution = {
        S.ACCEPTED: Execution.NOT_STARTED,
        S.LAUNCHING: Execution.UNKNOWN,
        S.RUNNING: Execution.STARTED,
        S.TOMBSTONED: Execution.NOT_STARTED,
    }.get(state, Execution.STARTED)
    base = OperationRow(
        operation_id="op",
        state=state,
        execution=execution,
        incarnation_id=incarnation,
        sequence=7,
        fencing_token=3,
        attempt=1,
        kind=SlotKind.WRITABLE,
        envelope_digest="d",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


OK = TurnOutput(b"x")
SUCCEED = Settle(OURS, S.SUCCEEDED, Execution.STARTED, 9.0, result=OK)
EVENTS = {
    "admit": Admit("op", OURS, SlotKind.WRITABLE, "d", 1, 1, 1.0),
    "tombstone": Tombstone("op", OURS, 1, 1.0),
    "take_over": TakeOver(OURS, 2, 4, 2.0),
    "launch_intent": LaunchIntent(OURS),
    "confirm_start": ConfirmStart(OURS, 3.0),
    "settle_ok": SUCCEED,
    "stop": RecordStopReason(StopReason.CANCEL),
    "raise_token": RaiseFencingToken(9),
    "release": Release(),
    # R15: legal only on a row with executions (tests/runner/unit/test_retries.py);
    # these rows have none, so both are refused everywhere here.
    "end_execution": EndExecution(
        OURS, 4.0, TurnFailure("EXECUTOR_FAILED", effect=DeclaredEffect.NONE)
    ),
    "retry_intent": RetryIntent(OURS, 5.0),
}

# (source state or None, event name, resulting state); every pair not listed is illegal.
LEGAL = {
    (None, "admit"): S.ACCEPTED,
    (None, "tombstone"): S.TOMBSTONED,
    (S.ACCEPTED, "launch_intent"): S.LAUNCHING,
    (S.ACCEPTED, "stop"): S.ACCEPTED,
    (S.ACCEPTED, "raise_token"): S.ACCEPTED,
    (S.LAUNCHING, "confirm_start"): S.RUNNING,
    (S.LAUNCHING, "settle_ok"): S.SUCCEEDED,
    (S.LAUNCHING, "stop"): S.LAUNCHING,
    (S.LAUNCHING, "raise_token"): S.LAUNCHING,
    (S.RUNNING, "settle_ok"): S.SUCCEEDED,
    (S.RUNNING, "stop"): S.RUNNING,
    (S.RUNNING, "raise_token"): S.RUNNING,
    (S.TOMBSTONED, "raise_token"): S.TOMBSTONED,
    **{(t, "raise_token"): t for t in (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT)},
    **{(t, "release"): t for t in (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT)},
}
STORED_STATES = [None, *[s for s in RowState if s is not S.INTERRUPTED]]
CASES = [(source, name) for source in STORED_STATES for name in EVENTS]


@pytest.mark.rule("R3", "R5", "R7")
@pytest.mark.parametrize(("source", "name"), CASES)
def test_every_event_from_every_state_follows_the_table(source: RowState | None, name: str) -> None:
    """R3/R5/R7: each (state, event) is legal exactly as the table says; illegal changes nothing."""
    before = row(source) if source is not None else None
    snapshot = replace(before) if before is not None else None
    expected = LEGAL.get((source, name))
    if expected is None:
        with pytest.raises(IllegalRowEvent):
            apply(before, EVENTS[name], "op")
        assert before == snapshot
    else:
        assert apply(before, EVENTS[name], "op").state is expected


def test_table_covers_every_event_kind() -> None:
    """The transition table names a source set for every event kind."""
    assert {type(e) for e in EVENTS.values()} == set(SOURCES)


@pytest.mark.rule("R6")
def test_first_stop_reason_is_never_overwritten() -> None:
    """R6: a second RecordStopReason is refused; the first reason stays."""
    first = apply(row(S.RUNNING), RecordStopReason(StopReason.DEADLINE))
    with pytest.raises(IllegalRowEvent):
        apply(first, RecordStopReason(StopReason.CANCEL))
    assert first.stop_reason is StopReason.DEADLINE


def test_take_over_only_from_an_earlier_incarnation() -> None:
    """§6: only an earlier incarnation's unstopped accepted row can be taken over."""
    taken = apply(row(S.ACCEPTED, incarnation=OLD), TakeOver(OURS, 2, 5, 2.0))
    assert (taken.incarnation_id, taken.attempt, taken.fencing_token) == (OURS, 2, 5)
    with pytest.raises(IllegalRowEvent):
        apply(row(S.ACCEPTED), TakeOver(OURS, 2, 5, 2.0))
    with pytest.raises(IllegalRowEvent):
        apply(
            row(S.ACCEPTED, incarnation=OLD, stop_reason=StopReason.CANCEL),
            TakeOver(OURS, 2, 5, 2.0),
        )


@pytest.mark.rule("R3")
def test_launch_needs_this_incarnation_and_no_stop_reason() -> None:
    """R3/§6: an old incarnation's row or a stopped row is never launched."""
    with pytest.raises(IllegalRowEvent):
        apply(row(S.ACCEPTED, incarnation=OLD), LaunchIntent(OURS))
    with pytest.raises(IllegalRowEvent):
        apply(row(S.ACCEPTED, stop_reason=StopReason.SHUTDOWN), LaunchIntent(OURS))
    assert apply(row(S.ACCEPTED), LaunchIntent(OURS)).execution is Execution.UNKNOWN


@pytest.mark.rule("R7", "C14")
@pytest.mark.parametrize(
    ("source", "settle"),
    [
        (S.ACCEPTED, Settle(OURS, S.SUCCEEDED, Execution.NOT_STARTED, 1.0, result=OK)),
        (S.ACCEPTED, Settle(OURS, S.CANCELLED, Execution.STARTED, 1.0)),
        (S.RUNNING, Settle(OURS, S.FAILED, Execution.NOT_STARTED, 1.0)),
        (S.RUNNING, Settle(OURS, S.SUCCEEDED, Execution.STARTED, 1.0)),  # no result
        (S.RUNNING, Settle(OURS, S.FAILED, Execution.STARTED, 1.0, result=OK)),
        (S.RUNNING, Settle(OURS, S.TOMBSTONED, Execution.STARTED, 1.0)),
    ],
)
def test_untrue_settlements_are_refused(source: RowState, settle: Settle) -> None:
    """R7/C14: a settlement that contradicts the row (execution, result) is refused."""
    with pytest.raises(IllegalRowEvent):
        apply(row(source), settle)


def test_settling_an_interrupted_launch_of_an_earlier_incarnation_is_refused() -> None:
    """§6: a row an earlier incarnation launched can no longer settle here."""
    with pytest.raises(IllegalRowEvent):
        apply(row(S.RUNNING, incarnation=OLD), SUCCEED)


@pytest.mark.rule("C14")
def test_never_launched_row_settles_not_started() -> None:
    """C14: a never-launched row settled as cancelled says NOT_STARTED."""
    done = apply(row(S.ACCEPTED), Settle(OURS, S.CANCELLED, Execution.NOT_STARTED, 4.0))
    assert (done.state, done.execution, done.settled) == (S.CANCELLED, Execution.NOT_STARTED, True)


@pytest.mark.rule("R9")
def test_release_drops_result_and_keeps_the_row() -> None:
    """R9: release drops the stored result; the dedupe row and digest stay."""
    done = apply(row(S.RUNNING), SUCCEED)
    released = apply(done, Release())
    assert released.released and released.result is None
    assert released.envelope_digest == "d" and released.state is S.SUCCEEDED


def test_fencing_token_only_grows() -> None:
    """§5: the highest fencing token seen is kept; a lower one is refused."""
    with pytest.raises(IllegalRowEvent):
        apply(row(S.RUNNING), RaiseFencingToken(2))
