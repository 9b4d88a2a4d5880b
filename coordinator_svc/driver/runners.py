"""What this coordinator knows of each runner's reachability, as rules (issue 26).

A runner whose calls go unanswered ``UNREACHABLE_AFTER`` times in a row gets
no grant and no first attempt until it answers again (one lost call is not an
outage); any answer, a watch message too, ends the streak. The shell counts
the streak (``trouble``: consecutive unanswered calls per runner); these say
what the count means.
"""

from __future__ import annotations

from collections.abc import Mapping

UNREACHABLE_AFTER = 3


def unreachable(trouble: Mapping[str, int]) -> frozenset[str]:
    """Runners routing avoids now."""
    return frozenset(runner for runner, n in trouble.items() if n >= UNREACHABLE_AFTER)


def back_in_routing(trouble: Mapping[str, int], runner: str) -> bool:
    """``runner`` answered after routing had left it out: waiting turns may go to it."""
    return trouble.get(runner, 0) >= UNREACHABLE_AFTER
