"""The operator's client for the coordinator's AdminService (docs/ADMIN_API.md, PROTOCOL.md §10).

    from turnwire.client import AdminClient

    with AdminClient("127.0.0.1:50051", token=admin_token) as admin:
        for page in admin.list_ambiguous():             # UNKNOWN, terminal, no verdict yet
            for evidence in page.operations:
                for attempt in evidence.attempts:
                    print(attempt.number, attempt.runner, attempt.outcome, attempt.detail)
        admin.record_verdict("op_0123", "not-executed", reason="runner log shows no start")
        requeued = admin.requeue("op_0123", reason="never ran (verdict)")
        admin.add_runner("r3", "10.0.0.7:50061", pool="default")
        admin.drain("r1", reason="kernel upgrade")
        admin.remove_runner("r1", reason="host retired")  # once drained and idle
        for runner in admin.runners():
            print(runner.name, runner.in_use, "/", runner.capacity, runner.health)

The token must carry the ``admin`` scope; any other is refused with
CheckCredentials (reason ``SCOPE_MISSING``). Unlike TurnwireClient it sees every
principal's operations.

Retries, errors and values follow TurnwireClient's rules (the
``turnwire.client`` docstring): transient failures are retried with backoff
within the policy, and every call is safe to repeat: a verdict, a requeue, a
drain or an undrain sent again is answered as a replay (``replayed=True``),
never done twice (so is adding a runner with the same fields, or removing
one already removed). Refusals raise: NotAllowed (the operation's state, or
the runner's, does not allow it), NotFound (``OPERATION_NOT_FOUND``,
``RUNNER_NOT_FOUND``), FixTheRequest (``ARGUMENT_INVALID``,
``PAGE_TOKEN_INVALID``), NoRunnerAvailable (a requeue nobody can serve).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TypeVar

import grpc
import grpc.aio

from turnwire.client.admin_values import (
    AdminOperation,
    AdminOperationPage,
    EvidencePage,
    MembershipRecord,
    OperationEvidence,
    Requeued,
    Runner,
    RunnerChanged,
    RunnerRemoved,
    VerdictRecorded,
)
from turnwire.client.connection import AsyncConnection, SyncConnection
from turnwire.client.sync import state_number
from turnwire.client.values import Execution, OperationState, TurnKind, Verdict
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2

_Reply = TypeVar("_Reply")
_Paged = TypeVar(
    "_Paged",
    admin_pb2.AdminServiceListOperationsRequest,
    admin_pb2.ListAmbiguousOperationsRequest,
)


def with_page_token(request: _Paged, token: str) -> _Paged:
    """A copy of ``request`` asking for the page ``token`` names (each call its own message)."""
    paged = type(request)()
    paged.CopyFrom(request)
    paged.page_token = token
    return paged


def _token(text: str) -> str:
    """``not-executed`` / ``not_executed`` / ``NOT_EXECUTED`` -> ``NOT_EXECUTED``."""
    return str(text).strip().upper().replace("-", "_")


def execution_number(execution: Execution | str) -> turn_pb2.Execution.ValueType:
    """An Execution (or its name, any case, dashes allowed) as the wire number."""
    return turn_pb2.Execution.Value("EXECUTION_" + Execution(_token(execution)).value)


def verdict_number(verdict: Verdict | str) -> coordinator_pb2.Verdict.ValueType:
    """EXECUTED or NOT_EXECUTED (any case, dashes allowed) as the wire number.

    ValueError for anything else, UNSPECIFIED included: a verdict says one or
    the other.
    """
    name = _token(verdict)
    if name not in (Verdict.EXECUTED, Verdict.NOT_EXECUTED):
        raise ValueError(f"a verdict is EXECUTED or NOT_EXECUTED, not {verdict!r}")
    return coordinator_pb2.Verdict.Value("VERDICT_" + name)


def list_operations_request(
    states: Iterable[OperationState | str],
    executions: Iterable[Execution | str],
    principal: str,
    runner: str,
    pool: str,
    page_size: int,
) -> admin_pb2.AdminServiceListOperationsRequest:
    return admin_pb2.AdminServiceListOperationsRequest(
        states=[state_number(state) for state in states],
        executions=[execution_number(execution) for execution in executions],
        principal=principal,
        runner=runner,
        pool=pool,
        page_size=page_size,
    )


def operations_page(reply: admin_pb2.AdminServiceListOperationsResponse) -> AdminOperationPage:
    return AdminOperationPage(
        operations=tuple(AdminOperation.from_proto(op) for op in reply.operations),
        next_page_token=reply.next_page_token,
    )


def evidence_page(reply: admin_pb2.ListAmbiguousOperationsResponse) -> EvidencePage:
    return EvidencePage(
        operations=tuple(OperationEvidence.from_proto(op) for op in reply.operations),
        next_page_token=reply.next_page_token,
    )


def requeued(reply: admin_pb2.RequeueOperationResponse) -> Requeued:
    return Requeued(
        operation=AdminOperation.from_proto(reply.operation),
        original=AdminOperation.from_proto(reply.original),
        replayed=reply.replayed,
    )


def add_runner_request(
    runner: str, address: str, pool: str, kinds: Iterable[TurnKind | str], reason: str
) -> admin_pb2.AddRunnerRequest:
    return admin_pb2.AddRunnerRequest(
        runner=runner,
        address=address,
        pool=pool,
        kinds=[turn_pb2.TurnKind.Value("TURN_KIND_" + TurnKind(_token(k)).value) for k in kinds],
        reason=reason,
    )


def runner_removed(reply: admin_pb2.RemoveRunnerResponse) -> RunnerRemoved:
    return RunnerRemoved(
        removal=MembershipRecord.from_proto(reply.removal), replayed=reply.replayed
    )


def runner_changed(
    reply: admin_pb2.DrainRunnerResponse
    | admin_pb2.UndrainRunnerResponse
    | admin_pb2.AddRunnerResponse,
) -> RunnerChanged:
    return RunnerChanged(runner=Runner.from_proto(reply.runner), replayed=reply.replayed)


def verdict_recorded(reply: admin_pb2.RecordVerdictResponse) -> VerdictRecorded:
    return VerdictRecorded(
        operation=AdminOperation.from_proto(reply.operation), replayed=reply.replayed
    )


class AdminClient(SyncConnection):
    """The operator's calls: every principal's operations, ambiguous turns with
    their evidence, verdicts, requeues, runners and drains.

    Construction is TurnwireClient's: ``retries`` is how many times a call is
    sent again after a transient failure (or a full :class:`RetryPolicy`);
    ``channel`` replaces the connection (tests); ``credentials`` for TLS.
    """

    _stub: admin_pb2_grpc.AdminServiceStub

    def _bind(self, channel: grpc.Channel) -> None:
        self._stub = admin_pb2_grpc.AdminServiceStub(channel)

    def list_operations(
        self,
        states: Iterable[OperationState | str] = (),
        *,
        executions: Iterable[Execution | str] = (),
        principal: str = "",
        runner: str = "",
        pool: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> Iterator[AdminOperationPage]:
        """Every principal's operations, oldest first, one page at a time (lazily).

        Filters combine with AND; empty means any. ``runner`` keeps operations
        bound to that runner. A ``page_token`` works only with the filters
        that produced it (else FixTheRequest, ``PAGE_TOKEN_INVALID``).
        """
        request = list_operations_request(states, executions, principal, runner, pool, page_size)
        token = page_token
        while True:
            paged = with_page_token(request, token)
            page = operations_page(self._call(self._stub.ListOperations, paged))
            yield page
            if not page.next_page_token:
                return
            token = page.next_page_token

    def describe(self, operation_id: str) -> OperationEvidence:
        """One operation of any principal with its whole record: attempts, events, verdicts."""
        request = admin_pb2.DescribeOperationRequest(operation_id=operation_id)
        return OperationEvidence.from_proto(
            self._call(self._stub.DescribeOperation, request).evidence
        )

    def list_ambiguous(
        self,
        *,
        include_decided: bool = False,
        include_open: bool = False,
        page_size: int = 0,
        page_token: str = "",
    ) -> Iterator[EvidencePage]:
        """Operations whose execution is UNKNOWN, each with its evidence, oldest first.

        By default the queue that waits for an operator: terminal, no verdict
        yet. ``include_decided`` adds those with a verdict; ``include_open``
        those still being reconciled (no verdict can be recorded on them yet).
        """
        request = admin_pb2.ListAmbiguousOperationsRequest(
            include_decided=include_decided, include_open=include_open, page_size=page_size
        )
        token = page_token
        while True:
            paged = with_page_token(request, token)
            page = evidence_page(self._call(self._stub.ListAmbiguousOperations, paged))
            yield page
            if not page.next_page_token:
                return
            token = page.next_page_token

    def record_verdict(
        self, operation_id: str, verdict: Verdict | str, *, reason: str
    ) -> VerdictRecorded:
        """Record whether a terminal, UNKNOWN operation executed (audited, final).

        ``verdict``: ``Verdict.EXECUTED`` / ``NOT_EXECUTED`` or their names
        (``"not-executed"``). ``reason`` (1..2000 characters) is the evidence
        relied on. The operation's state, execution and events are never
        changed: the record shows as ``operation.verdict``. The same verdict
        again is a replay; a different one is NotAllowed (``VERDICT_CONFLICT``).
        """
        request = admin_pb2.RecordVerdictRequest(
            operation_id=operation_id, verdict=verdict_number(verdict), reason=reason
        )
        return verdict_recorded(self._call(self._stub.RecordVerdict, request))

    def requeue(self, operation_id: str, *, reason: str) -> Requeued:
        """Submit the operation's persisted envelope again as a NEW operation.

        Only for a terminal operation proven NOT_STARTED or given a
        NOT_EXECUTED verdict (else NotAllowed, ``REQUEUE_NOT_ALLOWED`` or
        ``OPERATION_NOT_TERMINAL``). Asking again returns the same new one.
        """
        request = admin_pb2.RequeueOperationRequest(operation_id=operation_id, reason=reason)
        return requeued(self._call(self._stub.RequeueOperation, request))

    def drain(self, runner: str, *, reason: str) -> RunnerChanged:
        """Give the runner no new turns (bound ones finish there); durable in the journal."""
        request = admin_pb2.DrainRunnerRequest(runner=runner, reason=reason)
        return runner_changed(self._call(self._stub.DrainRunner, request))

    def undrain(self, runner: str) -> RunnerChanged:
        """Let the runner take new turns again."""
        request = admin_pb2.UndrainRunnerRequest(runner=runner)
        return runner_changed(self._call(self._stub.UndrainRunner, request))

    def runners(self) -> tuple[Runner, ...]:
        """Every member of the runner set by name, as the coordinator that answers sees it."""
        reply = self._call(self._stub.ListRunners, admin_pb2.ListRunnersRequest())
        return tuple(Runner.from_proto(runner) for runner in reply.runners)

    def add_runner(
        self,
        runner: str,
        address: str,
        *,
        pool: str = "",
        kinds: Iterable[TurnKind | str] = (),
        reason: str = "",
    ) -> RunnerChanged:
        """Add a runner to the set (PROTOCOL.md §11 M2): every coordinator replica uses
        it within seconds. ``pool`` "" is "default", ``kinds`` () both. The same
        fields again are a replay; other fields for a member's name are NotAllowed
        (``RUNNER_CONFLICT``); bad fields FixTheRequest."""
        request = add_runner_request(runner, address, pool, kinds, reason)
        return runner_changed(self._call(self._stub.AddRunner, request))

    def remove_runner(
        self, runner: str, *, reason: str, force: bool = False, generation: int = 0
    ) -> RunnerRemoved:
        """Remove a drained runner with no turn bound to it (M3) from the set; with
        ``force``, any member (M4: its bound turns end TIMED_OUT, RUNNER_REMOVED).
        ``generation`` (``Runner.generation``) removes only that member of the name.
        NotAllowed (``RUNNER_NOT_DRAINED``, ``RUNNER_HAS_TURNS``) otherwise."""
        request = admin_pb2.RemoveRunnerRequest(
            runner=runner, reason=reason, force=force, generation=generation
        )
        return runner_removed(self._call(self._stub.RemoveRunner, request))


class AsyncAdminClient(AsyncConnection):
    """AdminClient for asyncio code: the same calls, values, retries and errors.

    Create it inside a running event loop (grpc.aio channels bind to one).
    """

    _stub: admin_pb2_grpc.AdminServiceStub

    def _bind(self, channel: grpc.aio.Channel) -> None:
        self._stub = admin_pb2_grpc.AdminServiceStub(channel)

    async def list_operations(
        self,
        states: Iterable[OperationState | str] = (),
        *,
        executions: Iterable[Execution | str] = (),
        principal: str = "",
        runner: str = "",
        pool: str = "",
        page_size: int = 0,
        page_token: str = "",
    ) -> AsyncIterator[AdminOperationPage]:
        """See AdminClient.list_operations."""
        request = list_operations_request(states, executions, principal, runner, pool, page_size)
        token = page_token
        while True:
            paged = with_page_token(request, token)
            page = operations_page(await self._call(self._stub.ListOperations, paged))
            yield page
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def describe(self, operation_id: str) -> OperationEvidence:
        """See AdminClient.describe."""
        request = admin_pb2.DescribeOperationRequest(operation_id=operation_id)
        reply = await self._call(self._stub.DescribeOperation, request)
        return OperationEvidence.from_proto(reply.evidence)

    async def list_ambiguous(
        self,
        *,
        include_decided: bool = False,
        include_open: bool = False,
        page_size: int = 0,
        page_token: str = "",
    ) -> AsyncIterator[EvidencePage]:
        """See AdminClient.list_ambiguous."""
        request = admin_pb2.ListAmbiguousOperationsRequest(
            include_decided=include_decided, include_open=include_open, page_size=page_size
        )
        token = page_token
        while True:
            paged = with_page_token(request, token)
            page = evidence_page(await self._call(self._stub.ListAmbiguousOperations, paged))
            yield page
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def record_verdict(
        self, operation_id: str, verdict: Verdict | str, *, reason: str
    ) -> VerdictRecorded:
        """See AdminClient.record_verdict."""
        request = admin_pb2.RecordVerdictRequest(
            operation_id=operation_id, verdict=verdict_number(verdict), reason=reason
        )
        return verdict_recorded(await self._call(self._stub.RecordVerdict, request))

    async def requeue(self, operation_id: str, *, reason: str) -> Requeued:
        """See AdminClient.requeue."""
        request = admin_pb2.RequeueOperationRequest(operation_id=operation_id, reason=reason)
        return requeued(await self._call(self._stub.RequeueOperation, request))

    async def drain(self, runner: str, *, reason: str) -> RunnerChanged:
        """See AdminClient.drain."""
        request = admin_pb2.DrainRunnerRequest(runner=runner, reason=reason)
        return runner_changed(await self._call(self._stub.DrainRunner, request))

    async def undrain(self, runner: str) -> RunnerChanged:
        """See AdminClient.undrain."""
        request = admin_pb2.UndrainRunnerRequest(runner=runner)
        return runner_changed(await self._call(self._stub.UndrainRunner, request))

    async def runners(self) -> tuple[Runner, ...]:
        """See AdminClient.runners."""
        reply = await self._call(self._stub.ListRunners, admin_pb2.ListRunnersRequest())
        return tuple(Runner.from_proto(runner) for runner in reply.runners)

    async def add_runner(
        self,
        runner: str,
        address: str,
        *,
        pool: str = "",
        kinds: Iterable[TurnKind | str] = (),
        reason: str = "",
    ) -> RunnerChanged:
        """See AdminClient.add_runner."""
        request = add_runner_request(runner, address, pool, kinds, reason)
        return runner_changed(await self._call(self._stub.AddRunner, request))

    async def remove_runner(
        self, runner: str, *, reason: str, force: bool = False, generation: int = 0
    ) -> RunnerRemoved:
        """See AdminClient.remove_runner."""
        request = admin_pb2.RemoveRunnerRequest(
            runner=runner, reason=reason, force=force, generation=generation
        )
        return runner_removed(await self._call(self._stub.RemoveRunner, request))
