"""The runner service's settings and the values its calls take and give
(runner_svc.service re-exports them: import from either)."""

from __future__ import annotations

from dataclasses import dataclass, field

from runner_svc.core.model import OperationRow, SlotKind
from runner_svc.core.witness import StoreOpening
from runner_svc.storage.async_store import FEED_CAPACITY
from turnwire.output_stream import StreamLimits

# The longest a Dispatch reply is held for its turn to settle (issue 10): a
# coordinator asking for more gets this; the settle grace it waits anyway is
# 50 ms by default.
MAX_REPLY_HOLD_SECONDS = 1.0

# Refusal messages go on the wire: the store's own text (paths, SQL, driver
# exception names) stays in the log.
STORE_UNREADABLE = "the runner store could not be read; nothing was decided"
STORE_UNWRITTEN = "the runner store could not be written; nothing changed"


@dataclass(frozen=True)
class ServiceSettings:
    writable_slots: int = 4
    read_only_slots: int = 4
    # How long an executor asked to stop may take before it is killed (R10).
    cancel_grace_seconds: float = 5.0
    # How often an idle WatchOperations stream sends a heartbeat.
    heartbeat_seconds: float = 2.0
    # Changed operations a WatchOperations stream holds for a slow consumer;
    # past it the stream catches up from the store instead (memory bounded).
    watch_buffer: int = FEED_CAPACITY
    # §6 witness (runner_svc.core.witness): the admission floor trails this
    # runner's clock by this much, so a Dispatch stamped up to this long ago is
    # still admitted; an older one is refused DISPATCH_STALE, a definite refusal
    # the coordinator answers with a fresh attempt (C6c). Short on purpose
    # (W2a): after a SIGKILL, a later incarnation can vouch only for Dispatches
    # stamped before the dead one's last floor, so this window (plus the
    # interval below) is how long before a crash a Dispatch becomes UNKNOWN
    # instead of provably absent. A late Dispatch costs a re-send, never safety.
    admission_window_seconds: float = 7.0
    # How often the floor is raised (and written): it trails the clock by the
    # window plus at most this (a clean stop seals the floor and vouches for all).
    floor_interval_seconds: float = 0.25
    # Streamed output (R13): chunk size, per-turn budget, per-operation and
    # per-runner buffers (turnwire.output_stream), and how long a settled
    # turn's chunks stay readable.
    stream_limits: StreamLimits = field(default_factory=StreamLimits)
    stream_keep_seconds: float = 60.0


@dataclass(frozen=True)
class DispatchCall:
    operation_id: str
    envelope: bytes
    envelope_digest: str
    expected_incarnation_id: str
    fencing_token: int
    attempt: int
    # §6 witness: microseconds on the coordinator's clock, recorded with the attempt.
    dispatch_stamp: int = 0
    # How long the reply to an admitted Dispatch may wait for the turn to settle
    # (capped by MAX_REPLY_HOLD_SECONDS); 0: reply once the row is written.
    reply_hold_seconds: float = 0.0
    # Releases carried on the call: (operation_id, expected_incarnation_id, token).
    releases: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class OperationView:
    """A row as replies show it (restart view applied) plus in-memory R7 state."""

    row: OperationRow
    result_not_saved: bool = False


@dataclass(frozen=True)
class DispatchOutcome:
    view: OperationView
    duplicate: bool


@dataclass(frozen=True)
class CancelOutcome:
    view: OperationView
    tombstoned: bool


@dataclass(frozen=True)
class PoolUse:
    kind: SlotKind
    size: int
    in_use: int


@dataclass(frozen=True)
class RunnerInfo:
    incarnation_id: str
    store_id: str
    durable: bool
    pools: tuple[PoolUse, ...]
    accepting: bool
    started_at: float
    held_result_not_saved: int
    version: str
    openings: tuple[StoreOpening, ...] = ()
    # (name, kind) of each executor served, by name (R14).
    executors: tuple[tuple[str, str], ...] = ()
