"""How many calls may be open at once: per principal, and streams for the whole server (issue 11).

Without these, one principal's thousand open watch streams slowed every other
principal's calls 4-10x, and a burst of streams was shed by gRPC as a bare
CANCELLED. Three limits, each a count of calls in progress:

- ``calls_per_principal``: unary calls (SubmitTurn, Get/List/CancelOperation)
  one principal has open at once;
- ``streams_per_principal``: WatchOperation and SubmitAndWatch streams one
  principal has open at once;
- ``streams_total``: streams open on the whole coordinator, whoever opened
  them, checked before anything else about the call.

A call over a limit is refused at once, before it reads or writes anything:
RESOURCE_EXHAUSTED / ``CONCURRENCY_LIMIT`` with ErrorInfo ``limit`` (which
one) and ``max``, and a RetryInfo. The calls already open are unaffected.
Pure bookkeeping, no I/O: the servicer enters and leaves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from coordinator_svc.api.errors import ApiError
from coordinator_svc.config import CallLimitSettings
from turnwire.common.v1 import errors_pb2


class CallLimits:
    """Counts the calls in progress and refuses those over a limit."""

    def __init__(self, settings: CallLimitSettings | None = None) -> None:
        self.settings = settings or CallLimitSettings()
        self._calls: Counter[str] = Counter()
        self._streams: Counter[str] = Counter()
        self.streams_open = 0
        self.refused: Counter[str] = Counter()  # by limit name (tests, operators)

    def _refuse(self, limit: str, maximum: int, what: str) -> ApiError:
        self.refused[limit] += 1
        return ApiError(
            errors_pb2.ERROR_REASON_CONCURRENCY_LIMIT,
            f"too many {what} open at once ({limit}: at most {maximum}); retry when one has ended",
            retry_after=self.settings.retry_after_seconds,
            limit=limit,
            max=str(maximum),
        )

    @contextmanager
    def stream_slot(self) -> Iterator[None]:
        """A place among the server's open streams (before authentication)."""
        maximum = self.settings.streams_total
        if self.streams_open >= maximum:
            raise self._refuse("streams_total", maximum, "streams on this coordinator")
        self.streams_open += 1
        try:
            yield
        finally:
            self.streams_open -= 1

    @contextmanager
    def principal_stream(self, principal: str) -> Iterator[None]:
        with self._held(self._streams, principal, "streams_per_principal"):
            yield

    @contextmanager
    def principal_call(self, principal: str) -> Iterator[None]:
        with self._held(self._calls, principal, "calls_per_principal"):
            yield

    @contextmanager
    def _held(self, counts: Counter[str], principal: str, limit: str) -> Iterator[None]:
        maximum: int = getattr(self.settings, limit)
        if counts[principal] >= maximum:
            kind = "streams" if counts is self._streams else "calls"
            raise self._refuse(limit, maximum, f"{kind} of this principal")
        counts[principal] += 1
        try:
            yield
        finally:
            counts[principal] -= 1
            if counts[principal] <= 0:
                del counts[principal]  # no entry kept per principal ever seen

    def open_for(self, principal: str) -> tuple[int, int]:
        """(calls, streams) ``principal`` has open now (tests: nothing leaks)."""
        return self._calls[principal], self._streams[principal]
