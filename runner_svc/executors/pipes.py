"""Non-blocking pipe I/O for subprocess executors, on the event loop (no threads).

The pipes are the command's stdin, stdout and stderr; the leader is watched
through a pidfd (readable once it has exited, without reaping it, so its pid
cannot be reused while the runner still signals its group).
"""

from __future__ import annotations

import asyncio
import os
from typing import IO

_CHUNK = 65536
PIPE_BUF = 4096  # POSIX's atomic pipe write size on Linux


async def until_exited(pid: int) -> None:
    """Return once the process has exited, WITHOUT reaping it."""
    pidfd = os.pidfd_open(pid)  # readable once the process has exited
    try:
        await until_ready(pidfd, readable=True)
    finally:
        os.close(pidfd)


async def until_ready(fd: int, *, readable: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if readable:
        loop.add_reader(fd, wake)
    else:
        loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        if readable:
            loop.remove_reader(fd)
        else:
            loop.remove_writer(fd)


async def feed(pipe: IO[bytes], data: bytes, *, close: bool = True) -> None:
    """Write all of `data`, then close (unless told not to: the framed protocol
    keeps stdin for the runner's notices); a command that stops reading is not
    an error."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                await until_ready(fd, readable=False)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        if close:
            pipe.close()


async def read_bounded(pipe: IO[bytes], limit: int) -> bytes:
    """Everything up to EOF, or stop as soon as more than `limit` bytes came."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    data = bytearray()
    try:
        while len(data) <= limit:
            chunk = await read_some(fd)
            if not chunk:
                break
            data += chunk
    finally:
        pipe.close()
    return bytes(data)


async def read_tail(pipe: IO[bytes], keep: int) -> bytes:
    """Read to EOF, keeping only the last `keep` bytes."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    tail = bytearray()
    try:
        while chunk := await read_some(fd):
            tail += chunk
            del tail[:-keep]
    finally:
        pipe.close()
    return bytes(tail)


async def read_some(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, _CHUNK)
        except BlockingIOError:
            await until_ready(fd, readable=True)


def write_whole_or_drop(fd: int, line: bytes) -> bool:
    """Write ``line`` at once or not at all (POSIX makes a pipe write of at most
    PIPE_BUF bytes atomic): never blocks, never leaves half a line. False when
    the reader is not keeping up (the pipe is full) or is gone."""
    if len(line) > PIPE_BUF:
        return False
    try:
        return os.write(fd, line) == len(line)
    except OSError:  # BlockingIOError (full), BrokenPipeError (gone), ...
        return False
