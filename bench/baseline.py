"""The raw gRPC baseline every Turnwire figure is divided by.

A grpc.aio echo server with a generic bytes-in/bytes-out handler, measured
with the same client loop as the end-to-end run: sequentially and with N
calls in flight. Run as ``python -m bench baseline --serve`` to get a server
process (it prints its address), or import ``measure_echo``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

ECHO_METHOD = "/turnwire.bench.Echo/Echo"
# Turnwire's shape with no work in it (bench/floor.py): a server-streaming call
# (like SubmitAndWatch) whose one reply waits for a unary Echo to another
# server (like Dispatch to a runner).
RELAY_METHOD = "/turnwire.bench.Echo/Relay"


def _echo_handler(relay_to: str | None = None) -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    handlers = {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    if relay_to is not None:
        onward = grpc.aio.insecure_channel(relay_to).unary_unary(ECHO_METHOD)

        async def relay(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            yield await onward(request, timeout=10)

        handlers["Relay"] = grpc.unary_stream_rpc_method_handler(relay)
    return grpc.method_handlers_generic_handler("turnwire.bench.Echo", handlers)


async def serve_echo(
    listen: str = "127.0.0.1:0", relay_to: str | None = None
) -> tuple[grpc.aio.Server, str]:
    """An echo server; with ``relay_to`` also the Relay method, onward to that echo server."""
    server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
    server.add_generic_rpc_handlers((_echo_handler(relay_to),))
    port = server.add_insecure_port(listen)
    await server.start()
    return server, f"127.0.0.1:{port}"


@dataclass(frozen=True)
class Figures:
    """Throughput and latency of one measured loop."""

    label: str
    operations: int
    seconds: float
    latencies: tuple[float, ...]

    @property
    def ops_per_second(self) -> float:
        return self.operations / self.seconds if self.seconds else 0.0

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
        return ordered[index]

    @property
    def p50_ms(self) -> float:
        return self.percentile(0.50) * 1000

    @property
    def p99_ms(self) -> float:
        return self.percentile(0.99) * 1000

    @property
    def p99_over_p50(self) -> float | None:
        """How far the slowest 1% sit from the middle; None without a p50."""
        return self.p99_ms / self.p50_ms if self.p50_ms else None

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies) * 1000 if self.latencies else 0.0


async def measure(
    label: str, operation: Callable[[int], Awaitable[None]], count: int, in_flight: int
) -> Figures:
    """Run ``operation(i)`` ``count`` times with at most ``in_flight`` at once."""
    latencies: list[float] = []
    semaphore = asyncio.Semaphore(in_flight)

    async def one(index: int) -> None:
        async with semaphore:
            started = time.perf_counter()
            await operation(index)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return Figures(label, count, time.perf_counter() - started, tuple(latencies))


async def measure_echo(address: str, count: int, in_flight: int, payload: bytes) -> Figures:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(ECHO_METHOD)

        async def echo_once(index: int) -> None:
            del index
            await call(payload, timeout=10)

        await echo_once(0)  # warm the connection outside the measurement
        return await measure(f"grpc echo x{in_flight}", echo_once, count, in_flight)


def _write_address(path: Path, address: str) -> None:
    """Atomically, so a reader (turnwire.launcher) never sees half an address."""
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(address + "\n")
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="run an echo server until killed")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument(
        "--address-file", default=None, help="with --serve: also write the address to this file"
    )
    parser.add_argument(
        "--relay-to",
        default=None,
        metavar="ADDRESS",
        help="with --serve: also serve Relay, each call an Echo to the server at ADDRESS",
    )
    args = parser.parse_args(argv)

    async def run() -> None:
        server, address = await serve_echo(relay_to=args.relay_to)
        if args.serve:
            print(f"listening on {address}", flush=True)
            if args.address_file:
                _write_address(Path(args.address_file), address)
            await server.wait_for_termination()
            return
        try:
            for in_flight in (1, 16):
                figures = await measure_echo(address, args.count, in_flight, b"x" * 256)
                print(
                    f"{figures.label:<20} {figures.ops_per_second:>9.0f} ops/s  "
                    f"p50 {figures.p50_ms:6.2f} ms  p99 {figures.p99_ms:6.2f} ms"
                )
        finally:
            await server.stop(None)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
