"""Functions the callable executor tests load by `callable:<module>:<function>`."""

from __future__ import annotations

import asyncio
import threading
import time

from runner_svc.executors import ExecutionRequest

NOT_CALLABLE = "a string, not a function"
# Set by a test to let slow_sync return.
release_slow_sync = threading.Event()


def sync_upper(request: ExecutionRequest) -> str:
    """Upper-cases the input contents."""
    return b"".join(item.content for item in request.envelope.input_items).decode().upper()


def sync_bytes(request: ExecutionRequest) -> bytes:
    """Returns the operation id and the thread it ran on."""
    return f"{request.operation_id}|{threading.current_thread().name}".encode()


async def async_echo(request: ExecutionRequest) -> bytes:
    """Returns the envelope bytes after yielding to the loop."""
    await asyncio.sleep(0)
    return request.envelope_bytes


async def async_forever(request: ExecutionRequest) -> str:
    """Sleeps far longer than any test: only a cancel ends it."""
    await asyncio.sleep(3600)
    return "never"


def sync_raises(request: ExecutionRequest) -> str:
    """Fails with a recognisable message."""
    raise RuntimeError(f"model exploded for {request.operation_id}")


async def async_raises(request: ExecutionRequest) -> str:
    """Fails with a recognisable message after yielding."""
    await asyncio.sleep(0)
    raise ValueError("bad async turn")


def sync_returns_number(request: ExecutionRequest) -> int:
    """Returns something that is neither bytes nor str."""
    return 42


def slow_sync(request: ExecutionRequest) -> str:
    """Blocks until the test releases it (bounded), then returns."""
    released = release_slow_sync.wait(timeout=30)
    time.sleep(0)
    return "finished" if released else "timed out waiting"
