"""The runner set and its drains reach the dispatcher: at start, and on replicas by poll
(PROTOCOL.md §11 M5, M8; §10 V8).

Both are journal rows, so they survive a restart and every replica sharing a
PostgreSQL journal follows them. At start the --runner flags are weighed
against the journal (M8: a name it has never seen is recorded as added by
``--runner``; one that agrees is nothing; one it records as removed is not
added back, with a WARNING; one that disagrees with the live member stops the
start), then the journal's set is handed to the dispatcher before C12
recovery and its first grant. The replica that took an operator's call hands
the new set to its own dispatcher at once; the others read it again every
``RUNNER_SET_POLL_SECONDS``. A read that fails keeps the members and drains
in force (fail closed: nothing is added, removed or undrained on an error)
and logs a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Protocol

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import (
    FLAG_RECORDER,
    MembershipRecord,
    RunnerRoster,
    added,
    flag_plan,
    kinds_text,
)
from coordinator_svc.ports import AdminJournal, JournalError, MembershipRefused

log = logging.getLogger("coordinator_svc.admin")

RUNNER_SET_POLL_SECONDS = 2.0


class RunnerSetTarget(Protocol):
    async def set_runners(
        self, runners: Sequence[RunnerEndpoint], drained: Collection[str]
    ) -> object: ...


class RunnerFlagConflict(ValueError):
    """A --runner flag disagrees with the journal's live member of that name (M8)."""


def _fields(endpoint: RunnerEndpoint | MembershipRecord) -> str:
    return f"{endpoint.address} (pool {endpoint.pool}, kinds {kinds_text(endpoint.kinds)})"


def _conflict(flag: RunnerEndpoint, member: MembershipRecord) -> str:
    return (
        f"--runner {flag.name} says {_fields(flag)}, but the journal's member {flag.name} "
        f"(generation {member.sequence}, added by {member.recorded_by}) is at "
        f"{_fields(member)}. The journal's runner set wins (PROTOCOL.md §11 M8): correct or "
        "drop the flag, or move the runner with `turnwire admin runners drain`, `remove`, "
        "then `add` (or `remove --force`)"
    )


async def record_flags(
    journal: AdminJournal,
    flags: Sequence[RunnerEndpoint],
    *,
    by: str,
    clock: Callable[[], datetime],
) -> RunnerRoster:
    """M8: record the flags the journal has never seen; the roster as it then is.
    RunnerFlagConflict (nothing recorded) if a flag disagrees with a live member."""
    roster = await journal.runner_roster()
    plan = flag_plan(flags, roster.latest)
    if plan.conflicts:
        raise RunnerFlagConflict("; ".join(_conflict(f, m) for f, m in plan.conflicts))
    for flag, removal in plan.removed:
        log.warning(
            "--runner %s is not added back: %s removed it at %s (%s). To use it again: "
            "`turnwire admin runners add %s %s --pool %s`; or drop the flag",
            flag.name,
            removal.recorded_by,
            removal.recorded_at.isoformat(),
            removal.reason,
            flag.name,
            flag.address,
            flag.pool,
        )
    for flag in plan.to_add:
        record = added(flag, FLAG_RECORDER, f"initial set, from the flag of {by}", clock())
        try:
            stored, fresh = await journal.add_runner(record)
        except MembershipRefused as refused:  # another replica's start recorded other fields
            if refused.member is None:
                raise
            raise RunnerFlagConflict(_conflict(flag, refused.member)) from None
        if fresh:
            log.info("runner %s recorded from --runner: %s", flag.name, _fields(stored))
    return await journal.runner_roster() if plan.to_add else roster


async def load_runner_set(
    journal: AdminJournal,
    target: RunnerSetTarget,
    flags: Sequence[RunnerEndpoint],
    *,
    by: str,
    clock: Callable[[], datetime],
) -> RunnerRoster:
    """At start: the flags weighed (M8), then the journal's set and drains handed to
    ``target``. Raises JournalError or RunnerFlagConflict (the start stops)."""
    roster = await record_flags(journal, flags, by=by, clock=clock)
    members = roster.members
    log.info(
        "runner set: %s",
        ", ".join(f"{m.name}@{m.address} (generation {m.generation})" for m in members)
        or "empty (add runners with `turnwire admin runners add`)",
    )
    if roster.drains:
        drained = ", ".join(sorted(roster.drained))
        log.info("drained runner(s), no new turns for them: %s", drained)
    await target.set_runners(members, roster.drained)
    return roster


async def follow_runner_set(
    journal: AdminJournal,
    target: RunnerSetTarget,
    poll_seconds: float = RUNNER_SET_POLL_SECONDS,
) -> None:
    """Read the set and the drains every ``poll_seconds`` until cancelled (a replica's task)."""
    while True:
        await asyncio.sleep(poll_seconds)
        try:
            roster = await journal.runner_roster()
        except JournalError as exc:
            log.warning(
                "could not read the runner set (the members and drains in force stay): %s", exc
            )
            continue
        await target.set_runners(roster.members, roster.drained)
