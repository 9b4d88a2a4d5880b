"""Per-principal limits checked at submit (issue 9), pure.

Three limits, each optional, with a default for every principal and
overrides per principal:

- ``max_queued``: turns of the principal waiting QUEUED (accepted, not
  running yet) at most;
- ``max_in_flight``: turns of the principal not yet terminal at most
  (QUEUED included);
- ``submit_rate`` per second with a burst of ``submit_burst``: a token
  bucket, so a steady rate passes and a burst beyond it is refused.

A refusal names the limit and how long to wait before a retry can succeed:
for the rate that is exact (when the next token arrives); for the counts it
is a hint (``count_retry_after``), since only turns finishing can free room.
A retried submit of an already accepted turn is never refused (the shell
checks the idempotency key before refusing), and a refused submit stores
nothing.

The clock is a monotonic float passed in by the shell.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator_svc.core.model import OpState

LIMIT_NAMES = ("max_queued", "max_in_flight", "submit_rate", "submit_burst", "weight")


@dataclass(frozen=True)
class PrincipalLimits:
    max_queued: int | None = None
    max_in_flight: int | None = None
    submit_rate: float | None = None
    submit_burst: int | None = None
    # Share of dispatches while backlogged (core.fair_queue), not a quota.
    weight: float = 1.0

    @property
    def burst(self) -> float:
        if self.submit_burst is not None:
            return float(self.submit_burst)
        return max(1.0, self.submit_rate or 1.0)


@dataclass(frozen=True)
class QuotaRefusal:
    limit: str  # "max_queued" | "max_in_flight" | "submit_rate"
    allowed: float
    current: float
    retry_after: float  # seconds

    @property
    def message(self) -> str:
        if self.limit == "submit_rate":
            return (
                f"submit rate above {self.allowed:g}/s for this principal; "
                f"retry in {self.retry_after:.3f}s"
            )
        what = "QUEUED" if self.limit == "max_queued" else "not yet terminal"
        return (
            f"this principal already has {self.current:g} turns {what} "
            f"(limit {self.allowed:g}); retry when some finish"
        )


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class Quotas:
    default: PrincipalLimits = field(default_factory=PrincipalLimits)
    per_principal: Mapping[str, PrincipalLimits] = field(default_factory=dict)
    count_retry_after: float = 1.0
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def limits_of(self, principal: str) -> PrincipalLimits:
        return self.per_principal.get(principal, self.default)

    def weight_of(self, principal: str) -> float:
        return self.limits_of(principal).weight

    def admit(
        self, principal: str, now: float, *, queued: int, in_flight: int
    ) -> QuotaRefusal | None:
        """Check every limit; on success take one submit token. Nothing is
        taken on a refusal."""
        limits = self.limits_of(principal)
        if limits.max_queued is not None and queued >= limits.max_queued:
            return QuotaRefusal("max_queued", limits.max_queued, queued, self.count_retry_after)
        if limits.max_in_flight is not None and in_flight >= limits.max_in_flight:
            return QuotaRefusal(
                "max_in_flight", limits.max_in_flight, in_flight, self.count_retry_after
            )
        if limits.submit_rate is None:
            return None
        bucket = self._refilled(principal, limits, now)
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / limits.submit_rate
            return QuotaRefusal("submit_rate", limits.submit_rate, limits.submit_rate, wait)
        bucket.tokens -= 1.0
        return None

    def refund(self, principal: str) -> None:
        """A submit that took a token turned out to be a retry of an accepted turn."""
        bucket = self._buckets.get(principal)
        limits = self.limits_of(principal)
        if bucket is not None:
            bucket.tokens = min(limits.burst, bucket.tokens + 1.0)

    def _refilled(self, principal: str, limits: PrincipalLimits, now: float) -> _Bucket:
        rate = limits.submit_rate or 0.0
        bucket = self._buckets.get(principal)
        if bucket is None:
            bucket = self._buckets[principal] = _Bucket(limits.burst, now)
        elapsed = max(0.0, now - bucket.at)
        bucket.tokens = min(limits.burst, bucket.tokens + elapsed * rate)
        bucket.at = now
        return bucket


def parse_limits(spec: str, base: PrincipalLimits | None = None) -> PrincipalLimits:
    """``key=value[,key=value...]`` with keys from LIMIT_NAMES -> PrincipalLimits.

    Raises ValueError with a message naming the bad part."""
    counts: dict[str, int] = {}
    rates: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, raw = part.strip().partition("=")
        if not sep or key not in LIMIT_NAMES:
            raise ValueError(f"{part!r}: expected one of {', '.join(LIMIT_NAMES)} as key=value")
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"{key}: {raw!r} is not a number") from None
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"{key}: must be a positive number, got {raw!r}")
        if key in ("max_queued", "max_in_flight", "submit_burst"):
            if number != int(number):
                raise ValueError(f"{key}: must be a whole number, got {raw!r}")
            counts[key] = int(number)
        else:
            rates[key] = number
    base = base or PrincipalLimits()
    return PrincipalLimits(
        max_queued=counts.get("max_queued", base.max_queued),
        max_in_flight=counts.get("max_in_flight", base.max_in_flight),
        submit_rate=rates.get("submit_rate", base.submit_rate),
        submit_burst=counts.get("submit_burst", base.submit_burst),
        weight=rates.get("weight", base.weight),
    )


class Occupancy:
    """Turns per principal not yet terminal, and how many of them are QUEUED
    (what ``Quotas.admit`` compares with the limits)."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[str, bool]] = {}
        self.queued: collections.Counter[str] = collections.Counter()
        self.in_flight: collections.Counter[str] = collections.Counter()

    def note(self, operation_id: str, principal: str, state: OpState) -> None:
        self.forget(operation_id)
        if state.terminal:
            return
        queued = state is OpState.QUEUED
        self._of[operation_id] = (principal, queued)
        self.in_flight[principal] += 1
        if queued:
            self.queued[principal] += 1

    def forget(self, operation_id: str) -> None:
        known = self._of.pop(operation_id, None)
        if known is None:
            return
        principal, queued = known
        _decrement(self.in_flight, principal)
        if queued:
            _decrement(self.queued, principal)


def _decrement(counter: collections.Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
