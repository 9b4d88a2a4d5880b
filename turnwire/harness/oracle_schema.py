"""What the oracle reads, by name: tables, columns, state names, edges, proof phrases.

The oracle must not import the services (``turnwire`` sits below them, see
``.importlinter``), so the names it reads are copied here, in one place, as
data. They are the contract between the oracle and:

- the coordinator journal: ``coordinator_svc/storage/tables.py`` (tables and
  columns), ``coordinator_svc/core/model.py`` (state, execution, outcome and
  policy names), ``coordinator_svc/core/edges.py`` (the legal edges);
- the runner store: ``runner_svc/storage/tables.py`` and
  ``runner_svc/core/model.py``;
- the DISPATCHING event detail written by ``coordinator_svc/core/attempting.py``
  (``"attempt N -> runner/incarnation: <why>"``), whose ``why`` comes from
  ``coordinator_svc/core/decide_preflight.py``.

``tests/harness/test_schema_drift.py`` imports the services and fails as soon
as any of this drifts from them.
"""

from __future__ import annotations

from turnwire import vocabulary

# --- the coordinator journal --------------------------------------------------

JOURNAL_OPERATIONS = "operations"
JOURNAL_ATTEMPTS = "attempts"
JOURNAL_EVENTS = "events"

OPERATION_COLUMNS = (
    "operation_id",
    "state",
    "execution",
    "replay_policy",
    "max_attempts",
    "attempt_count",
    "runner",
    "incarnation_id",
    "store_id",
    "result",
    "error_reason",
    "error_message",
    "last_event_sequence",
)
ATTEMPT_COLUMNS = (
    "operation_id",
    "number",
    "runner",
    "incarnation_id",
    "store_id",
    "sent_at",
    "outcome",
    "detail",
)
EVENT_COLUMNS = (
    "operation_id",
    "sequence",
    "from_state",
    "to_state",
    "execution",
    "at",
    "reason",
    "detail",
)

# --- the runner store -----------------------------------------------------------

RUNNER_META = "runner_store_meta"
RUNNER_META_COLUMNS = ("store_id",)
RUNNER_OPERATIONS = "runner_operations"
RUNNER_ROW_COLUMNS = (
    "operation_id",
    "state",
    "execution",
    "incarnation_id",
    "attempt",
    "result_output",
    "result_content_type",
    "result_metadata",
    "error_reason",
    "released",
    "accepted_at",
    "started_at",
    "settled_at",
)

# --- names of values (stored as strings in both databases) --------------------

_STATE = vocabulary.OperationState
QUEUED = _STATE.QUEUED.value
DISPATCHING = _STATE.DISPATCHING.value
DISPATCH_UNKNOWN = _STATE.DISPATCH_UNKNOWN.value
RUNNING = _STATE.RUNNING.value
CANCELLING = _STATE.CANCELLING.value
SUCCEEDED = _STATE.SUCCEEDED.value
FAILED = _STATE.FAILED.value
CANCELLED = _STATE.CANCELLED.value
TIMED_OUT = _STATE.TIMED_OUT.value
PROTOCOL_ERROR = _STATE.PROTOCOL_ERROR.value
REJECTED = _STATE.REJECTED.value

# The terminal set is the vocabulary's (declared once), as plain strings.
TERMINAL_STATES = frozenset(state.value for state in vocabulary.TERMINAL_STATES)
ALL_STATES = frozenset({QUEUED, DISPATCHING, DISPATCH_UNKNOWN, RUNNING, CANCELLING}) | (
    TERMINAL_STATES
)

NOT_STARTED = "NOT_STARTED"
STARTED = "STARTED"
UNKNOWN = "UNKNOWN"

REFUSED = "REFUSED"  # attempt outcome: a definite, typed refusal (C6)
SAFE = "SAFE"  # replay policy: the submitter allowed several executions

RUNNER_TOMBSTONED = "TOMBSTONED"
RUNNER_SUCCEEDED = "SUCCEEDED"
# Runner row states that claim an outcome of an execution (not a tombstone).
RUNNER_OUTCOMES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})
# Settled states a never-launched row may end in (R5, R6): it provably did not start.
RUNNER_NEVER_LAUNCHED_OUTCOMES = frozenset({"CANCELLED", "TIMED_OUT"})

# --- the legal edges of PROTOCOL.md §2 (coordinator_svc/core/edges.py) ----------

_REACHABLE_FROM_DISPATCH_UNKNOWN = frozenset({DISPATCHING, RUNNING, CANCELLING}) | TERMINAL_STATES
LEGAL_EDGES: dict[str, frozenset[str]] = {
    QUEUED: frozenset({DISPATCHING, RUNNING}) | TERMINAL_STATES,
    DISPATCHING: frozenset({RUNNING, QUEUED, DISPATCH_UNKNOWN}) | TERMINAL_STATES,
    DISPATCH_UNKNOWN: _REACHABLE_FROM_DISPATCH_UNKNOWN,
    RUNNING: frozenset(
        {CANCELLING, SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, PROTOCOL_ERROR, DISPATCH_UNKNOWN}
    ),
    CANCELLING: frozenset({SUCCEEDED, FAILED, CANCELLED, TIMED_OUT, PROTOCOL_ERROR}),
    **{terminal: frozenset() for terminal in TERMINAL_STATES},
}
# The first event of an operation goes from nothing to one of these (C1).
FIRST_STATES = frozenset({QUEUED, REJECTED})

# --- the DISPATCHING event that commits an attempt (C4, C13) ---------------------


def dispatch_detail_prefix(number: int) -> str:
    """How the DISPATCHING event detail for attempt ``number`` begins."""
    return f"attempt {number} -> "


# Phrases in that detail that name a proof that no earlier attempt can still
# execute (§8 invariant 4). A preflight on the bound incarnation that found
# the operation absent (C8), or the first preflight (C2); a §6 replay after a
# same-store absence is written with the first phrase as well.
ABSENCE_PROOF_PHRASES = (
    "absent on the bound incarnation",
    "preflight: absent",
)
# A SAFE replay to a new incarnation needs no proof: the submitter said so.
SAFE_REPLAY_PHRASE = "SAFE replay to a new incarnation"
