"""The one fake of the runner-gateway port (``coordinator_svc.ports.RunnerGateway``).

``InProcessRunner`` is a real ``RunnerService`` (real store, real executor)
called in this process: no network and no gRPC on the coordinator's side. It
reads the service's answers the way the gRPC path does (the runner transport's
wire conversion, then the coordinator's ``translate``), and a typed runner
refusal the way ``RunnerClient`` reads a typed gRPC error, so both adapters
pass one contract suite (``tests/coordinator/dispatcher/test_gateway_contract.py``).

One scripted misbehaviour a correct runner never shows: ``forget(op)`` makes
the gateway answer as if the runner had lost a row it acknowledged (absent in
status answers, never on the watch), which C9 must read as a protocol error.

It imports both services, which no product module does: ``.importlinter``
allows that to ``turnwire.testing`` alone, and nothing imports the package.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from coordinator_svc.core import commands
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    PreflightAnswer,
    PreflightFailed,
)
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.core.runner_view import RunnerOp
from coordinator_svc.dispatcher.runner_client import DISPATCH_REFUSALS
from coordinator_svc.dispatcher.translate import runner_op, slot_sizes, store_opens
from coordinator_svc.ports import RunnerInfo
from runner_svc.core.model import RunnerRefusal
from runner_svc.service import DispatchCall, OperationView, RunnerService
from runner_svc.transport import convert
from turnwire.runner.v1 import runner_pb2


class InProcessRunner:
    """A RunnerGateway over ``service``, reporting as the runner ``name``."""

    def __init__(self, name: str, service: RunnerService) -> None:
        self._name = name
        self._service = service
        # Ids this runner pretends it never had (a C9 violation, scripted by a test).
        self.forgotten: set[str] = set()
        self.dispatches = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def _incarnation(self) -> str:
        return self._service.incarnation_id

    def forget(self, operation_id: str) -> None:
        """From now on, answer about ``operation_id`` as if the store had lost its row."""
        self.forgotten.add(operation_id)

    async def statuses(
        self, asked: Sequence[tuple[str, int]]
    ) -> list[PreflightAnswer | PreflightFailed]:
        try:
            found = dict(await self._service.batch_status([op for op, _ in asked]))
        except RunnerRefusal as refusal:
            return [PreflightFailed(self._name, str(refusal), attempt) for _, attempt in asked]
        for operation_id in self.forgotten & found.keys():
            found[operation_id] = None
        chain = store_opens(convert.store_opens(self._service.store.openings))
        store = self._service.store
        return [
            PreflightAnswer(
                self._name,
                self._incarnation,
                store.store_id,
                store.durable,
                found.get(op) is not None,
                _op(found.get(op)),
                attempt,
                store_opens=chain,
            )
            if op in found
            # As RunnerClient reads the wire: no entry (a pruned id, §9 K3) is no answer.
            else PreflightFailed(self._name, "missing from batch reply", attempt)
            for op, attempt in asked
        ]

    async def dispatch(
        self,
        record: OperationRecord,
        command: commands.Dispatch,
        *,
        reply_hold: float = 0.0,
        releases: Sequence[tuple[str, commands.Release]] = (),
    ) -> DispatchAccepted | DispatchRefused | DispatchUnknown:
        self.dispatches += 1
        call = DispatchCall(
            operation_id=record.operation_id,
            envelope=record.envelope,
            envelope_digest=record.envelope_digest,
            expected_incarnation_id=command.incarnation_id,
            fencing_token=command.fencing_token,
            attempt=command.attempt,
            dispatch_stamp=command.dispatch_stamp,
            reply_hold_seconds=reply_hold,
            releases=tuple(
                (operation_id, release.incarnation_id, release.fencing_token)
                for operation_id, release in releases
            ),
        )
        try:
            outcome = await self._service.dispatch(call)
        except RunnerRefusal as refusal:
            reason = refusal.refusal.value
            if reason in DISPATCH_REFUSALS:
                floor = refusal.details.get("admission_floor")
                return DispatchRefused(
                    command.attempt,
                    reason,
                    self._incarnation,
                    refusal.message,
                    int(floor) if floor is not None else None,
                )
            return DispatchUnknown(command.attempt, str(refusal))
        view = _op(outcome.view)
        assert view is not None
        return DispatchAccepted(command.attempt, self._incarnation, view, outcome.duplicate)

    async def cancel(
        self, record: OperationRecord, command: commands.Cancel
    ) -> CancelAnswered | CancelFailed:
        try:
            outcome = await self._service.cancel(
                record.operation_id, command.incarnation_id, command.fencing_token
            )
        except RunnerRefusal as refusal:
            return CancelFailed(
                self._name, refusal.refusal.value, self._incarnation, refusal.message
            )
        return CancelAnswered(self._name, self._incarnation, _op(outcome.view), outcome.tombstoned)

    async def release(self, operation_id: str, command: commands.Release) -> bool:
        try:
            await self._service.release(operation_id, command.incarnation_id, command.fencing_token)
        except RunnerRefusal:
            return False
        return True

    async def info(self) -> RunnerInfo:
        info = self._service.info()
        return RunnerInfo(
            self._incarnation, info.store_id, slot_sizes(convert.slot_pools(info.pools))
        )

    def watch(self, after_sequence: int) -> _Watch:
        return _Watch(self._service, after_sequence, self.forgotten)

    async def close(self, grace: float | None = None) -> None:
        return None


class _Watch:
    """WatchOperations as the servicer streams it, minus the wire."""

    def __init__(self, service: RunnerService, after_sequence: int, forgotten: set[str]) -> None:
        self._service = service
        self._rows = service.watch(after_sequence)
        self._forgotten = forgotten

    def __aiter__(self) -> AsyncIterator[runner_pb2.WatchOperationsResponse]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[runner_pb2.WatchOperationsResponse]:
        async for view in self._rows:
            message = runner_pb2.WatchOperationsResponse(
                incarnation_id=self._service.incarnation_id,
                pools=convert.slot_pools(self._service.pool_use()),
            )
            if view is not None and view.row.operation_id not in self._forgotten:
                message.operation.CopyFrom(convert.operation(view))
            yield message

    def cancel(self) -> bool:
        return True  # the consumer stops iterating; the generator is then closed


def _op(view: OperationView | None) -> RunnerOp | None:
    return runner_op(convert.operation(view)) if view is not None else None
