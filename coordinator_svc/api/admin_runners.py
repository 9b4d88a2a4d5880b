"""AdminService's runner calls: the runner set and its drains (PROTOCOL.md §11, §10 V8).

ListRunners, DrainRunner, UndrainRunner, AddRunner and RemoveRunner, called
by ``admin_servicer.AdminServicer`` with the caller's principal (admin scope
already checked). Every change is a journal record first (the adapters apply
``storage.admin_rules`` in the write's own transaction); then the journal's
set is read back and handed to this replica's dispatcher at once
(``Dispatcher.set_runners``, the one way the set changes), so what the reply
shows is what this coordinator now uses. Other replicas follow within their
poll (``runner_set``). A refused call changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Protocol

from coordinator_svc.api import admin_checks as check
from coordinator_svc.api.admin_convert import membership_to_proto, runner_to_proto
from coordinator_svc.api.control import DispatchControl
from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import RunnerRoster, added
from coordinator_svc.core.operator import DrainRecord
from coordinator_svc.dispatcher.runner_states import RunnerState
from coordinator_svc.ports import AdminJournal, MembershipRefused
from turnwire.coordinator.v1 import admin_pb2
from turnwire.transport_security import SecurityConfigError

log = logging.getLogger("coordinator_svc.admin")


class RunnerDispatch(DispatchControl, Protocol):
    """What the runner calls need of the dispatcher."""

    async def set_runners(
        self, runners: Sequence[RunnerEndpoint], drained: Collection[str]
    ) -> object: ...

    def runner_states(self) -> list[RunnerState]: ...

    def can_add_runners(self) -> bool: ...

    def check_runner_address(self, address: str) -> None: ...


class RunnerAdmin:
    def __init__(
        self, journal: AdminJournal, dispatch: RunnerDispatch, clock: Callable[[], datetime]
    ) -> None:
        self._journal = journal
        self._dispatch = dispatch
        self._clock = clock

    async def _apply(self) -> RunnerRoster:
        """The journal's set and drains, handed to this dispatcher now (M5)."""
        roster = await self._journal.runner_roster()
        await self._dispatch.set_runners(roster.members, roster.drained)
        return roster

    async def _views(self) -> list[admin_pb2.Runner]:
        roster = await self._apply()
        bound = await self._journal.bound_turns()
        drains = {d.runner: d for d in roster.drains}
        return [
            runner_to_proto(
                state,
                drains.get(state.name),
                roster.record_of(state.name),
                bound.get(state.name, 0),
            )
            for state in self._dispatch.runner_states()
        ]

    async def _view(self, name: str) -> admin_pb2.Runner:
        found = [r for r in await self._views() if r.name == name]
        if not found:  # removed meanwhile by another replica's call
            raise check.runner_not_found(name)
        return found[0]

    async def _member(self, value: str) -> str:
        """A member's name, as the journal has the set now (RUNNER_NOT_FOUND if not)."""
        roster = await self._apply()
        return check.runner(value, [m.name for m in roster.members])

    async def list(self) -> admin_pb2.ListRunnersResponse:
        return admin_pb2.ListRunnersResponse(runners=await self._views())

    async def drain(
        self, principal: str, request: admin_pb2.DrainRunnerRequest
    ) -> admin_pb2.DrainRunnerResponse:
        runner = await self._member(request.runner)
        why = check.reason(request.reason)
        kept, stored = await self._journal.drain(DrainRecord(runner, principal, why, self._clock()))
        if stored:
            log.info("operator %s drained runner %s: %s", principal, runner, why)
        return admin_pb2.DrainRunnerResponse(
            runner=await self._view(kept.runner), replayed=not stored
        )

    async def undrain(
        self, principal: str, request: admin_pb2.UndrainRunnerRequest
    ) -> admin_pb2.UndrainRunnerResponse:
        runner = await self._member(request.runner)
        removed = await self._journal.undrain(runner)
        if removed is not None:
            log.info(
                "operator %s undrained runner %s (drained by %s: %s)",
                principal,
                runner,
                removed.drained_by,
                removed.reason,
            )
        return admin_pb2.UndrainRunnerResponse(
            runner=await self._view(runner), replayed=removed is None
        )

    async def add(
        self, principal: str, request: admin_pb2.AddRunnerRequest
    ) -> admin_pb2.AddRunnerResponse:
        """M2: checked as --runner is, recorded, then used here at once."""
        wanted = check.runner_fields(request.runner, request.address, request.pool, request.kinds)
        why = check.optional_reason(request.reason)
        if not self._dispatch.can_add_runners():
            raise check.no_runner_credentials()
        try:
            self._dispatch.check_runner_address(wanted.address)
        except SecurityConfigError as exc:
            raise check.plaintext_address(wanted.address, str(exc)) from None
        try:
            member, stored = await self._journal.add_runner(
                added(wanted, principal, why, self._clock())
            )
        except MembershipRefused as refused:
            raise check.member_refused(refused) from None
        if stored:
            log.info(
                "operator %s added runner %s (generation %d) at %s, pool %s: %s",
                principal,
                member.runner,
                member.sequence,
                member.address,
                member.pool,
                why or "-",
            )
        return admin_pb2.AddRunnerResponse(
            runner=await self._view(member.runner), replayed=not stored
        )

    async def remove(
        self, principal: str, request: admin_pb2.RemoveRunnerRequest
    ) -> admin_pb2.RemoveRunnerResponse:
        """M3/M4: recorded (the journal checks drain and bound turns in the same
        transaction), then this dispatcher lets it go at once (M5, M6)."""
        runner = check.optional_name("runner", request.runner)
        if not runner:
            raise check.invalid("runner", "runner is required")
        why = check.reason(request.reason)
        try:
            removal, stored = await self._journal.remove_runner(
                runner,
                generation=request.generation,
                by=principal,
                reason=why,
                at=self._clock(),
                force=request.force,
            )
        except MembershipRefused as refused:
            raise check.member_refused(refused) from None
        await self._apply()
        if stored:
            log.log(
                logging.WARNING if removal.bound_turns else logging.INFO,
                "operator %s removed runner %s (generation %d)%s: %s",
                principal,
                runner,
                removal.sequence - 1,
                f" by force, {removal.bound_turns} turn(s) bound to it end TIMED_OUT RUNNER_REMOVED"
                if removal.bound_turns
                else (" by force" if removal.forced else ""),
                why,
            )
        return admin_pb2.RemoveRunnerResponse(
            removal=membership_to_proto(removal), replayed=not stored
        )
