"""Runner membership in memory (``ports.AdminJournal``'s §11 half), mixed into FakeJournal.

The same semantics as ``membership_sql.SqlMembership``: each method checks and
writes without an ``await`` in between, so on one event loop it is atomic.
"""

from __future__ import annotations

from datetime import datetime

from coordinator_svc.core.membership import BOUND_STATES, MembershipRecord, RunnerRoster
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.core.operator import DrainRecord, RequeueRecord, VerdictRecord
from coordinator_svc.storage import admin_rules


class FakeMembership:
    """The membership half of ``fake.FakeJournal`` (mixed into it, after FakeAdmin)."""

    # Provided by FakeJournal and FakeAdmin.
    _operations: dict[str, OperationRecord]
    _commits: int

    def _check_open(self) -> None: ...  # FakeJournal's

    def _admin_tables(
        self,
    ) -> tuple[dict[str, list[VerdictRecord]], dict[str, RequeueRecord], dict[str, DrainRecord]]:
        raise NotImplementedError  # FakeAdmin's (FakeJournal mixes it in first)

    def _membership(self) -> dict[str, list[MembershipRecord]]:
        # Made on first use: FakeJournal.__init__ stays as it is.
        if not hasattr(self, "_membership_rows"):
            self._membership_rows: dict[str, list[MembershipRecord]] = {}
        return self._membership_rows

    def _latest(self, runner: str) -> MembershipRecord | None:
        rows = self._membership().get(runner)
        return rows[-1] if rows else None

    async def add_runner(self, record: MembershipRecord) -> tuple[MembershipRecord, bool]:
        self._check_open()
        latest = self._latest(record.runner)
        stored = admin_rules.check_add(latest, record)
        if stored is None:
            assert latest is not None
            return latest, False
        self._membership().setdefault(stored.runner, []).append(stored)
        self._commits += 1
        return stored, True

    async def remove_runner(
        self,
        runner: str,
        *,
        generation: int,
        by: str,
        reason: str,
        at: datetime,
        force: bool,
    ) -> tuple[MembershipRecord, bool]:
        self._check_open()
        latest = self._latest(runner)
        drains = self._admin_tables()[2]
        stored = admin_rules.check_removal(
            runner,
            latest,
            generation=generation,
            drained=runner in drains,
            bound=self._bound().get(runner, 0),
            by=by,
            reason=reason,
            at=at,
            force=force,
        )
        if stored is None:
            assert latest is not None
            return latest, False
        self._membership()[runner].append(stored)
        drains.pop(runner, None)
        self._commits += 1
        return stored, True

    async def runner_roster(self) -> RunnerRoster:
        self._check_open()
        latest = tuple(rows[-1] for _, rows in sorted(self._membership().items()) if rows)
        drains = tuple(sorted(self._admin_tables()[2].values(), key=lambda d: d.runner))
        return RunnerRoster(latest, drains)

    async def bound_turns(self) -> dict[str, int]:
        self._check_open()
        return self._bound()

    def _bound(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self._operations.values():
            if record.state in BOUND_STATES and record.runner is not None:
                counts[record.runner] = counts.get(record.runner, 0) + 1
        return counts
