"""The fault table both the proxy and the interceptor tests run.

Each row: rules installed, the caller's timeout, the status the caller must
see, how many Dispatch calls must ARRIVE at the upstream, and a fragment of
the status details (None: not checked).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
OK = grpc.StatusCode.OK


@dataclass(frozen=True)
class Case:
    name: str
    rules: tuple[str, ...]
    code: grpc.StatusCode
    arrived: int
    timeout: float = 5.0
    details: str | None = None


DISPATCH_CASES = [
    Case("no rule: forwarded", (), OK, 1),
    Case("rule for another method: forwarded", ("drop-request method=Cancel",), OK, 1),
    Case(
        "drop-request: never arrives, UNAVAILABLE",
        ("drop-request method=Dispatch",),
        UNAVAILABLE,
        0,
        details="request dropped",
    ),
    Case(
        "drop-response: arrives, UNAVAILABLE",
        ("drop-response method=Dispatch",),
        UNAVAILABLE,
        1,
        details="response dropped",
    ),
    Case(
        "reset: never arrives, connection reset",
        ("reset method=Dispatch",),
        UNAVAILABLE,
        0,
        details="connection reset",
    ),
    Case(
        "reset at=response: arrives, connection reset",
        ("reset method=Dispatch at=response",),
        UNAVAILABLE,
        1,
        details="connection reset",
    ),
    Case("delay-request within deadline: forwarded", ("delay-request ms=50",), OK, 1),
    Case(
        "delay-request past deadline: DEADLINE_EXCEEDED, never arrives",
        ("delay-request ms=3000",),
        DEADLINE,
        0,
        timeout=0.3,
    ),
    Case(
        "delay-response past deadline: arrives, DEADLINE_EXCEEDED",
        ("delay-response ms=3000",),
        DEADLINE,
        1,
        timeout=0.3,
    ),
    Case(
        "blackhole without duration: DEADLINE_EXCEEDED, never arrives",
        ("blackhole",),
        DEADLINE,
        0,
        timeout=0.3,
    ),
    Case(
        "blackhole shorter than the deadline: UNAVAILABLE, never arrives",
        ("blackhole for=200ms",),
        UNAVAILABLE,
        0,
        details="blackholed",
    ),
]
