"""The legal edges of PROTOCOL.md §2, in one table.

Everything not in this table is refused and changes nothing. A terminal
state has no outgoing edge (C10). ``assert_legal`` is called by every writer
before a state change reaches the journal.
"""

from __future__ import annotations

from coordinator_svc.core.model import TERMINAL_STATES, OpState

_S = OpState

LEGAL_EDGES: dict[OpState, frozenset[OpState]] = {
    # RUNNING and terminal states are reachable from QUEUED only by
    # reconciling a preflight answer (C3).
    _S.QUEUED: frozenset({_S.DISPATCHING, _S.RUNNING, *TERMINAL_STATES}),
    # A cancel asked for while DISPATCHING is stored and acted on once the
    # attempt resolves (C11), so there is no DISPATCHING -> CANCELLING edge.
    _S.DISPATCHING: frozenset({_S.RUNNING, _S.QUEUED, _S.DISPATCH_UNKNOWN, *TERMINAL_STATES}),
    _S.DISPATCH_UNKNOWN: frozenset({_S.DISPATCHING, _S.RUNNING, _S.CANCELLING, *TERMINAL_STATES}),
    _S.RUNNING: frozenset(
        {
            _S.CANCELLING,
            _S.SUCCEEDED,
            _S.FAILED,
            _S.CANCELLED,
            _S.TIMED_OUT,
            _S.PROTOCOL_ERROR,
            _S.DISPATCH_UNKNOWN,  # §6 only: re-admission by a new incarnation
        }
    ),
    _S.CANCELLING: frozenset(
        {_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT, _S.PROTOCOL_ERROR}
    ),
    **{terminal: frozenset() for terminal in TERMINAL_STATES},
}


class IllegalTransition(ValueError):
    """A state change the protocol does not allow; nothing was written."""

    def __init__(self, operation_id: str, source: OpState, target: OpState) -> None:
        super().__init__(f"{operation_id}: illegal transition {source} -> {target}")
        self.operation_id = operation_id
        self.source = source
        self.target = target


def is_legal(source: OpState, target: OpState) -> bool:
    return target in LEGAL_EDGES[source]


def assert_legal(operation_id: str, source: OpState, target: OpState) -> None:
    if not is_legal(source, target):
        raise IllegalTransition(operation_id, source, target)
