"""AdminService: the operator's API over grpc.aio (PROTOCOL.md §10, docs/ADMIN_API.md).

Every call needs the token's ``admin`` scope (``api.auth``); its principal is
who the records name. Unlike TurnService it reads every principal's
operations (``journal.get`` / ``list_operations``, never the per-principal
reads). Writes go through ``ports.AdminJournal``, whose adapters apply the
same rules (``storage.admin_rules``) in the write's own transaction, so an
operator's act the rules refuse is refused by the journal too; the checks
here come first to answer with a typed error, and nothing is written then.

Verdicts and requeue links live beside the operations: nothing here ever
commits a Change to an operation (V1). A requeue stores a NEW operation
through the dispatcher's acceptance path (``store_accepted``) so it is
scheduled, leased (§5) and sent like a submitted turn.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import grpc

from coordinator_svc.api import admin_checks as check
from coordinator_svc.api.admin_convert import apply_all, apply_notes, evidence_to_proto
from coordinator_svc.api.admin_runners import RunnerAdmin, RunnerDispatch
from coordinator_svc.api.auth import Authenticator, Scope
from coordinator_svc.api.call_limits import CallLimits
from coordinator_svc.api.convert import operation_to_proto
from coordinator_svc.api.errors import abort_with, edge_refusal
from coordinator_svc.api.paging import decode_page_token, encode_page_token
from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.model import (
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.core.operator import (
    OperationFilter,
    OperatorNotes,
    Refusal,
    RequeueRecord,
    VerdictRecord,
    ambiguous_filter,
    requeue_key_digest,
    requeue_refusal,
    verdict_outcome,
    verdict_refusal,
)
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import AdminJournal, InvalidWrite, Journal, PageCursor
from turnwire.coordinator.v1 import admin_pb2, admin_pb2_grpc
from turnwire.guard import add_guarded_service
from turnwire.ids import new_operation_id
from turnwire.observability.logs import turn_extra
from turnwire.runner.v1 import runner_pb2

log = logging.getLogger("coordinator_svc.admin")


def _turn_fields(record: OperationRecord) -> dict[str, Any]:
    """``extra=`` naming the turn a line is about (docs/LOGS.md)."""
    return turn_extra(
        record.operation_id,
        attempt=record.attempt_count,
        runner=record.runner,
        incarnation=record.incarnation_id,
        principal=record.principal,
    )


_T = TypeVar("_T")
# Events read per page when describing an operation, and at most this many pages.
_EVENT_PAGE = 1000
_MAX_EVENT_PAGES = 100


class AdminDispatch(RunnerDispatch, Protocol):
    """What AdminService needs of the dispatcher beyond the public API's port."""


class OperatorJournal(Journal, AdminJournal, Protocol):
    """A journal that keeps the operator's records too."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        *,
        journal: OperatorJournal,
        dispatch: AdminDispatch,
        feed: ChangeFeed,
        authenticator: Authenticator,
        call_limits: CallLimits,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._journal = journal
        self._dispatch = dispatch
        self._feed = feed
        self._auth = authenticator
        self._limits = call_limits
        self._clock = clock
        self._runners = RunnerAdmin(journal, dispatch, clock)

    async def _guard(self, context: Any, body: Callable[[str], Awaitable[_T]]) -> _T:
        """Authenticate with the admin scope, run ``body(principal)``, type any failure."""
        try:
            principal = self._auth.authenticate(context.invocation_metadata(), Scope.ADMIN)
            with self._limits.principal_call(principal):
                return await body(principal)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with(context, exc)
            raise AssertionError("context.abort returned") from exc  # pragma: no cover

    # --- views ------------------------------------------------------------------

    async def _views(self, records: Sequence[OperationRecord]) -> list[admin_pb2.AdminOperation]:
        notes = await self._journal.operator_notes([r.operation_id for r in records])
        views = []
        for record in records:
            operation = operation_to_proto(record, self._dispatch.waiting_for(record))
            apply_notes(operation, notes.get(record.operation_id))
            views.append(admin_pb2.AdminOperation(operation=operation, principal=record.principal))
        return views

    async def _view(self, record: OperationRecord) -> admin_pb2.AdminOperation:
        return (await self._views([record]))[0]

    async def _evidence(self, view: admin_pb2.AdminOperation) -> admin_pb2.OperationEvidence:
        op_id = view.operation.operation_id
        events: list[EventRecord] = []
        for _ in range(_MAX_EVENT_PAGES):
            page = await self._journal.events(
                op_id, events[-1].sequence if events else 0, _EVENT_PAGE
            )
            events.extend(page)
            if len(page) < _EVENT_PAGE:
                break
        attempts = await self._journal.attempts(op_id)
        verdicts = await self._journal.verdicts(op_id)
        return evidence_to_proto(view, attempts, events, verdicts)

    async def _existing(self, operation_id: str) -> OperationRecord:
        record = await self._journal.get(check.operation_id(operation_id))
        if record is None:
            raise check.not_found()
        return record

    async def _page(
        self, where: OperationFilter, size: int, token: str
    ) -> tuple[list[OperationRecord], str]:
        """One page of ``where`` and the token for the next ("" at the end). Tokens
        are bound to the filter (a token of another filter is PAGE_TOKEN_INVALID)."""
        bound_to = "\0admin\0" + where.key()  # never a principal's name: no tenant token fits
        after = decode_page_token(bound_to, token) if token else None
        records = await self._journal.list_operations(where, size + 1, after)
        page = records[:size]
        next_token = ""
        if len(records) > size:
            last = page[-1]
            next_token = encode_page_token(bound_to, PageCursor(last.created_at, last.operation_id))
        return page, next_token

    # --- ListOperations / DescribeOperation / ListAmbiguousOperations -------------

    async def ListOperations(
        self, request: admin_pb2.AdminServiceListOperationsRequest, context: Any
    ) -> admin_pb2.AdminServiceListOperationsResponse:
        async def body(principal: str) -> admin_pb2.AdminServiceListOperationsResponse:
            where = OperationFilter(
                states=check.states(request.states),
                executions=check.executions(request.executions),
                principal=check.optional_name("principal", request.principal),
                runner=check.optional_name("runner", request.runner),
                pool=check.optional_name("pool", request.pool),
            )
            page, token = await self._page(
                where, check.page_size(request.page_size), request.page_token
            )
            return admin_pb2.AdminServiceListOperationsResponse(
                operations=await self._views(page), next_page_token=token
            )

        return await self._guard(context, body)

    async def DescribeOperation(
        self, request: admin_pb2.DescribeOperationRequest, context: Any
    ) -> admin_pb2.DescribeOperationResponse:
        async def body(principal: str) -> admin_pb2.DescribeOperationResponse:
            record = await self._existing(request.operation_id)
            evidence = await self._evidence(await self._view(record))
            return admin_pb2.DescribeOperationResponse(evidence=evidence)

        return await self._guard(context, body)

    async def ListAmbiguousOperations(
        self, request: admin_pb2.ListAmbiguousOperationsRequest, context: Any
    ) -> admin_pb2.ListAmbiguousOperationsResponse:
        async def body(principal: str) -> admin_pb2.ListAmbiguousOperationsResponse:
            where = ambiguous_filter(
                include_decided=request.include_decided, include_open=request.include_open
            )
            page, token = await self._page(
                where, check.page_size(request.page_size), request.page_token
            )
            views = await self._views(page)
            return admin_pb2.ListAmbiguousOperationsResponse(
                operations=[await self._evidence(view) for view in views], next_page_token=token
            )

        return await self._guard(context, body)

    # --- RecordVerdict ------------------------------------------------------------

    async def RecordVerdict(
        self, request: admin_pb2.RecordVerdictRequest, context: Any
    ) -> admin_pb2.RecordVerdictResponse:
        async def body(principal: str) -> admin_pb2.RecordVerdictResponse:
            op_id = check.operation_id(request.operation_id)
            asked = check.verdict(request.verdict)
            why = check.reason(request.reason)
            record = await self._existing(op_id)
            refusal = verdict_refusal(record)
            if refusal is not None:
                raise check.refused(refusal, record, None)
            wanted = VerdictRecord(op_id, asked, principal, why, self._clock())
            try:
                kept, stored = await self._journal.record_verdict(wanted)
            except InvalidWrite:  # the journal's own check: only if the row changed meanwhile
                fresh = await self._existing(op_id)
                refusal = verdict_refusal(fresh) or Refusal.OPERATION_NOT_AMBIGUOUS
                raise check.refused(refusal, fresh, None) from None
            conflict = None if stored else verdict_outcome(asked, kept)
            if conflict is not None:
                raise check.refused(conflict, record, kept)
            if stored:
                log.info(
                    "operator %s recorded verdict %s on %s (%s): %s",
                    principal,
                    asked.value,
                    op_id,
                    record.state.value,
                    why,
                    extra=_turn_fields(record),  # the turn's principal, not the operator
                )
                self._feed.publish(op_id)
            return admin_pb2.RecordVerdictResponse(
                operation=await self._view(record), replayed=not stored
            )

        return await self._guard(context, body)

    # --- RequeueOperation ---------------------------------------------------------

    async def RequeueOperation(
        self, request: admin_pb2.RequeueOperationRequest, context: Any
    ) -> admin_pb2.RequeueOperationResponse:
        async def body(principal: str) -> admin_pb2.RequeueOperationResponse:
            op_id = check.operation_id(request.operation_id)
            why = check.reason(request.reason)
            original = await self._existing(op_id)
            notes = (await self._journal.operator_notes([op_id])).get(op_id, OperatorNotes())
            if notes.requeued_as is not None:
                made = await self._existing(notes.requeued_as)
                return await self._requeued(original, made, replayed=True)
            refusal = requeue_refusal(original, notes.verdict)
            if refusal is not None:
                raise check.refused(refusal, original, notes.verdict)
            if not self._dispatch.has_runner_for(original.pool, original.kind):
                raise check.no_runner_for(original.pool, original.kind.value)
            record, event, link = self._requeue_of(original, principal, why)

            async def submit(
                made: OperationRecord, first: EventRecord
            ) -> tuple[OperationRecord, bool]:
                return await self._journal.requeue(link, made, first)

            try:
                stored, replayed = await self._dispatch.store_accepted(record, event, submit)
            except InvalidWrite:  # the journal's own check refused it: say which rule
                fresh = await self._existing(op_id)
                kept = (await self._journal.operator_notes([op_id])).get(op_id, OperatorNotes())
                refusal = requeue_refusal(fresh, kept.verdict) or Refusal.REQUEUE_NOT_ALLOWED
                raise check.refused(refusal, fresh, kept.verdict) from None
            if not replayed:
                if stored.state is OpState.QUEUED:
                    self._dispatch.accepted(stored)
                self._feed.publish(stored.operation_id)
                self._feed.publish(op_id)
                log.info(
                    "operator %s requeued %s (%s, %s) as %s: %s",
                    principal,
                    op_id,
                    original.state.value,
                    original.execution.value,
                    stored.operation_id,
                    why,
                    extra={**_turn_fields(original), "requeued_as": stored.operation_id},
                )
            return await self._requeued(original, stored, replayed=replayed)

        return await self._guard(context, body)

    def _requeue_of(
        self, original: OperationRecord, principal: str, why: str
    ) -> tuple[OperationRecord, EventRecord, RequeueRecord]:
        """The new operation: the original's persisted envelope with only its
        operation_id replaced (the runner checks that it names the Dispatch's id),
        everything else as accepted; QUEUED, never attempted."""
        now = self._clock()
        new_id = new_operation_id()
        envelope = runner_pb2.TurnEnvelope.FromString(original.envelope)
        envelope.operation_id = new_id
        body = envelope.SerializeToString(deterministic=True)
        birth = Birth(
            operation_id=new_id,
            principal=original.principal,
            idempotency_key_digest=requeue_key_digest(original.operation_id),
            request_digest=original.request_digest,
            envelope=body,
            pool=original.pool,
            kind=original.kind,
            replay_policy=original.replay_policy,
            max_attempts=original.max_attempts,
        )
        record, event = born(
            birth, now, detail=f"requeued from {original.operation_id} by {principal}: {why}"
        )
        link = RequeueRecord(original.operation_id, new_id, principal, why, now)
        return record, event, link

    async def _requeued(
        self, original: OperationRecord, made: OperationRecord, *, replayed: bool
    ) -> admin_pb2.RequeueOperationResponse:
        made_view, original_view = await self._views([made, original])
        return admin_pb2.RequeueOperationResponse(
            operation=made_view, original=original_view, replayed=replayed
        )

    # --- runners (§11, §10 V8: api/admin_runners.py) -------------------------------

    async def ListRunners(
        self, request: admin_pb2.ListRunnersRequest, context: Any
    ) -> admin_pb2.ListRunnersResponse:
        return await self._guard(context, lambda principal: self._runners.list())

    async def DrainRunner(
        self, request: admin_pb2.DrainRunnerRequest, context: Any
    ) -> admin_pb2.DrainRunnerResponse:
        return await self._guard(context, lambda principal: self._runners.drain(principal, request))

    async def UndrainRunner(
        self, request: admin_pb2.UndrainRunnerRequest, context: Any
    ) -> admin_pb2.UndrainRunnerResponse:
        return await self._guard(
            context, lambda principal: self._runners.undrain(principal, request)
        )

    async def AddRunner(
        self, request: admin_pb2.AddRunnerRequest, context: Any
    ) -> admin_pb2.AddRunnerResponse:
        return await self._guard(context, lambda principal: self._runners.add(principal, request))

    async def RemoveRunner(
        self, request: admin_pb2.RemoveRunnerRequest, context: Any
    ) -> admin_pb2.RemoveRunnerResponse:
        return await self._guard(
            context, lambda principal: self._runners.remove(principal, request)
        )


async def annotate(journal: AdminJournal, operations: Sequence[Any]) -> None:
    """Show verdicts and requeue links on public Operations (TurnService's reads)."""
    if operations:
        apply_all(operations, await journal.operator_notes([op.operation_id for op in operations]))


def add_to_server(servicer: AdminServicer, server: grpc.aio.Server) -> None:
    """Register AdminService behind the same edge guard as TurnService."""
    add_guarded_service(
        server,
        admin_pb2_grpc.add_AdminServiceServicer_to_server,
        servicer,
        check=edge_refusal,
    )


SERVICE_NAME: str = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
