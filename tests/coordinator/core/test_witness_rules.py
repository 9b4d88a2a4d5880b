"""§6 witness (issue 8.1): a durable store speaks for an earlier incarnation's
attempts only when its chain of openings vouches for them.

The regression: a runner store restored from a backup taken before the turn
was submitted kept its store_id (same inode), answered "absent" on the new
incarnation, and the coordinator replayed a turn that had already run.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.events import PreflightAnswer
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.core.runner_view import RunnerOp
from coordinator_svc.core.runner_view import RunnerOpState as R
from coordinator_svc.core.witness import StoreOpen, attempt_vouched, floor_after, store_vouches
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    OTHER_STORE,
    STORE,
    answer,
    attempt,
    bound,
    ctx,
    row,
    step,
)
from turnwire.ids import dispatch_stamp

INC_C = "c" * 32
# attempt() records sent_at = NOW - 5 s.
SENT = dispatch_stamp(NOW - timedelta(seconds=5))
# The store was put back to a state from before the attempt reached INC_A:
# the opening after INC_A found INC_A's floor below the attempt's stamp.
ROLLED_BACK = (StoreOpen(INC_B, INC_A, SENT - 1_000_000),)
# INC_A's floor had passed the stamp (it lived on past the admission window).
PASSED = (StoreOpen(INC_B, INC_A, SENT + 1),)
# Restored from before INC_A ever opened it: the chain never shows INC_A.
NEVER_SAW_A = (StoreOpen(INC_B, INC_C, 2**63 - 1),)


def restarted(op: RunnerOp | None, opens: tuple[StoreOpen, ...]) -> PreflightAnswer:
    return answer(op, incarnation=INC_B, durable=True, opens=opens)


@pytest.mark.rule("W4", "C8")
def test_rolled_back_store_absence_is_incarnation_changed_not_a_replay() -> None:
    """§6.1 W4, C8 (regression 8.1): "absent" from a store whose chain cannot vouch licenses
    no replay: TIMED_OUT INCARNATION_CHANGED, UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    for opens in (ROLLED_BACK, NEVER_SAW_A, ()):
        record, decision = step(before, restarted(None, opens), ctx(attempt(1)))
        assert not any(isinstance(c, cmd.Dispatch) for c in decision.commands)
        assert record.state is OpState.TIMED_OUT
        assert record.error_reason == "INCARNATION_CHANGED"
        assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("W4", "C8")
def test_vouched_store_absence_still_licenses_the_replay() -> None:
    """§6.1 W4, C8: a floor above the stamp proves the Dispatch never arrived: replay to INC_B."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, decision = step(before, restarted(None, PASSED), ctx(attempt(1)))
    assert record.state is OpState.DISPATCHING and record.incarnation_id == INC_B
    assert [c for c in decision.commands if isinstance(c, cmd.Dispatch)]


@pytest.mark.rule("W4")
def test_rolled_back_store_accepted_row_is_never_sent_again() -> None:
    """§6.1 W4: a restored store may show "accepted" for a turn that went on to run: no re-send."""
    old = row(R.ACCEPTED, None, INC_A)
    accepted = attempt(1, AttemptOutcome.ACCEPTED)
    record, decision = step(bound(OpState.RUNNING), restarted(old, ROLLED_BACK), ctx(accepted))
    assert not any(isinstance(c, cmd.Dispatch) for c in decision.commands)
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason == "INCARNATION_CHANGED"
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("W4", "C9")
def test_rolled_back_store_losing_an_acknowledged_row_is_not_a_protocol_error() -> None:
    """§6.1 W4, C9: a row that vanished with the store going back in time is ambiguity, not a
    PROTOCOL_ERROR."""
    accepted = attempt(1, AttemptOutcome.ACCEPTED)
    record, _ = step(bound(OpState.RUNNING), restarted(None, ROLLED_BACK), ctx(accepted))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.UNKNOWN


@pytest.mark.rule("W4", "C10")
def test_rolled_back_store_settled_row_is_still_adopted() -> None:
    """§6.1 W4, C10: a settlement is final in every history of the store: its result is kept."""
    done = row(R.SUCCEEDED, Execution.STARTED, INC_A, result=b"kept")
    accepted = attempt(1, AttemptOutcome.ACCEPTED)
    record, _ = step(bound(OpState.RUNNING), restarted(done, ROLLED_BACK), ctx(accepted))
    assert record.state is OpState.SUCCEEDED and record.result == b"kept"
    assert record.execution is Execution.STARTED


@pytest.mark.rule("C14", "W4")
def test_rolled_back_store_never_proves_not_started() -> None:
    """C14, §6.1 W4: a settled not-started row covers INC_B only; INC_A's attempt stays unknown."""
    stopped = row(R.CANCELLED, Execution.NOT_STARTED, INC_B)
    record, _ = step(
        bound(OpState.DISPATCH_UNKNOWN), restarted(stopped, ROLLED_BACK), ctx(attempt(1))
    )
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("W4")
def test_witness_needs_every_earlier_attempt_vouched() -> None:
    """§6.1 W4: one unvouched attempt (to INC_C, which the chain never shows) spoils the proof."""
    first = attempt(1, incarnation=INC_C)
    second = attempt(2, incarnation=INC_A)
    assert not store_vouches((first, second), incarnation_id=INC_B, store_id=STORE, openings=PASSED)
    refused = attempt(1, AttemptOutcome.REFUSED, incarnation=INC_C)
    assert store_vouches((refused, second), incarnation_id=INC_B, store_id=STORE, openings=PASSED)
    own = attempt(3, incarnation=INC_B)
    assert store_vouches((own,), incarnation_id=INC_B, store_id=STORE, openings=())


@pytest.mark.rule("W4")
def test_attempt_to_another_store_is_never_vouched() -> None:
    """§6.1 W4: an attempt recorded against another store_id is not this store's to vouch for."""
    elsewhere = attempt(1, store=OTHER_STORE)
    assert not attempt_vouched(elsewhere, STORE, PASSED)
    assert attempt_vouched(attempt(1), STORE, PASSED)


@pytest.mark.rule("W3")
def test_floor_after_reads_the_successor_opening() -> None:
    """§6.1 W3: the floor that counts is the one the next opening found."""
    chain = (StoreOpen(INC_C, INC_B, 7), StoreOpen(INC_B, INC_A, 5), StoreOpen(INC_A, "", 0))
    assert floor_after(chain, INC_A) == 5
    assert floor_after(chain, INC_B) == 7
    assert floor_after(chain, INC_C) is None


@pytest.mark.rule("R3", "W4")
def test_rolled_back_store_confirmed_start_is_still_started() -> None:
    """R3, §6.1 W4: a confirmed start in any store state is true: TIMED_OUT INTERRUPTED, STARTED."""
    stuck = row(R.RUNNING, Execution.STARTED, INC_A)
    accepted = attempt(1, AttemptOutcome.ACCEPTED)
    record, _ = step(bound(OpState.RUNNING), restarted(stuck, ROLLED_BACK), ctx(accepted))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "INTERRUPTED"
    assert record.execution is Execution.STARTED
