"""What a caller sees when a fault fires, and the log line an operator reads.

Shared by the proxy and the interceptor so both inject the same statuses.
Injected failures are plain UNAVAILABLE (or DEADLINE_EXCEEDED) without any
ErrorInfo: to the caller they must look exactly like a transport failure,
which the protocol treats as "unknown" (PROTOCOL.md C7).
"""

from __future__ import annotations

import logging

import grpc

from turnwire.faults.rules import Action, Decision, operation_ids
from turnwire.observability.logs import turn_extra

LOGGER = logging.getLogger("turnwire.faults")

FAULT_CODE = grpc.StatusCode.UNAVAILABLE

_DETAILS = {
    Action.DROP_REQUEST: "fault injected: request dropped",
    Action.DROP_RESPONSE: "fault injected: response dropped",
    Action.RESET: "connection reset (fault injected)",
    Action.BLACKHOLE: "fault injected: blackholed",
}


def fault_details(decision: Decision) -> str:
    """The status details for a call the fault failed (names the rule)."""
    text = _DETAILS.get(decision.action, f"fault injected: {decision.action.value}")
    return f"{text}, rule {decision.rule_id}"


def log_fault(decision: Decision, method: str, request: bytes, outcome: str) -> None:
    """One line per injected fault: rule, action, method, operation id, outcome."""
    ids = operation_ids(request)
    op = ",".join(ids) if ids else "-"
    LOGGER.warning(
        "fault rule=%d action=%s method=%s op=%s: %s",
        decision.rule_id,
        decision.action.value,
        method,
        op,
        outcome,
        # One turn's call: its line carries operation_id (docs/LOGS.md).
        extra=turn_extra(ids[0]) if len(ids) == 1 else None,
    )
