"""The vocabulary of the scenario matrix: faults, phases, injections, legal outcomes."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Fault(enum.StrEnum):
    REQUEST_DROPPED = "request_dropped"
    RESPONSE_DROPPED = "response_dropped"
    RESPONSE_DELAYED = "response_delayed"  # past the caller's deadline
    CONNECTION_RESET = "connection_reset"
    RUNNER_SIGKILL = "runner_sigkill"  # restarted with its store kept
    RUNNER_WIPED = "runner_wiped"  # restarted with its store wiped
    RUNNER_RESTORED = "runner_restored"  # restarted on a store put back to a backup
    COORDINATOR_SIGKILL = "coordinator_sigkill"  # restarted
    CANCEL_RACING = "cancel_racing"


class Phase(enum.StrEnum):
    BEFORE_SEND = "before_send"
    IN_FLIGHT = "in_flight"
    AFTER_COMMIT = "after_commit"
    EXECUTION = "execution"
    AFTER_EXECUTION = "after_execution"
    RECONCILE = "reconcile"
    CANCEL = "cancel"


class Need(enum.StrEnum):
    """Whether a replay (or a reconcile without resend) must, may or must not happen."""

    REQUIRED = "required"
    ALLOWED = "allowed"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True)
class Legal:
    """The outcomes PROTOCOL.md allows for one cell's operation."""

    states: frozenset[str]
    executions: frozenset[str]
    attempts: tuple[int, int]  # inclusive bounds on attempt_count
    max_starts: int  # executor starts in the metered ledger (turnwire.ledger.count_starts)
    min_starts: int = 0
    replay: Need = Need.FORBIDDEN  # an attempt sent after one not definitely refused
    reconciled: Need = Need.ALLOWED  # DISPATCH_UNKNOWN resolved without a resend
    reasons: frozenset[str] | None = None  # allowed error reasons (None: not checked)
    why: str = ""

    def describe(self) -> str:
        attempts = self.attempts[0] if self.attempts[0] == self.attempts[1] else self.attempts
        return (
            f"{'|'.join(sorted(self.states))}, execution {'|'.join(sorted(self.executions))}, "
            f"attempt_count {attempts}, executions {self.min_starts}..{self.max_starts}, "
            f"replay {self.replay}, reconcile {self.reconciled}"
        )


@dataclass(frozen=True)
class Injection:
    """How a scenario drives its cell (``driver`` names a function in drivers.py)."""

    driver: str
    rules: tuple[str, ...] = ()  # installed on runner-1's proxy, in this order
    crash_point: str | None = None  # armed (TURNWIRE_CRASH_AT) in a fresh process
    wipe_store: bool = False
    # tests.scenarios.restore.Restore value: how the store is put back (issue 8.1).
    restore: str | None = None
    # Install the rules, then restart the coordinator (SIGTERM) so that its
    # watch streams re-open through them: a healthy stream opened earlier
    # would otherwise carry every report past the fault.
    reopen_watch: bool = False
    # Run the cell on a coordinator restarted with --preflight-first-attempts
    # (C2 without C2a), then restart it back: the fault is aimed at the first
    # preflight, which C2a otherwise skips when the runner's watch is live.
    first_preflight: bool = False
    sleep_ms: int = 300  # how long the metered executor runs
    how: str = ""


@dataclass(frozen=True)
class Cell:
    fault: Fault
    phase: Phase
    injection: Injection | None = None
    legal: Legal | None = None
    not_applicable: str = ""  # the reason, when the cell makes no sense
    variant: str = ""  # a second scenario for the same cell
    pins: str = ""  # the PROTOCOL rules this cell pins

    @property
    def applicable(self) -> bool:
        return self.injection is not None

    @property
    def name(self) -> str:
        suffix = f"-{self.variant}" if self.variant else ""
        return f"{self.fault}-{self.phase}{suffix}"


# --- outcome vocabulary -----------------------------------------------------------

SUCCEEDED = frozenset({"SUCCEEDED"})
CANCELLED = frozenset({"CANCELLED"})
TIMED_OUT = frozenset({"TIMED_OUT"})
STARTED = frozenset({"STARTED"})
NOT_STARTED = frozenset({"NOT_STARTED"})
UNKNOWN = frozenset({"UNKNOWN"})
STARTED_OR_UNKNOWN = frozenset({"STARTED", "UNKNOWN"})
STARTED_OR_NOT = frozenset({"STARTED", "NOT_STARTED"})


def ran_once(why: str, *, attempts: int = 1) -> Legal:
    """SUCCEEDED on the first attempt, one execution, no replay."""
    return Legal(SUCCEEDED, STARTED, (attempts, attempts), 1, 1, why=why)


def reconciled_once(why: str) -> Legal:
    """DISPATCH_UNKNOWN resolved by reading the runner: no resend, one execution."""
    return Legal(SUCCEEDED, STARTED, (1, 1), 1, 1, Need.FORBIDDEN, Need.REQUIRED, why=why)


def replayed_once(why: str, *, attempts: tuple[int, int] = (2, 2)) -> Legal:
    """Proven absent, replayed exactly: SUCCEEDED, one execution."""
    return Legal(SUCCEEDED, STARTED, attempts, 1, 1, Need.REQUIRED, why=why)


def cancelled_running(why: str, *, attempts: tuple[int, int] = (1, 1)) -> Legal:
    return Legal(CANCELLED, STARTED, attempts, 1, 1, why=why)


def changed_incarnation(why: str, executions: frozenset[str], starts: tuple[int, int]) -> Legal:
    """The store that knew the operation is gone: TIMED_OUT INCARNATION_CHANGED (C8/C9)."""
    return Legal(
        TIMED_OUT,
        executions,
        (1, 1),
        starts[1],
        starts[0],
        reasons=frozenset({"INCARNATION_CHANGED"}),
        why=why,
    )


def interrupted(why: str, executions: frozenset[str], starts: int) -> Legal:
    """§6: a confirmed (or intended) start that never settled: TIMED_OUT INTERRUPTED."""
    return Legal(
        TIMED_OUT,
        executions,
        (1, 1),
        starts,
        starts,
        reasons=frozenset({"INTERRUPTED"}),
        why=why,
    )
