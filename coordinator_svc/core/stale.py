"""C6c: a Dispatch the runner refused DISPATCH_STALE, and what it says about clocks.

A runner admits a Dispatch only if its stamp (the attempt's ``sent_at`` on this
coordinator's clock, W1) is not below its admission floor, which trails the
runner's clock by a short window (W2a: 0.25 s plus the floor's 0.25 s raise
interval by default). A refusal proves the attempt was never admitted (C6),
so it says nothing against the turn: the Dispatch took longer than the window
to arrive, or the runner's clock runs ahead of this one. The turn is sent
again with a fresh stamp, and the refusal does not count toward
``max_attempts`` (nothing ran). A run of them is bounded
(``STALE_STREAK_LIMIT``): a runner whose clock is far enough ahead refuses
every Dispatch, and re-sending for ever would hide that from its operator.

The refusal names the floor (ErrorInfo ``admission_floor``). With the stamp
and the time the call took on this coordinator's clock it bounds the skew
from below: the runner's clock read at least the floor when it refused, this
one at most ``now`` when the answer came, so the runner is at least
``floor - stamp - took`` ahead. Above zero that is proof of clock skew, and
the words say so; otherwise the Dispatch was late (or the skew is within the
window), which a re-send fixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from turnwire.ids import dispatch_stamp

# C6c: stale refusals in a row that end a turn (each one after the first waits
# a backoff that doubles, capped: about 6 s of trying at the default timings).
STALE_STREAK_LIMIT = 8
# After this many in a row from one runner, its operator hears of it (a WARNING,
# and every turn that waits for the runner says so).
STALE_WARN_AFTER = 3
_US = 1_000_000


@dataclass(frozen=True)
class StaleReading:
    """What one DISPATCH_STALE refusal shows (seconds)."""

    # How far below the runner's floor the stamp was (None: the floor was not said).
    behind: float | None
    # How long the call took, from the write-ahead to the answer, on this clock.
    took: float

    @property
    def ahead(self) -> float | None:
        """The runner's clock is at least this far ahead of this coordinator's (> 0:
        proven skew); None when the floor was not said."""
        return None if self.behind is None else self.behind - self.took

    def describe(self, runner: str) -> str:
        """Words for the event, the waiting turn and the log: what to fix."""
        ahead = self.ahead
        if ahead is not None and ahead > 0:
            return (
                f"clock skew: runner {runner}'s clock reads at least {ahead:.3f} s ahead of "
                "this coordinator's (its admission floor had passed the Dispatch's stamp by "
                f"{self.behind:.3f} s, in a call that took {self.took:.3f} s); every Dispatch "
                "is refused until the clocks agree: fix clock synchronisation (NTP) on both "
                "hosts, or raise the runner's --admission-window above the skew"
            )
        return (
            f"the Dispatch reached runner {runner} after its admission window (the call took "
            f"{self.took:.3f} s from the write-ahead), or its clock runs ahead of this "
            "coordinator's by about that window (check clock synchronisation)"
        )


def read_stale(stamp: int, admission_floor: int | None, now: int) -> StaleReading:
    """The reading of a refusal of the Dispatch stamped ``stamp``, answered at
    ``now`` (both microseconds on this coordinator's clock, as stamps are)."""
    took = max(0, now - stamp) / _US
    behind = None if admission_floor is None else (admission_floor - stamp) / _US
    return StaleReading(behind, took)


def read_stale_at(sent_at: datetime, admission_floor: int | None, now: datetime) -> StaleReading:
    """``read_stale`` for an attempt written ahead at ``sent_at``, answered at ``now``."""
    return read_stale(dispatch_stamp(sent_at), admission_floor, dispatch_stamp(now))
