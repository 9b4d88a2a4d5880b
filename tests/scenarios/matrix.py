"""The scenario matrix as data: every (fault, phase) cell, how it is injected,
and the outcomes PROTOCOL.md allows for it, or why the cell is N/A.

Phases, read from the coordinator -> runner path of one operation:

    before send      after the coordinator decided to dispatch, before the
                     Dispatch is on the wire: the C2 preflight and the C4
                     write-ahead (crash point coordinator.after_attempt_commit)
    in flight        the Dispatch call is on the wire, the runner has not
                     committed anything
    after commit     the runner committed its dedupe row (R3; with its launch
                     intent, R4); its Dispatch reply has not been recorded by
                     the coordinator
    execution        the executor is running; the operation is RUNNING
    after execution  the executor finished; its result has not reached the
                     coordinator (the watch stream / a status poll carries it)
    reconcile        the operation is DISPATCH_UNKNOWN and the C8 status calls
                     are resolving it (GetOperationStatus)
    cancel           a cancel was requested; the Cancel call is outstanding
                     (CANCELLING)

Every proxy rule sits on runner-1's fault proxy (turnwire.faults rule text).
Scenario turns are writable and runner-1 is the only runner serving writable
turns (runner-2 serves read-only ones), so the coordinator cannot route around
the fault; each scenario still asserts its operation was bound to runner-1 and
that every rule it installed fired.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.scenarios.cells import (
    CANCELLED,
    NOT_STARTED,
    STARTED,
    STARTED_OR_NOT,
    STARTED_OR_UNKNOWN,
    SUCCEEDED,
    UNKNOWN,
    Cell,
    Fault,
    Injection,
    Legal,
    Need,
    Phase,
    cancelled_running,
    changed_incarnation,
    interrupted,
    ran_once,
    reconciled_once,
    replayed_once,
)
from tests.scenarios.restore import Restore

# Pass the first status call (the QUEUED preflight, C2) and fault the rest.
# Lets the first status call through: the first attempt's preflight, so every
# cell using it runs with first_preflight=True (else C2a may skip that preflight
# when the coordinator counts runner-1's watch as live, and the call it lets
# through is the first reconcile call instead).
PASS_FIRST_STATUS = "delay-request method=GetOperationStatus ms=1 count=1"
BLOCK_WATCH = "drop-request method=WatchOperations"
DISPATCH_REPLY_LOST = "drop-response method=Dispatch count=1"
HOLD_STATUS = "drop-request method=GetOperationStatus"
HOLD_CANCEL = "drop-request method=Cancel"
SLOW = 3000  # ms: long enough to kill, cancel or restart something meanwhile
# ms: outlasts a coordinator's SIGKILL and restart on a loaded machine, so the
# Cancel sent again after it still finds the turn running (it ends it at once,
# so the length costs nothing). On PostgreSQL a restart first watches the dead
# process's leases for 0.8 x TTL (§5 O6, 8 s at the default TTL): 10 s was
# outlasted there once in CI (stop 22: SUCCEEDED, the Cancel came too late).
OUTLASTS_A_RESTART = 30_000


def _proxy(rules: tuple[str, ...], how: str, **kw: object) -> Injection:
    return Injection("proxy", rules, how=how, **kw)  # type: ignore[arg-type]


def _na(fault: Fault, phase: Phase, reason: str) -> Cell:
    return Cell(fault, phase, not_applicable=reason)


_WATCH_ONLY = (
    "during execution the Dispatch has been answered and no request or reply of this "
    "operation that the coordinator needs is on the wire: the watch only repeats that the "
    "row is running (the coordinator is RUNNING already); the report that matters, the "
    "settled row, is the after-execution cell"
)
_REPLY_AFTER_COMMIT = (
    "a Dispatch reply exists only after the runner committed its dedupe row (R3), so "
    "losing or delaying it is the same moment as the in-flight cell"
)


def _transport_cells() -> list[Cell]:
    F, P = Fault, Phase
    cells = [
        # --- before send: the C2 preflight on the first dispatch (C2a off) ----------
        Cell(F.REQUEST_DROPPED, P.BEFORE_SEND,
             _proxy(("drop-request method=GetOperationStatus count=1",),
                    "the first preflight (GetOperationStatus) never reaches the runner",
                    first_preflight=True),
             ran_once("C2: no Dispatch without a preflight answer; retried, then sent once"),
             pins="C2"),
        Cell(F.RESPONSE_DROPPED, P.BEFORE_SEND,
             _proxy(("drop-response method=GetOperationStatus count=1",),
                    "the first preflight's answer is lost", first_preflight=True),
             ran_once("C2: a lost status answer proves nothing; retried, then sent once"),
             pins="C2"),
        Cell(F.RESPONSE_DELAYED, P.BEFORE_SEND,
             _proxy(("delay-response method=GetOperationStatus ms=1000 count=1",),
                    "the first preflight's answer comes after its 0.5 s deadline",
                    first_preflight=True),
             ran_once("C2: a late status answer is discarded (C8a); retried, sent once"),
             pins="C2, C8a"),
        Cell(F.CONNECTION_RESET, P.BEFORE_SEND,
             _proxy(("reset method=GetOperationStatus count=1",),
                    "the first preflight's connection is reset", first_preflight=True),
             ran_once("C2: retried, then sent once"), pins="C2"),
        # --- in flight: the Dispatch call ------------------------------------------
        Cell(F.REQUEST_DROPPED, P.IN_FLIGHT,
             _proxy(("drop-request method=Dispatch count=1",),
                    "the first Dispatch never reaches the runner"),
             replayed_once("C7 unknown, C8 absent on the bound incarnation -> exact replay"),
             pins="C7, C8"),
        Cell(F.RESPONSE_DROPPED, P.IN_FLIGHT,
             _proxy((DISPATCH_REPLY_LOST,), "the runner accepts; its Dispatch reply is lost"),
             reconciled_once("C7 unknown, C8 present -> adopted, reconciled without resend"),
             pins="C7, C8"),
        Cell(F.RESPONSE_DELAYED, P.IN_FLIGHT,
             _proxy(("delay-response method=Dispatch ms=1500 count=1",),
                    "the Dispatch reply comes after the 1 s dispatch deadline (the turn "
                    "runs 1.5 s, so no settled report can overtake the reply)",
                    sleep_ms=1500),
             reconciled_once("C7: a timeout is not proof; C8 present -> adopted"),
             pins="C7, C8, C8a"),
        Cell(F.CONNECTION_RESET, P.IN_FLIGHT,
             _proxy(("reset method=Dispatch count=1",),
                    "the Dispatch connection is reset before the runner sees it"),
             replayed_once("C7 unknown, C8 absent -> exact replay"), pins="C7, C8"),
        # --- after the runner's commit ----------------------------------------------
        _na(F.REQUEST_DROPPED, P.AFTER_COMMIT,
            "a dropped request never reaches the runner, so it cannot commit anything"),
        _na(F.RESPONSE_DROPPED, P.AFTER_COMMIT, _REPLY_AFTER_COMMIT),
        _na(F.RESPONSE_DELAYED, P.AFTER_COMMIT, _REPLY_AFTER_COMMIT),
        Cell(F.CONNECTION_RESET, P.AFTER_COMMIT,
             _proxy(("reset method=Dispatch at=response count=1",),
                    "the runner commits and replies; the connection is reset on the reply"),
             reconciled_once("C7 unknown, C8 present -> adopted without resend"),
             pins="C7, C8"),
        # --- during execution ---------------------------------------------------------
        *(_na(f, P.EXECUTION, _WATCH_ONLY)
          for f in (F.REQUEST_DROPPED, F.RESPONSE_DROPPED, F.RESPONSE_DELAYED,
                    F.CONNECTION_RESET)),
        # --- after execution, before the result reaches the coordinator ----------------
        Cell(F.REQUEST_DROPPED, P.AFTER_EXECUTION,
             _proxy((BLOCK_WATCH,), "the watch stream (WatchOperations) never opens",
                    reopen_watch=True),
             ran_once("C9: the fallback status poll carries the result"), pins="C9"),
        Cell(F.RESPONSE_DROPPED, P.AFTER_EXECUTION,
             _proxy(("drop-response method=WatchOperations",),
                    "every watch stream is cut at its first report", reopen_watch=True),
             ran_once("C9: the fallback status poll carries the result"), pins="C9"),
        Cell(F.RESPONSE_DELAYED, P.AFTER_EXECUTION,
             _proxy(("delay-response method=WatchOperations ms=3000",),
                    "watch reports are held 3 s, longer than the 1 s fallback status poll",
                    reopen_watch=True),
             ran_once("C9 poll settles it; the late report is a repeat, a no-op (C10)"),
             pins="C9, C10"),
        Cell(F.CONNECTION_RESET, P.AFTER_EXECUTION,
             _proxy(("reset method=WatchOperations at=response",),
                    "every watch stream is reset at its first report", reopen_watch=True),
             ran_once("C9: the fallback status poll carries the result"), pins="C9"),
    ]  # fmt: skip
    for fault, rule, how in (
        (F.REQUEST_DROPPED, "drop-request method=GetOperationStatus count=2",
         "two reconcile status calls never reach the runner"),
        (F.RESPONSE_DROPPED, "drop-response method=GetOperationStatus count=2",
         "two reconcile status answers are lost"),
        (F.RESPONSE_DELAYED, "delay-response method=GetOperationStatus ms=1000 count=2",
         "two reconcile status answers come after their 0.5 s deadline"),
        (F.CONNECTION_RESET, "reset method=GetOperationStatus count=2",
         "two reconcile status calls are reset"),
    ):  # fmt: skip
        cells.append(
            Cell(
                fault,
                P.RECONCILE,
                _proxy(
                    (DISPATCH_REPLY_LOST, PASS_FIRST_STATUS, rule, BLOCK_WATCH),
                    f"Dispatch reply lost (DISPATCH_UNKNOWN), watch blocked; {how}",
                    reopen_watch=True,
                    first_preflight=True,
                ),
                reconciled_once("C8: an unanswered status call is retried until answered"),
                pins="C8",
            )
        )
    for fault, rule, how in (
        (F.REQUEST_DROPPED, "drop-request method=Cancel count=1", "the Cancel is lost"),
        (F.RESPONSE_DROPPED, "drop-response method=Cancel count=1",
         "the runner stops the turn; the Cancel reply is lost"),
        (F.RESPONSE_DELAYED, "delay-response method=Cancel ms=1000 count=1",
         "the Cancel reply comes after its 0.5 s deadline"),
        (F.CONNECTION_RESET, "reset method=Cancel count=1", "the Cancel connection is reset"),
    ):  # fmt: skip
        cells.append(
            Cell(
                fault,
                P.CANCEL,
                Injection("cancel_running", (rule,), sleep_ms=SLOW, how=how),
                cancelled_running("C11: the runner settles the cancel; first stop reason wins"),
                pins="C11, R6",
            )
        )
    return cells


def _restart_cells(fault: Fault) -> list[Cell]:
    """Runner SIGKILL + restart, store kept (§6) or wiped (C8/C9)."""
    P = Phase
    wipe = fault is Fault.RUNNER_WIPED
    store = "store wiped" if wipe else "store kept"

    def inj(driver: str, how: str, **kw: object) -> Injection:
        return Injection(driver, wipe_store=wipe, how=f"{how}; restarted, {store}", **kw)  # type: ignore[arg-type]

    gone_unknown = changed_incarnation(
        "C8: the store that knew it is gone: ambiguous", UNKNOWN, (0, 0)
    )
    ran_gone = changed_incarnation(
        "C8/C9: it ran, the store that knew is gone", STARTED_OR_UNKNOWN, (1, 1)
    )
    return [
        Cell(fault, P.BEFORE_SEND,
             inj("runner_down_before_send", "runner-1 SIGKILLed; the operation is submitted "
                 "and its preflight finds the runner unreachable"),
             ran_once("C2: no Dispatch without a preflight answer; then sent once"),
             pins="C2, C4"),
        Cell(fault, P.IN_FLIGHT,
             inj("runner_kill_in_flight", "the Dispatch is held 800 ms in the proxy "
                 "(delay-request); runner-1 is SIGKILLed meanwhile, the Dispatch hits "
                 "a dead port", rules=("delay-request method=Dispatch ms=800 count=1",)),
             gone_unknown if wipe else changed_incarnation(
                 "§6 witness: the runner died before its admission floor passed the "
                 "Dispatch's stamp, so its store cannot prove the Dispatch never arrived "
                 "(a restored copy would look the same): ambiguous, never replayed",
                 UNKNOWN, (0, 0)),
             pins="C8" if wipe else "§6 witness, C8"),
        Cell(fault, P.AFTER_COMMIT,
             inj("runner_crash_point", "runner-1 armed with runner.after_dedupe_commit",
                 crash_point="runner.after_dedupe_commit"),
             gone_unknown if wipe else interrupted(
                 "R3/§6: the turn launches at once, so the admission's write carried its "
                 "launch intent (R4): the dead incarnation's row reads INTERRUPTED, UNKNOWN, "
                 "adopted without vouching (W4), never sent again (a row admitted alone and "
                 "never launched would need the §6 witness: see the unit tests)",
                 UNKNOWN, 0),
             pins="C8" if wipe else "§6, R3"),
        Cell(fault, P.EXECUTION,
             inj("runner_kill_running", "runner-1 SIGKILLed while the executor runs "
                 "(its start is in the ledger)", sleep_ms=SLOW),
             ran_gone if wipe else interrupted(
                 "§6: a confirmed start that never settled is TIMED_OUT, STARTED", STARTED, 1),
             pins="C9" if wipe else "§6, R3"),
        *([] if wipe else [Cell(fault, P.EXECUTION,
             inj("runner_crash_point", "runner-1 armed with runner.after_launch_intent",
                 crash_point="runner.after_launch_intent"),
             interrupted("R3/§6: a launch intent without a confirmation is UNKNOWN",
                         UNKNOWN, 0),
             variant="launch_intent", pins="§6, R3, C14")]),
        Cell(fault, P.AFTER_EXECUTION,
             inj("runner_crash_point", "runner-1 armed with runner.after_executor_finished",
                 crash_point="runner.after_executor_finished"),
             ran_gone if wipe else interrupted(
                 "R7/§6: the result was never saved: TIMED_OUT, STARTED, never a made-up "
                 "result", STARTED, 1),
             pins="C9" if wipe else "R7, §6"),
        Cell(fault, P.RECONCILE,
             inj("reconcile_runner_restart", "Dispatch reply lost, reconcile status calls "
                 "and the watch held; the turn settles on runner-1, which is SIGKILLed",
                 rules=(DISPATCH_REPLY_LOST, PASS_FIRST_STATUS, HOLD_STATUS, BLOCK_WATCH),
                 reopen_watch=True, first_preflight=True),
             changed_incarnation("C8: different incarnation and store: ambiguous even "
                                 "though it ran", UNKNOWN, (1, 1)) if wipe else
             reconciled_once("§6: a finished result in the same durable store is adopted"),
             pins="C8" if wipe else "§6, C8"),
        Cell(fault, P.CANCEL,
             inj("cancelling_then_runner_restart", "the Cancel is held (CANCELLING) while "
                 "runner-1 is SIGKILLed during execution", rules=(HOLD_CANCEL,),
                 sleep_ms=SLOW),
             ran_gone if wipe else interrupted(
                 "§6: a confirmed start that never settled is TIMED_OUT, STARTED", STARTED, 1),
             pins="C11, C9" if wipe else "C11, §6"),
    ]  # fmt: skip


def _restored_cells() -> list[Cell]:
    """Issue 8.1: runner-1 SIGKILLed and started on a store put back to a backup
    taken before the turn was submitted, every way an operator might restore it."""
    F, P = Fault.RUNNER_RESTORED, Phase
    ran_then_forgotten = changed_incarnation(
        "§6 witness: the restored store has no row for a turn that ran; its chain shows "
        "the dead incarnation's floor below the Dispatch's stamp (or it is another store), "
        "so its silence proves nothing: ambiguous, never run again",
        UNKNOWN,
        (1, 1),
    )
    cells = [
        Cell(
            F,
            P.RECONCILE,
            Injection(
                "restore_after_settle",
                (DISPATCH_REPLY_LOST, PASS_FIRST_STATUS, HOLD_STATUS, BLOCK_WATCH),
                reopen_watch=True,
                first_preflight=True,
                restore=how.value,
                sleep_ms=SLOW,
                how=f"backup before the turn; Dispatch reply lost, status calls and "
                f"the watch held; the 3 s turn settles; runner-1 SIGKILLed and "
                f"restarted on the backup ({how.value})",
            ),
            ran_then_forgotten,
            variant="" if how is Restore.COPY_IN_PLACE else how.value,
            pins="§6 witness (issue 8.1)",
        )
        for how in Restore
    ]
    same_as_kept = (
        "a backup from before the turn holds nothing of it, so restoring it here leaves the "
        "store exactly as in the runner_sigkill cell of this phase (the row the dead "
        "incarnation may have written is simply not there), which expects the same honest "
        "ambiguity from the §6 witness; the restores that matter are those that take away "
        "a row that ran (reconcile, execution)"
    )
    cells += [
        _na(F, P.BEFORE_SEND, same_as_kept),
        _na(F, P.IN_FLIGHT, same_as_kept),
        _na(F, P.AFTER_COMMIT, same_as_kept),
        _na(
            F,
            P.AFTER_EXECUTION,
            "the settled-then-restored case is the reconcile cell (the result never reached "
            "the coordinator: the reply, the watch and the status calls were lost)",
        ),
        _na(
            F,
            P.CANCEL,
            "a Cancel adds nothing a restore could take away beyond the running row of the "
            "execution cell",
        ),
    ]
    cells.append(
        Cell(
            F,
            P.EXECUTION,
            Injection(
                "restore_while_running",
                restore=Restore.COPY_IN_PLACE.value,
                sleep_ms=SLOW,
                how="backup before the turn; runner-1 SIGKILLed while the executor "
                "runs and restarted on the backup (copy_in_place)",
            ),
            changed_incarnation(
                "§6 witness: the restored store has no row for the running turn and cannot "
                "vouch; STARTED if the coordinator had already recorded the confirmed start "
                "(issue 8.5), else UNKNOWN; never run again",
                STARTED_OR_UNKNOWN,
                (1, 1),
            ),
            pins="§6 witness, R3 (issue 8.1)",
        )
    )
    return cells  # fmt: skip


def _coordinator_cells() -> list[Cell]:
    F, P = Fault.COORDINATOR_SIGKILL, Phase
    return [
        Cell(F, P.BEFORE_SEND,
             Injection("coordinator_crash_point", crash_point="coordinator.after_attempt_commit",
                       how="coordinator armed with coordinator.after_attempt_commit; restarted"),
             replayed_once("C12: DISPATCHING -> DISPATCH_UNKNOWN; C8 absent -> exact replay"),
             pins="C4, C12, C8 (issue #3)"),
        Cell(F, P.IN_FLIGHT,
             Injection("coordinator_kill_in_flight",
                       ("delay-request method=Dispatch ms=800 count=1",),
                       how="the Dispatch is held 800 ms in the proxy; the coordinator is "
                           "SIGKILLed meanwhile and restarted"),
             Legal(SUCCEEDED, STARTED, (1, 2), 1, 1, Need.ALLOWED,
                   why="C12 + C8: adopted if the held Dispatch arrived, else replayed"),
             pins="C12, C8, R2"),
        Cell(F, P.AFTER_COMMIT,
             Injection("coordinator_crash_point", crash_point="coordinator.after_dispatch_send",
                       how="coordinator armed with coordinator.after_dispatch_send "
                           "(runner accepted, reply not recorded); restarted"),
             reconciled_once("C12: DISPATCH_UNKNOWN; C8 present -> adopted, no resend"),
             pins="C7, C12, C8 (issue #3)"),
        Cell(F, P.EXECUTION,
             Injection("coordinator_kill_running", sleep_ms=1500,
                       how="coordinator SIGKILLed while the executor runs; restarted"),
             ran_once("C12: RUNNING resumes; the watch or a poll brings the result"),
             pins="C12, C9"),
        Cell(F, P.AFTER_EXECUTION,
             Injection("coordinator_kill_settling", sleep_ms=600,
                       how="coordinator SIGKILLed during execution, restarted only after "
                           "the runner settled the turn"),
             ran_once("C12/C9: the settled row is adopted after the restart"),
             pins="C12, C9"),
        Cell(F, P.AFTER_EXECUTION,
             Injection("coordinator_crash_point", crash_point="coordinator.after_terminal_commit",
                       how="coordinator armed with coordinator.after_terminal_commit "
                           "(terminal written, Release not sent); restarted"),
             ran_once("C10: the terminal state stays; the Release is healed later"),
             variant="terminal_commit", pins="C10, R9"),
        Cell(F, P.RECONCILE,
             Injection("reconcile_coordinator_kill",
                       (DISPATCH_REPLY_LOST, PASS_FIRST_STATUS, HOLD_STATUS, BLOCK_WATCH),
                       reopen_watch=True, first_preflight=True,
                       how="Dispatch reply lost, reconcile status calls and the watch held; "
                           "the coordinator is SIGKILLed in DISPATCH_UNKNOWN and restarted"),
             reconciled_once("C12: DISPATCH_UNKNOWN resumes; C8 present -> adopted"),
             pins="C12, C8"),
        Cell(F, P.CANCEL,
             Injection("cancelling_then_coordinator_kill", (HOLD_CANCEL,),
                       sleep_ms=OUTLASTS_A_RESTART,
                       how="the Cancel is held (CANCELLING); the coordinator is SIGKILLed "
                           "and restarted"),
             cancelled_running("C12: CANCELLING resumes; the Cancel is sent again"),
             pins="C11, C12"),
    ]  # fmt: skip


def _cancel_cells() -> list[Cell]:
    F, P = Fault.CANCEL_RACING, Phase
    return [
        Cell(F, P.BEFORE_SEND,
             Injection("cancel_queued", (HOLD_STATUS,), first_preflight=True,
                       how="preflights held, so the operation stays QUEUED; cancelled"),
             Legal(CANCELLED, NOT_STARTED, (0, 0), 0, why="C11: QUEUED -> CANCELLED at once"),
             pins="C11, C14"),
        Cell(F, P.IN_FLIGHT,
             Injection("cancel_dispatching", ("delay-request method=Dispatch ms=800 count=1",),
                       sleep_ms=SLOW,
                       how="cancelled while the Dispatch is held in the proxy (DISPATCHING)"),
             Legal(CANCELLED, STARTED_OR_NOT, (1, 1), 1,
                   why="C11: stored while DISPATCHING, acted on when the attempt resolves"),
             pins="C11"),
        Cell(F, P.AFTER_COMMIT,
             Injection("cancel_dispatching", ("delay-response method=Dispatch ms=800 count=1",),
                       sleep_ms=SLOW,
                       how="cancelled while the runner's accepting reply is held in the proxy"),
             Legal(CANCELLED, STARTED_OR_NOT, (1, 1), 1,
                   why="C11: stored while DISPATCHING; Cancel sent once it is RUNNING"),
             pins="C11"),
        Cell(F, P.EXECUTION,
             Injection("cancel_running", sleep_ms=SLOW,
                       how="cancelled while the executor runs"),
             cancelled_running("C11/R6: the runner stops it; the first stop reason wins"),
             pins="C11, R6"),
        Cell(F, P.AFTER_EXECUTION,
             Injection("cancel_after_settle", (BLOCK_WATCH,), reopen_watch=True,
                       how="watch blocked; cancelled after the runner settled it, before "
                           "the coordinator learned the result"),
             ran_once("C11: a turn that finished first stays SUCCEEDED"),
             pins="C11"),
        Cell(F, P.RECONCILE,
             Injection("reconcile_cancel",
                       (DISPATCH_REPLY_LOST, PASS_FIRST_STATUS, HOLD_STATUS, BLOCK_WATCH),
                       reopen_watch=True, first_preflight=True, sleep_ms=SLOW,
                       how="cancelled in DISPATCH_UNKNOWN (reconcile status calls held)"),
             cancelled_running("C11: DISPATCH_UNKNOWN -> CANCELLING; the Cancel settles it"),
             pins="C11, C8a"),
        Cell(F, P.CANCEL,
             Injection("cancel_twice", ("drop-request method=Cancel count=1",), sleep_ms=SLOW,
                       how="three more cancels race while CANCELLING (first Cancel lost)"),
             cancelled_running("C11: the first stop reason wins; repeats change nothing"),
             pins="C11, R6"),
    ]  # fmt: skip


CELLS: tuple[Cell, ...] = (
    *_transport_cells(),
    *_restart_cells(Fault.RUNNER_SIGKILL),
    *_restart_cells(Fault.RUNNER_WIPED),
    *_restored_cells(),
    *_coordinator_cells(),
    *_cancel_cells(),
)

# The issue #3 done-when cells: the coordinator SIGKILLed while DISPATCHING.
ISSUE_3_CELLS = frozenset({"coordinator_sigkill-before_send", "coordinator_sigkill-after_commit"})


def applicable() -> list[Cell]:
    return [cell for cell in CELLS if cell.applicable]


def not_applicable() -> list[Cell]:
    return [cell for cell in CELLS if not cell.applicable]


@dataclass(frozen=True)
class Tally:
    applicable_cells: int
    na_cells: int
    scenarios: int


def tally() -> Tally:
    """How many of the 8 x 7 cells are applicable (variants count once)."""
    keys = {(c.fault, c.phase) for c in CELLS if c.applicable}
    return Tally(len(keys), len(not_applicable()), len(applicable()))


def render_markdown() -> str:
    """The matrix as a Markdown table (``python -m tests.scenarios.matrix``)."""
    lines = [
        "| fault | phase | injection | legal outcome | pins |",
        "|---|---|---|---|---|",
    ]
    for cell in CELLS:
        phase = f"{cell.phase} ({cell.variant})" if cell.variant else str(cell.phase)
        if cell.injection is None or cell.legal is None:
            lines.append(f"| {cell.fault} | {phase} | N/A | {cell.not_applicable} | |")
            continue
        inj = cell.injection
        how = inj.how
        if inj.rules:
            how += "; rules: " + "; ".join(f"`{rule}`" for rule in inj.rules)
        if inj.crash_point:
            how += f"; crash point `{inj.crash_point}`"
        legal = f"{cell.legal.describe()}. {cell.legal.why}"
        lines.append(f"| {cell.fault} | {phase} | {how} | {legal} | {cell.pins} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_markdown())
    print(f"\n{tally()}")
