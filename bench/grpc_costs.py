"""What gRPC itself costs here, per exchange: the figures behind issue 10's structural choices.

    .venv/bin/python -m bench grpc_costs [--ops N] [--json]

One server process (on the loop the services run on: uvloop when installed)
and this client, both measured by CPU per exchange, for two questions:

1. a unary call against one message each way on a long-lived bidirectional
   stream, sequentially and with 16 in flight: what a batched
   coordinator -> runner stream would save per Dispatch;
2. a unary call answered at once against one answered after a few
   milliseconds (``--delay-ms``, a no-op turn's time at the runner): what a
   call costs more when both processes sleep and wake between its events,
   which is why a sequential turn costs nearly twice a concurrent one.

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.e2e_processes import STOP_GRACE, scratch, tree_cpu_seconds, wait_quiet
from turnwire import event_loop
from turnwire.launcher import LaunchError, python_module

SERVICE = "turnwire.bench.Costs"
PAYLOAD_BYTES = 256
KEY_BYTES = 8  # a stream message starts with the key its answer is matched by
RPC_TIMEOUT = 10.0
LOOP_TIMEOUT = 120.0
DEFAULT_OPS = 2000
QUICK_OPS = 100
DEFAULT_DELAY_MS = 5.0


# --- the server (``--serve``) ------------------------------------------------


def _handlers(delay: float) -> grpc.GenericRpcHandler:
    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def delayed(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(delay)
        return request

    async def exchange(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Delayed": grpc.unary_unary_rpc_method_handler(delayed),
            "Exchange": grpc.stream_stream_rpc_method_handler(exchange),
        },
    )


async def serve(address_file: Path, delay: float) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_handlers(delay),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    partial = address_file.with_suffix(".tmp")
    partial.write_text(f"127.0.0.1:{port}\n")
    partial.replace(address_file)  # a reader never sees half an address
    await server.wait_for_termination()


# --- the client --------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """One measured loop: ops/s and CPU per exchange on each side (ms)."""

    name: str
    in_flight: int
    ops_per_second: float
    client_cpu_ms: float
    server_cpu_ms: float

    @property
    def both_ms(self) -> float:
        return self.client_cpu_ms + self.server_cpu_ms


class StreamExchange:
    """Many exchanges on one bidirectional stream, each answer matched by its key
    (writes are serialized: grpc.aio allows one write in flight per call)."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._waiting: dict[bytes, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()
        self._next = 0
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for answer in self._call:
            waiter = self._waiting.pop(answer[:KEY_BYTES], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def once(self) -> None:
        self._next += 1
        key = self._next.to_bytes(KEY_BYTES, "big")
        answered = asyncio.get_running_loop().create_future()
        self._waiting[key] = answered
        async with self._lock:
            await self._call.write(key + b"x" * (PAYLOAD_BYTES - KEY_BYTES))
        await answered

    async def close(self) -> None:
        self._call.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def measure(
    name: str, once: Callable[[], Awaitable[Any]], server_pid: int | None, in_flight: int, ops: int
) -> Cost:
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            await once()

    async with asyncio.timeout(LOOP_TIMEOUT):
        await asyncio.gather(*(one() for _ in range(max(5, ops // 10))))  # warm-up
        server_before = tree_cpu_seconds({"server": server_pid})["server"]
        client_before, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one() for _ in range(ops)))
        seconds = time.perf_counter() - started
        client = time.process_time() - client_before
        server = tree_cpu_seconds({"server": server_pid})["server"] - server_before
    cost = Cost(name, in_flight, ops / seconds, client * 1000 / ops, server * 1000 / ops)
    progress(
        f"{name} x{in_flight}: {cost.ops_per_second:.0f} ops/s, CPU per exchange "
        f"client {cost.client_cpu_ms:.3f} + server {cost.server_cpu_ms:.3f} ms"
    )
    return cost


async def measure_all(address: str, server_pid: int | None, ops: int) -> list[Cost]:
    payload = b"x" * PAYLOAD_BYTES
    costs: list[Cost] = []
    async with grpc.aio.insecure_channel(address) as channel:
        unary = channel.unary_unary(f"/{SERVICE}/Unary")
        delayed = channel.unary_unary(f"/{SERVICE}/Delayed")
        stream = StreamExchange(channel.stream_stream(f"/{SERVICE}/Exchange")())
        try:

            async def unary_once() -> None:
                await unary(payload, timeout=RPC_TIMEOUT)

            async def delayed_once() -> None:
                await delayed(payload, timeout=RPC_TIMEOUT)

            for in_flight in (1, 16):
                costs.append(await measure("unary", unary_once, server_pid, in_flight, ops))
                costs.append(
                    await measure("stream message", stream.once, server_pid, in_flight, ops)
                )
            costs.append(await measure("unary, delayed", delayed_once, server_pid, 1, ops // 4))
        finally:
            await stream.close()
    return costs


def lines(costs: list[Cost], delay_ms: float) -> list[str]:
    out = ["CPU per exchange, this client + one server process (ms)"]
    for cost in costs:
        out.append(
            f"  {cost.name:<15} x{cost.in_flight:<3} {cost.ops_per_second:8.0f} ops/s   "
            f"client {cost.client_cpu_ms:.3f} + server {cost.server_cpu_ms:.3f} "
            f"= {cost.both_ms:.3f}"
        )
    by = {(c.name, c.in_flight): c for c in costs}
    for in_flight in (1, 16):
        unary, stream = by[("unary", in_flight)], by[("stream message", in_flight)]
        out.append(
            f"a stream message instead of a unary call, x{in_flight}: "
            f"{unary.both_ms - stream.both_ms:+.3f} ms saved per exchange "
            f"({stream.both_ms / unary.both_ms:.2f}x the CPU)"
        )
    quick, slow = by[("unary", 1)], by[("unary, delayed", 1)]
    out.append(
        f"a unary call answered after {delay_ms:.1f} ms instead of at once: "
        f"{slow.both_ms - quick.both_ms:+.3f} ms more CPU ({slow.both_ms / quick.both_ms:.2f}x)"
    )
    return out


def progress(line: str) -> None:
    print(f"[grpc-costs] {line}", file=sys.stderr, flush=True)


async def run(ops: int, delay_ms: float) -> list[Cost]:
    with scratch(False) as area:
        await wait_quiet(progress)
        argv = python_module("bench.grpc_costs", "--serve", "--delay-ms", str(delay_ms))
        server = area.start("costs-server", argv, healthy=False)
        try:
            return await measure_all(server.address, server.pid, ops)
        finally:
            server.terminate(STOP_GRACE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--ops",
        type=int,
        default=None,
        help=f"exchanges per loop (default {DEFAULT_OPS}, {QUICK_OPS} with --quick; "
        "the delayed loop runs a quarter)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=DEFAULT_DELAY_MS,
        help=f"how long the delayed call waits at the server (default {DEFAULT_DELAY_MS})",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address-file", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        if args.address_file is None:
            parser.error("--serve needs --address-file")
        event_loop.run(serve(args.address_file, args.delay_ms / 1000))
        return 0
    ops = args.ops if args.ops is not None else (QUICK_OPS if args.quick else DEFAULT_OPS)
    if ops < 4 or args.delay_ms < 0:
        parser.error("--ops must be >= 4 and --delay-ms >= 0")
    try:
        costs = event_loop.run(run(ops, args.delay_ms))
    except LaunchError as error:
        print(f"grpc_costs: the server did not start: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([asdict(c) | {"both_ms": round(c.both_ms, 4)} for c in costs], indent=2))
    else:
        print("\n".join(lines(costs, args.delay_ms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
