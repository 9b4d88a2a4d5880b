"""C4 / §8 item 5 at the engine level: every Dispatch leaves only after its attempt row
is committed. The check reads the journal through a *second* connection from inside the
runner channel, at the moment each Dispatch is about to go on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.core.model import AttemptOutcome, OpState
from coordinator_svc.ports import Journal
from coordinator_svc.storage import open_journal
from tests.support.fault_interceptor import DROP_REQUEST, Fault, FaultInterceptor
from turnwire.runner.v1 import runner_pb2
from turnwire.testing.dispatcher_rig import Rig, sqlite_journal


class WriteAheadWitness(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Before each Dispatch is sent: is its attempt row already committed?"""

    def __init__(self, reader: Journal) -> None:
        self.reader = reader
        self.seen: list[tuple[str, int, bool]] = []

    async def intercept_unary_unary(
        self,
        continuation: Callable[[Any, Any], Awaitable[Any]],
        client_call_details: Any,
        request: Any,
    ) -> Any:
        method = client_call_details.method
        name = method.decode() if isinstance(method, bytes) else str(method)
        if name.endswith("/Dispatch") and isinstance(request, runner_pb2.DispatchRequest):
            attempts = await self.reader.attempts(request.operation_id)
            record = await self.reader.get(request.operation_id)
            committed = any(
                a.number == request.attempt
                and a.incarnation_id == request.expected_incarnation_id
                and a.outcome is AttemptOutcome.PENDING
                for a in attempts
            ) and (record is not None and record.state is OpState.DISPATCHING)
            self.seen.append((request.operation_id, request.attempt, committed))
        return await continuation(client_call_details, request)


@pytest.mark.rule("C4")
def test_every_dispatch_is_sent_after_its_attempt_row_is_committed(tmp_path: Path) -> None:
    """C4/§8.5: first sends and replays alike find their PENDING attempt row (and the
    DISPATCHING state) already committed, read through another connection."""

    async def scenario() -> None:
        path = tmp_path / "journal.db"
        journal = sqlite_journal(path)
        reader = open_journal(f"sqlite:///{path}")
        witness = WriteAheadWitness(reader)
        # The first Dispatch request is lost: its replay must be written ahead too.
        faults = FaultInterceptor(Fault("Dispatch", DROP_REQUEST, nth=1))
        rig = Rig(tmp_path, journal, interceptors=[witness, *faults.all()])
        try:
            await rig.start_runner()
            await rig.make_dispatcher().start()
            ops = [await rig.submit() for _ in range(4)]
            for op_id in ops:
                assert (await rig.terminal(op_id)).state is OpState.SUCCEEDED
            assert len(witness.seen) >= len(ops) + 1, witness.seen
            assert all(committed for _, _, committed in witness.seen), witness.seen
            assert any(attempt == 2 for _, attempt, _ in witness.seen), "no replay was sent"
        finally:
            await rig.close()
            await reader.close()

    asyncio.run(scenario())
