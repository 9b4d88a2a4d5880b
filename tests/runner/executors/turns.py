"""Building execution requests and watching processes for the executor tests."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from runner_svc.executors import ExecutionHandle, ExecutionOutcome, ExecutionRequest
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2

INCARNATION = "0123456789abcdef0123456789abcdef"


def make_request(
    operation_id: str = "op-1",
    *,
    parameters: dict[str, str] | None = None,
    contents: tuple[bytes, ...] = (b"hello ", b"world"),
    attempt: int = 1,
    incarnation_id: str = INCARNATION,
) -> ExecutionRequest:
    """A request whose envelope carries `parameters` and one input item per content."""
    envelope = runner_pb2.TurnEnvelope(
        operation_id=operation_id,
        routing=runner_pb2.Routing(pool="default"),
        model=turn_pb2.ModelRef(provider="test", name="model", parameters=parameters or {}),
        input_items=[
            turn_pb2.InputItem(
                item_id=f"item-{n}", role="user", content_type="text/plain", content=c
            )
            for n, c in enumerate(contents)
        ],
        kind=turn_pb2.TURN_KIND_WRITABLE,
        principal="tester",
    )
    envelope_bytes = envelope.SerializeToString(deterministic=True)
    return ExecutionRequest(
        operation_id=operation_id,
        incarnation_id=incarnation_id,
        attempt=attempt,
        envelope=envelope,
        envelope_bytes=envelope_bytes,
    )


SETTLE_SECONDS = 20.0


async def settle(handle: ExecutionHandle) -> ExecutionOutcome:
    """The handle's outcome, or a test failure if it does not settle within SETTLE_SECONDS."""
    return await asyncio.wait_for(handle.wait(), SETTLE_SECONDS)


def is_running(pid: int) -> bool:
    """True while `pid` is a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in {"Z", "X"}  # an unreaped zombie runs nothing


def gone_within(pid: int, seconds: float = 5.0) -> bool:
    """Poll (bounded) until `pid` no longer runs; False if it still runs after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not is_running(pid):
            return True
        time.sleep(0.02)
    return not is_running(pid)


def _read_if_present(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


async def read_pid_file(path: Path, seconds: float = 10.0) -> int:
    """The pid a command wrote to `path`, polling (bounded) until it is complete."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = _read_if_present(path)  # tiny local file: reading it cannot stall the loop
        if text.endswith("\n"):
            return int(text)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no pid appeared in {path}")
