"""Structured logs from a live run (issue 13): two turns, for two principals, at
once through a real in-process coordinator (SQLite journal, its API over a real
channel) and a real runner; every line is captured as the JSON the processes
write. Each line about a turn names it with its fields, and never the other's.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.observability.logs import log_handler
from turnwire.testing.stack import Stack

pytestmark = pytest.mark.timeout(60)

STREAM_TIMEOUT = 20.0
# The services' own loggers, at DEBUG for the run: every line they can write is audited.
SERVICE_LOGGERS = ("coordinator_svc", "runner_svc")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The services' log lines as the JSON handler writes them (restored after)."""
    buffer = io.StringIO()
    handler = log_handler("json", stream=buffer)
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in SERVICE_LOGGERS}
    for name in SERVICE_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


async def _run_to_end(stub: Any, key: str, token: str) -> coordinator_pb2.Operation:
    call = stub.SubmitAndWatch(
        coordinator_pb2.SubmitAndWatchRequest(submit=submit_request(key), terminal_only=True),
        metadata=bearer(token),
    )
    last: coordinator_pb2.Operation | None = None
    async with asyncio.timeout(STREAM_TIMEOUT):
        async for message in call:
            last = message.operation
    assert last is not None
    return last


async def _until_logged(captured: io.StringIO, *needles: str) -> None:
    """Until every needle is in some captured line (bounded: 10 s)."""
    for _ in range(200):
        text = captured.getvalue()
        if all(needle in text for needle in needles):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never logged: {needles}")


def _two_turns(
    tmp_path: Path, captured: io.StringIO
) -> tuple[dict[str, coordinator_pb2.Operation], str]:
    """Runs alice's and bob's turns at once, until the runner has released both;
    returns them by principal, and the runner's incarnation."""

    async def scenario() -> tuple[dict[str, coordinator_pb2.Operation], str]:
        async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
            runner = await stack.start_runner("r1", executor="echo")
            alice, bob = stack.add_token("alice"), stack.add_token("bob")
            coordinator = await stack.start_coordinator()
            async with grpc.aio.insecure_channel(coordinator.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                ran = await asyncio.gather(
                    _run_to_end(stub, "logs-a", alice), _run_to_end(stub, "logs-b", bob)
                )
            # The Releases go after the terminal commits (C10): their lines too.
            await _until_logged(captured, *(f"release {op.operation_id}" for op in ran))
            await stack.stop_coordinator()
            await runner.stop(drain=True)
        return {"alice": ran[0], "bob": ran[1]}, runner.incarnation_id

    return asyncio.run(scenario())


def test_every_line_about_a_turn_carries_its_fields_and_no_other_turns(
    tmp_path: Path, captured: io.StringIO
) -> None:
    """Each line naming an operation carries operation_id, and principal, runner,
    incarnation and attempt as far as the process knows them; no line carries the
    other turn's fields (two principals' turns ran at once)."""
    turns, incarnation = _two_turns(tmp_path, captured)
    lines = [json.loads(text) for text in captured.getvalue().splitlines()]
    for principal, operation in turns.items():
        assert operation.state == coordinator_pb2.OPERATION_STATE_SUCCEEDED
        op_id = operation.operation_id
        about = [line for line in lines if op_id in line["msg"]]
        by_service = {
            name: [line for line in about if line["logger"].startswith(name)]
            for name in SERVICE_LOGGERS
        }
        # The coordinator's transitions, and the runner's dispatch, settlement
        # and release lines at least.
        assert len(by_service["coordinator_svc"]) >= 2, about
        assert len(by_service["runner_svc"]) >= 3, about
        for line in about:
            assert line["operation_id"] == op_id, line
        for line in by_service["coordinator_svc"]:
            # The coordinator knows the principal from the start, the runner, its
            # incarnation and the attempt once the turn is bound to it (every
            # transition here is to or past DISPATCHING).
            assert line["principal"] == principal, line
            bound = (line.get("runner"), line.get("incarnation"), line.get("attempt"))
            assert bound in ((None, None, None), ("r1", incarnation, 1)), line
            if "->" in line["msg"]:
                assert bound == ("r1", incarnation, 1), line
        for line in by_service["runner_svc"]:
            assert line["incarnation"] == incarnation, line
            if not line["msg"].startswith("release "):  # a Release names neither
                assert (line["principal"], line["attempt"]) == (principal, 1), line
        # Nothing logged under this turn's id is about the other turn.
        for line in lines:
            if line.get("operation_id") == op_id:
                assert line.get("principal", principal) == principal, line
                assert not any(
                    other.operation_id in line["msg"]
                    for other in turns.values()
                    if other.operation_id != op_id
                ), line
    assert all(line["ts"].endswith("Z") and "T" in line["ts"] for line in lines)
