"""Admission in one step (R2, R4, R5, §5, §6, C5): decision table and slot pools."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.admission import (
    AdmissionAction,
    DispatchFacts,
    SlotPools,
    decide_admission,
)
from runner_svc.core.model import (
    Execution,
    OperationRow,
    Refusal,
    RowState,
    RunnerRefusal,
    SlotKind,
    StopReason,
)
from runner_svc.core.witness import StoreOpening

OURS = "a" * 32
OLD = "b" * 32
# An older incarnation the store's chain cannot vouch for (§6 witness): its
# successor found its floor at or below the row's stamp.
UNVOUCHED = "c" * 32
# The chain, newest first: OLD handed over at a floor above every stamp here
# (stored rows carry stamp 0); UNVOUCHED handed over at floor 0.
OPENINGS = (
    StoreOpening(OURS, OLD, 1_000, 3.0),
    StoreOpening(OLD, UNVOUCHED, 0, 2.0),
)
FACTS = DispatchFacts("op", "digest", OURS, 5, SlotKind.WRITABLE)
NOW = 100.0


def stored(state: RowState, incarnation: str = OURS, **changes: object) -> OperationRow:
    base = OperationRow(
        operation_id="op",
        state=state,
        execution=Execution.NOT_STARTED,
        incarnation_id=incarnation,
        sequence=1,
        fencing_token=5,
        attempt=1,
        kind=SlotKind.WRITABLE,
        envelope_digest="digest",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def pools(writable: int = 1, read_only: int = 1, used: int = 0) -> SlotPools:
    return SlotPools(
        {SlotKind.WRITABLE: writable, SlotKind.READ_ONLY: read_only},
        {SlotKind.WRITABLE: used, SlotKind.READ_ONLY: 0},
    )


# (name, facts, row, accepting, pools, expected action or refusal)
CASES = [
    ("new id admitted", FACTS, None, True, pools(), AdmissionAction.ADMIT),
    (
        "wrong incarnation",
        replace(FACTS, expected_incarnation_id=OLD),
        None,
        True,
        pools(),
        Refusal.INCARNATION_MISMATCH,
    ),
    (
        "empty incarnation",
        replace(FACTS, expected_incarnation_id=""),
        None,
        True,
        pools(),
        Refusal.INCARNATION_MISMATCH,
    ),
    (
        "known id is a duplicate",
        FACTS,
        stored(RowState.RUNNING),
        True,
        pools(used=1),
        AdmissionAction.DUPLICATE,
    ),
    (
        "duplicate even when closed",
        FACTS,
        stored(RowState.SUCCEEDED),
        False,
        pools(),
        AdmissionAction.DUPLICATE,
    ),
    (
        "known id, other digest",
        replace(FACTS, envelope_digest="other"),
        stored(RowState.RUNNING),
        True,
        pools(),
        Refusal.ENVELOPE_MISMATCH,
    ),
    (
        "tombstoned id",
        FACTS,
        stored(RowState.TOMBSTONED),
        True,
        pools(),
        Refusal.CANCELLED_BEFORE_DISPATCH,
    ),
    (
        "stale token",
        replace(FACTS, fencing_token=4),
        stored(RowState.RUNNING),
        True,
        pools(),
        Refusal.STALE_FENCING_TOKEN,
    ),
    ("closed runner", FACTS, None, False, pools(), Refusal.SHUTTING_DOWN),
    ("no writable slot", FACTS, None, True, pools(used=1), Refusal.NO_FREE_SLOT),
    (
        "read-only pool free while writable full",
        replace(FACTS, kind=SlotKind.READ_ONLY),
        None,
        True,
        pools(used=1),
        AdmissionAction.ADMIT,
    ),
    (
        "old accepted row is taken over",
        FACTS,
        stored(RowState.ACCEPTED, OLD),
        True,
        pools(),
        AdmissionAction.TAKE_OVER,
    ),
    (
        "take-over needs a slot",
        FACTS,
        stored(RowState.ACCEPTED, OLD),
        True,
        pools(used=1),
        Refusal.NO_FREE_SLOT,
    ),
    (
        "take-over needs admission open",
        FACTS,
        stored(RowState.ACCEPTED, OLD),
        False,
        pools(),
        Refusal.SHUTTING_DOWN,
    ),
    (
        # Regression (issue 8.1): a restored store shows "accepted" for a turn
        # that went on to run; only the chain's witness licenses a take-over.
        "old accepted row the chain cannot vouch for is not taken over",
        FACTS,
        stored(RowState.ACCEPTED, UNVOUCHED),
        True,
        pools(),
        AdmissionAction.DUPLICATE,
    ),
    (
        "old cancelled accepted row is not taken over",
        FACTS,
        stored(RowState.ACCEPTED, OLD, stop_reason=StopReason.CANCEL),
        True,
        pools(),
        AdmissionAction.DUPLICATE,
    ),
    (
        # Regression (simulation): a runner killed mid-drain left the row
        # stopped by its own shutdown; it was replayed to MAX_ATTEMPTS_EXCEEDED.
        "old row stopped only by its process's shutdown is taken over",
        FACTS,
        stored(RowState.ACCEPTED, OLD, stop_reason=StopReason.SHUTDOWN),
        True,
        pools(),
        AdmissionAction.TAKE_OVER,
    ),
    (
        "own accepted row is a duplicate",
        FACTS,
        stored(RowState.ACCEPTED),
        True,
        pools(),
        AdmissionAction.DUPLICATE,
    ),
    (
        "old running row is a duplicate (never re-run)",
        FACTS,
        stored(RowState.RUNNING, OLD),
        True,
        pools(),
        AdmissionAction.DUPLICATE,
    ),
]


@pytest.mark.rule("R2", "R4", "R5", "C5")
@pytest.mark.parametrize(
    ("facts", "row", "accepting", "slot_pools", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_admission_decision_table(
    facts: DispatchFacts,
    row: OperationRow | None,
    accepting: bool,
    slot_pools: SlotPools,
    expected: object,
) -> None:
    """R2/R4/R5/§5/§6/C5: one decision per situation; a refusal reserves nothing."""
    before = dict(slot_pools.in_use)
    if isinstance(expected, Refusal):
        with pytest.raises(RunnerRefusal) as caught:
            decide_admission(
                facts,
                row,
                incarnation_id=OURS,
                accepting=accepting,
                pools=slot_pools,
                now=NOW,
                openings=OPENINGS,
            )
        assert caught.value.refusal is expected
    else:
        decision = decide_admission(
            facts,
            row,
            incarnation_id=OURS,
            accepting=accepting,
            pools=slot_pools,
            now=NOW,
            openings=OPENINGS,
        )
        assert decision.action is expected
    assert slot_pools.in_use == before


def test_higher_token_on_a_duplicate_is_remembered() -> None:
    """§5: a duplicate with a higher token asks the shell to raise the stored token."""
    decision = decide_admission(
        replace(FACTS, fencing_token=9),
        stored(RowState.RUNNING),
        incarnation_id=OURS,
        accepting=True,
        pools=pools(),
        now=NOW,
    )
    assert decision.action is AdmissionAction.DUPLICATE and decision.raise_fencing_token


@pytest.mark.rule("R3", "R4")
@pytest.mark.parametrize(
    ("deadline", "row", "with_intent"),
    [
        (None, None, True),
        (NOW + 0.001, None, True),
        (NOW, None, False),
        (NOW - 5.0, None, False),
        (None, stored(RowState.ACCEPTED, OLD), True),
        (None, stored(RowState.ACCEPTED, OLD, stop_reason=StopReason.SHUTDOWN), True),
        (NOW - 5.0, stored(RowState.ACCEPTED, OLD), False),
    ],
    ids=[
        "new, no deadline",
        "new, deadline to come",
        "new, deadline now",
        "new, deadline passed",
        "take-over",
        "take-over of a row its process's shutdown stopped",
        "take-over, deadline passed",
    ],
)
def test_a_turn_that_launches_at_once_is_admitted_with_its_launch_intent(
    deadline: float | None, row: OperationRow | None, with_intent: bool
) -> None:
    """R3/R4 (issue 27): an admission (new row or §6 take-over) whose launch check
    would pass writes the launch intent in its own commit; one whose deadline has
    passed is admitted alone, and its launch check settles it unlaunched."""
    decision = decide_admission(
        replace(FACTS, deadline=deadline),
        row,
        incarnation_id=OURS,
        accepting=True,
        pools=pools(),
        now=NOW,
        openings=OPENINGS,
    )
    assert decision.action is not AdmissionAction.DUPLICATE
    assert decision.with_intent is with_intent


def test_a_duplicate_writes_no_launch_intent() -> None:
    """R2: a known id starts nothing, so its answer carries no intent to write."""
    decision = decide_admission(
        FACTS,
        stored(RowState.ACCEPTED),
        incarnation_id=OURS,
        accepting=True,
        pools=pools(),
        now=NOW,
    )
    assert decision.action is AdmissionAction.DUPLICATE and not decision.with_intent


@pytest.mark.rule("R4")
def test_slot_pools_are_separate_and_bounded() -> None:
    """R4: each kind has its own pool; reserving past the size is refused."""
    slots = pools(writable=1, read_only=2)
    slots.reserve(SlotKind.WRITABLE)
    with pytest.raises(RunnerRefusal):
        slots.reserve(SlotKind.WRITABLE)
    slots.reserve(SlotKind.READ_ONLY)
    slots.reserve(SlotKind.READ_ONLY)
    assert not slots.has_free(SlotKind.READ_ONLY)
    slots.free(SlotKind.WRITABLE)
    assert slots.has_free(SlotKind.WRITABLE)


@pytest.mark.rule("R6")
def test_freeing_an_unreserved_slot_is_a_bug() -> None:
    """R6: a slot is freed once per reservation; a second free is refused."""
    slots = pools()
    with pytest.raises(ValueError):
        slots.free(SlotKind.WRITABLE)
