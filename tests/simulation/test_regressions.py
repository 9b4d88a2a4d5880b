"""Failing schedules found by the simulator, kept as scripted regressions.

Each is the shrunk label script of the seed that found it (replayed without
the generator, so later generator changes do not move it). All were found
before issue 27 and replay with ``AS_FOUND`` (its runners' 7 s admission
window, C2a without a freshness bound): under today's defaults the late
Dispatch seed 9904 is about is refused stale, and the message ids the scripts
name belong to other calls.
"""

from __future__ import annotations

import pytest

from tests.simulation.sim_retention import SimRetention
from tests.simulation.simulator import BEFORE_ISSUE_27, RunnerSpec, Setup, SimConfig, replay

AS_FOUND = BEFORE_ISSUE_27

# Seed 9904 (generator of 2026-11-29), shrunk from 27 steps to 8. The status
# call asked while the Dispatch was still on the wire answers "absent"; the
# Dispatch lands, the watch stream reports the row, the coordinator moves to
# RUNNING (acknowledged); then the older "absent" answer arrives, still for
# attempt 1, and is read as ACKNOWLEDGED_OPERATION_DISAPPEARED.
SEED_9904_SETUP = Setup(
    runners=(RunnerSpec("r1", durable=False, slots=2), RunnerSpec("r2", durable=True, slots=2)),
    operations=4,
)
SEED_9904_STEPS = [
    "submit PROBE_FIRST 3 WRITABLE",
    "tick op5 r1",  # QUEUED: preflight #1 -> r1
    "deliver m1",  # r1/inc1: absent
    "deliver m2",  # -> attempt 1 written ahead, Dispatch #2 sent (m3)
    "advance 6.0",  # the Dispatch call is abandoned: DISPATCH_UNKNOWN, preflight #3 (m4)
    "deliver m4 fail",  # r1/inc1 reads the status: absent (reply m5 in flight)
    "deliver m3",  # the abandoned Dispatch lands: accepted (row ACCEPTED)
    "watch op5@r1",  # the watch stream reports the row; the heal delivers it before m5
]


@pytest.mark.rule("C8a", "C9")
def test_seed_9904_stale_status_answer_after_watch_ack() -> None:
    """C8a/C9: an absence read before the watch acknowledged the op is not a disappearance."""
    result = replay(SEED_9904_SETUP, SEED_9904_STEPS, SimConfig(**AS_FOUND))
    assert result.violation is None, result.report()


@pytest.mark.rule("C8a")
def test_seed_9904_fixed_by_discarding_answers_older_than_the_last_transition() -> None:
    """C8a: discarding a status answer asked before the operation's latest transition fixes 9904."""
    result = replay(
        SEED_9904_SETUP, SEED_9904_STEPS, SimConfig(stale_status_guard=True, **AS_FOUND)
    )
    assert result.violation is None, result.report()
    assert result.coverage["final:SUCCEEDED"] + result.coverage["final:FAILED"] >= 1


# Seed 1213 with --duplicate-requests, shrunk from 22 steps to 15. The network
# delivers one Dispatch twice: the first copy is accepted by r3/inc5 and its
# executor starts; r3 restarts; the second copy is refused by inc9
# (INCARNATION_MISMATCH), and that refusal answers the call. The coordinator
# closes attempt 1 as REFUSED and goes back to QUEUED, NOT_STARTED, while an
# executor ran. The protocol assumes each Dispatch call is delivered at most
# once (no gRPC retry policy, no retrying proxy on the Dispatch path).
SEED_1213_SETUP = Setup(
    runners=(
        RunnerSpec("r1", durable=False, slots=2),
        RunnerSpec("r2", durable=True, slots=2),
        RunnerSpec("r3", durable=True, slots=1),
    ),
    operations=2,
)
SEED_1213_STEPS = [
    "submit PROBE_FIRST 3 WRITABLE",
    "tick op7 r1",
    "tick op7 r3",
    "submit PROBE_FIRST 8 WRITABLE",
    "advance 12.0",
    "tick op8 r3",
    "deliver m1",
    "advance 6.0",
    "tick op7 r3",
    "deliver m5",
    "deliver m6",
    "dup m7",
    "deliver m7",
    "launch op7@r3 start",
    "drop m9",
]


@pytest.mark.rule("C6")
def test_seed_1213_c6_needs_each_dispatch_delivered_at_most_once() -> None:
    """C6: a refusal proves only that its own copy was not accepted; a duplicated Dispatch request
    defeats it, so Dispatch must never be retried by the transport (the assumption, pinned)."""
    result = replay(
        SEED_1213_SETUP, SEED_1213_STEPS, SimConfig(duplicate_requests=True, **AS_FOUND)
    )
    assert result.violation is not None
    assert result.violation.startswith(("[4 proof]", "[3 execution]", "[1 at most once]"))


# Scripted (not found by a seed): r1 accepts the Dispatch, begins a drain (R8
# records SHUTDOWN on the unlaunched row) and is killed before the launch task
# settles the row. The new incarnation keeps the durable store: the row stays
# ACCEPTED by the dead incarnation with a stop reason, so it is never taken
# over (§6) and never launched, yet nothing settles it. Every replay is
# answered "duplicate, ACCEPTED" and the operation burns all its attempts.
# Since issue 27 only a row admitted alone is left ACCEPTED, so r1 first runs
# the release before it (a rolling upgrade: this release must still re-admit
# what that one left); on this release the same steps leave a launch intent.
DRAIN_CRASH_SETUP = Setup(
    (RunnerSpec("r1", durable=True, slots=1, intent_apart=True),), operations=1
)
DRAIN_CRASH_THIS_RELEASE = Setup((RunnerSpec("r1", durable=True, slots=1),), operations=1)
DRAIN_CRASH_STEPS = [
    "submit PROBE_FIRST 3 WRITABLE",
    "tick op3 r1",
    "deliver m1",
    "deliver m2",  # attempt 1 written ahead, Dispatch sent
    "deliver m3",  # accepted by r1/inc1: row ACCEPTED
    "drain r1",  # R8: SHUTDOWN recorded on the unlaunched row
    "restart r1 kept",  # killed mid-drain; inc4 on the same durable store
    "deliver m4",  # the Dispatch reply: RUNNING
]


@pytest.mark.rule("R8", "C14")
def test_drained_row_of_a_dead_incarnation_is_settled_not_replayed_to_exhaustion() -> None:
    """R8/§6/C14: a row stopped only by its dead process's shutdown is re-admitted and
    runs, instead of being replayed to MAX_ATTEMPTS_EXCEEDED."""
    result = replay(DRAIN_CRASH_SETUP, DRAIN_CRASH_STEPS, SimConfig(**AS_FOUND))
    assert result.violation is None, result.report()
    assert result.coverage["reason:MAX_ATTEMPTS_EXCEEDED"] == 0
    assert result.coverage["final:TIMED_OUT"] == 0
    assert result.coverage["dispatch:take_over"] == 1


@pytest.mark.rule("R3", "C14")
def test_a_row_launched_by_its_admission_and_killed_before_its_start_ends_unknown() -> None:
    """R3/§6/C14 (issue 27): the same steps on this release: the admission wrote the
    launch intent, so the killed process leaves no row "accepted, never launched" but
    an intent: it reads INTERRUPTED, UNKNOWN, and the turn ends TIMED_OUT, INTERRUPTED,
    UNKNOWN once: never replayed, never run, never claimed NOT_STARTED."""
    result = replay(DRAIN_CRASH_THIS_RELEASE, DRAIN_CRASH_STEPS, SimConfig())
    assert result.violation is None, result.report()
    assert result.coverage["restart:unstarted_admission_intent"] == 1
    assert result.coverage["dispatch:take_over"] == 0 and result.coverage["executions"] == 0
    assert result.coverage["reason:INTERRUPTED"] == 1
    assert result.coverage["final_execution:UNKNOWN"] == 1


# Seed 4468 (issue 9's scheduler, generator of 2026-12-01), shrunk from 52
# steps to 21. flood's op6 waits for the one slot and is cancelled; flood's
# next turn (op8) is then tagged as if op6 had been served, so p2 gets three
# grants while flood waits (the fair queue charged a principal for a turn
# that left unserved).
SEED_4468_SETUP = Setup((RunnerSpec("r1", durable=True, slots=1),), operations=7, scheduled=True)
SEED_4468_STEPS = [
    "submit PROBE_FIRST 3 WRITABLE p2",
    "submit NEVER_AUTOMATIC 4 WRITABLE flood",
    "tick op4 * @c1",
    "drop m1",
    "submit PROBE_FIRST 5 WRITABLE p1",
    "submit PROBE_FIRST 1 WRITABLE flood",
    "advance 2.5",
    "tick op5 * @c1",
    "drop m2",
    "submit NEVER_AUTOMATIC 5 WRITABLE p1",
    "submit PROBE_FIRST 8 WRITABLE flood",
    "tick op6 * @c1",  # waits for the slot
    "submit PROBE_FIRST 2 WRITABLE p2",
    "tick op3 * @c1",
    "cancel op6 @c1",  # leaves unserved
    "tick op8 * @c1",
    "cancel op5 @c1",
    "tick op9 * @c1",
    "advance 1.0",
    "advance 1.0",
    "cancel op8 @c1",
]


@pytest.mark.rule("C6a")
def test_seed_4468_a_turn_cancelled_while_waiting_costs_its_principal_no_share() -> None:
    """C6a (fair grants): no principal gets more than its lead while another waits,
    whatever the other had queued and cancelled before."""
    result = replay(SEED_4468_SETUP, SEED_4468_STEPS, SimConfig(**AS_FOUND))
    assert result.violation is None, result.report()
    assert result.coverage["final:CANCELLED"] >= 1


# Seed 44198 (generator of 2026-12-01), shrunk from 70 steps to 35: flood got
# one grant while p2 waited, then the coordinator restarted twice, and each
# new process's scheduler, starting empty, served flood's turn held first. The
# fair order is the scheduler's memory (C6a: nothing is written for a waiting
# turn), so its bound holds within one coordinator process; the checker
# starts its counts again at a restart.
SEED_44198_SETUP = Setup((RunnerSpec("r1", durable=True, slots=1),), operations=6, scheduled=True)
SEED_44198_STEPS = [
    "submit PROBE_FIRST 2 WRITABLE p2",
    "tick op3 * @c1",
    "submit PROBE_FIRST 8 WRITABLE p2",
    "tick op4 * @c1",
    "deliver m1",
    "submit PROBE_FIRST 3 WRITABLE flood",
    "advance 35.0",
    "tick op5 * @c1",
    "deliver m3",
    "deliver m4",
    "restart r1 wiped",
    "submit SAFE 5 READ_ONLY p1",
    "tick op8 * @c1",
    "submit NEVER_AUTOMATIC 5 WRITABLE flood",
    "drop m6",
    "submit NEVER_AUTOMATIC 8 WRITABLE flood",
    "deliver m5",
    "crash @c1",
    "tick op10 * @c1",
    "tick op8 - @c1",
    "tick op5 - @c1",
    "tick op5 - @c1",
    "tick op8 - @c1",
    "tick op5 - @c1",
    "advance 35.0",
    "deliver m15",
    "deliver m13",
    "deliver m17",
    "deliver m18",
    "deliver m20",
    "tick op3 * @c1",
    "deliver m19",
    "deliver m21",
    "deliver m22",
    "crash @c1",
]


@pytest.mark.rule("C6a")
def test_seed_44198_the_fair_order_starts_again_with_a_new_coordinator_process() -> None:
    """C6a: the lead bound is per scheduler lifetime; a restart is not counted as a lead."""
    result = replay(SEED_44198_SETUP, SEED_44198_STEPS, SimConfig(**AS_FOUND))
    assert result.violation is None, result.report()
    assert result.coverage["coordinator_restart"] == 2


# Seed 39534 (generator of 2026-12-04, retention on), shrunk from 70 steps to 48.
# Two replicas; c2 gives op6 up (C8b: its Cancel tombstones it), then freezes
# holding a second Cancel; c1 takes op6 over (token 3) and cancels it too. The
# runner's eager retention then prunes the settled tombstone and drops its key
# (K4), and with them the highest token seen. c2 wakes, sends its Cancel with
# token 2: the runner knows no such id and tombstones it afresh. Harmless (a
# tombstone runs nothing; op6 is terminal; c2's lease is gone, so its answer is
# discarded), but the fencing check read the token before retention ran and
# called it "[7 fencing] ... token 2 after seeing 3".
SEED_39534_SETUP = Setup(
    runners=(RunnerSpec("r1", durable=True, slots=2),), operations=4, replicas=2, skew=4.0
)
SEED_39534_STEPS = [
    "submit PROBE_FIRST 8 READ_ONLY",
    "tick op3 r1 @c1",
    "deliver m1",
    "deliver m2",
    "deliver m3",
    "advance 6.0",
    "deliver m5",
    "deliver m6",
    "submit PROBE_FIRST 4 WRITABLE",
    "launch op3@r1 confirm",
    "advance 35.0",
    "tick op3 - @c1",
    "advance 2.5",
    "tick op4 r1 @c1",
    "advance 2.5",
    "tick op3 - @c1",
    "deliver m7 !pause-after@1",
    "deliver m8",
    "submit NEVER_AUTOMATIC 1 WRITABLE",
    "deliver m11 !pause-before@1",
    "launch op4@r1 confirm",
    "submit NEVER_AUTOMATIC 5 WRITABLE",
    "advance 35.0 !pause-before@2",
    "tick op3 - @c2",
    "tick op6 r1 @c2",
    "deliver m13",
    "tick op5 r1 @c2",
    "deliver m15 !crash@2",
    "deliver m14",
    "deliver m16",
    "advance 12.0",
    "deliver m19 !pause-after@1",
    "tick op4 - @c2",
    "deliver m21",
    "deliver m17",
    "deliver m23",
    "deliver m20",
    "deliver m26",
    "deliver m27 !pause-after@1",
    "cancel op6 @c2 !pause-after@1",
    "advance 35.0",
    "watch op4@r1 @c1",
    "resume @c1",
    "deliver m9",
    "tick op6 - @c1",
    "deliver m31",
    "advance 12.0",
    "advance 2.5",
]


@pytest.mark.rule("K4", "O4")
def test_seed_39534_a_token_forgotten_with_its_key_is_not_a_fencing_slip() -> None:
    """K4: the fencing check (§8.7) counts the tokens the runner still holds; a key
    retention dropped takes its highest token with it."""
    # Under the 7 s key window it was found with (K4's 60 s would drop no key here).
    retention = SimRetention(key_window_us=7_000_000)
    config = SimConfig(retention=retention, **AS_FOUND)
    result = replay(SEED_39534_SETUP, SEED_39534_STEPS, config)
    assert result.violation is None, result.report()
    assert result.coverage["retention:key_dropped"] >= 1
