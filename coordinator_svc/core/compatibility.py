"""Which runner versions a coordinator gives turns to: the version skew rule, pure.

A coordinator and a runner work together when their Turnwire versions have
the same major number and minor numbers at most one apart (0.1.x with 0.1.y,
0.2.z or 0.0.w; not 0.3.0), whichever side is newer. The wire contract only
grows (new fields and calls are added, none removed or renumbered: buf
breaking against the baseline), and each release keeps speaking the contract
of the minor version before it: that is what makes the one-minor window
possible, and nothing wider is promised. docs/DEPLOYMENT.md ("Upgrades")
gives the order this allows.

A runner outside the window is sent no new turn (its watch reports why); turns
already bound to it are still followed to their end by status calls, which
every version answers. A version that is not ``MAJOR.MINOR...`` (a source tree
never installed reports ``0+unknown``) carries no promise either way and is
let through, so a development build still runs.
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:[.\w+-]*)")
MINOR_VERSIONS_APART = 1


def _major_minor(version: str) -> tuple[int, int] | None:
    match = _RELEASE.fullmatch(version.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def runner_version_problem(
    runner: str, runner_version: str, coordinator_version: str
) -> str | None:
    """Why this coordinator must send ``runner`` no new turn, or None when the versions
    are within the window. An empty version (the runner reports none) is refused."""
    if not runner_version.strip():
        return (
            f"{runner} reports no version (GetRunnerInfo.version): it is not a Turnwire "
            "runner this coordinator knows how to talk to; nothing is sent to it"
        )
    ours, theirs = _major_minor(coordinator_version), _major_minor(runner_version)
    if ours is None or theirs is None:
        return None
    if ours[0] == theirs[0] and abs(ours[1] - theirs[1]) <= MINOR_VERSIONS_APART:
        return None
    return (
        f"{runner} runs Turnwire {runner_version} and this coordinator {coordinator_version}: "
        f"they work together only within {MINOR_VERSIONS_APART} minor version of each other "
        "(docs/DEPLOYMENT.md, Upgrades); no new turn is sent to it until one of them is "
        "upgraded (turns already there are still followed to their end)"
    )
