"""The fault proxy as its own process, driven by its CLI (python -m turnwire.faults)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from tests.faults.scripted_runner import DISPATCH, call_dispatch, scripted_upstream
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
OK = grpc.StatusCode.OK
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


async def run_cli(*args: str) -> tuple[int, str, str]:
    """Run ``python -m turnwire.faults ARGS`` to completion (bounded); (rc, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnwire.faults",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _announced(path: Path) -> str | None:
    """The address a process wrote (atomically) to ``path``, if it has yet."""
    return path.read_text().strip() if path.exists() else None


async def _wait_for_file(path: Path, proc: asyncio.subprocess.Process) -> str:
    for _ in range(400):  # 20 s at most
        address = _announced(path)
        if address:
            return address
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    raise AssertionError(f"proxy did not announce {path.name} (exit code {proc.returncode})")


@asynccontextmanager
async def proxy_process(
    upstream: str, tmp_path: Path, *extra: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, str]]:
    """A proxy process with a control API; yields (process, address, control address).

    Ended by SIGTERM to its PID (then SIGKILL if it lingers) in every case.
    """
    address_file, control_file = tmp_path / "proxy.addr", tmp_path / "control.addr"
    with (tmp_path / "stdout").open("wb") as out, (tmp_path / "stderr").open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "turnwire.faults",
            "proxy",
            "--upstream",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--control",
            "127.0.0.1:0",
            "--address-file",
            str(address_file),
            "--control-address-file",
            str(control_file),
            *extra,
            cwd=ROOT,
            stdout=out,
            stderr=err,
        )
    try:
        address = await _wait_for_file(address_file, proc)
        yield proc, address, await _wait_for_file(control_file, proc)
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()


def test_proxy_process_faults_and_rules_changed_through_the_cli(tmp_path: Path) -> None:
    """A proxy process faults per --rule; `rules add|list|clear` and `stats` change/read it."""

    async def main() -> None:
        async with scripted_upstream() as (upstream, address):
            rule = "drop-request method=Dispatch nth=1"
            async with proxy_process(address, tmp_path, "--rule", rule) as (proc, proxy, control):
                async with grpc.aio.insecure_channel(proxy) as channel:
                    stub = runner_pb2_grpc.RunnerServiceStub(channel)
                    assert await call_dispatch(stub, "op-1") == UNAVAILABLE
                    assert await call_dispatch(stub, "op-2") == OK
                    assert upstream.dispatched == ["op-2"]

                    rc, out, _ = await run_cli(
                        "rules", "add", "--control", control, "drop-response method=Dispatch"
                    )
                    assert (rc, out.strip()) == (
                        0,
                        "rule 2: drop-response method=Dispatch  hits=0 selected=0",
                    )
                    assert await call_dispatch(stub, "op-3") == UNAVAILABLE
                    assert upstream.dispatched == ["op-2", "op-3"]  # it arrived: the runner acted

                    rc, out, _ = await run_cli("rules", "list", "--control", control, "--json")
                    listed = json.loads(out)
                    assert rc == 0
                    assert [(r["text"], r["hits"]) for r in listed] == [
                        (rule, 1),
                        ("drop-response method=Dispatch", 1),
                    ]
                    rc, out, _ = await run_cli("stats", "--control", control, "--json")
                    stats = json.loads(out)
                    assert stats["calls_by_method"] == {DISPATCH: 3}
                    assert (stats["dropped_requests"], stats["dropped_responses"]) == (1, 1)

                    rc, out, err = await run_cli("rules", "add", "--control", control, "explode")
                    assert rc == 2 and "unknown action" in err
                    rc, out, _ = await run_cli("rules", "remove", "--control", control, "99")
                    assert (rc, out.strip()) == (1, "no rule 99")
                    rc, out, _ = await run_cli("rules", "clear", "--control", control)
                    assert (rc, out.strip()) == (0, "removed 2 rules")
                    assert await call_dispatch(stub, "op-4") == OK

                    watch = stub.WatchOperations(runner_pb2.WatchOperationsRequest(), timeout=5)
                    assert [m.operation.sequence async for m in watch] == [1, 2, 3]
                os.kill(proc.pid, signal.SIGTERM)
                assert await asyncio.wait_for(proc.wait(), 10) == 0

    asyncio.run(main())
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert "listening on 127.0.0.1:" in stdout and "control on 127.0.0.1:" in stdout
    assert "stopping; calls:" in stdout
    assert f"fault rule=1 action=drop-request method={DISPATCH} op=op-1: not forwarded" in stderr
    assert f"fault rule=2 action=drop-response method={DISPATCH} op=op-3: upstream replied OK" in (
        stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--upstream", "127.0.0.1:1", "--listen", "0.0.0.0:0"), "listen address"),
        (("--upstream", "10.0.0.1:50051"), "upstream address"),
        (("--upstream", "127.0.0.1:1", "--control", "0.0.0.0:0"), "control address"),
        (("--upstream", "127.0.0.1:1", "--rule", "explode"), "unknown action"),
    ],
)
def test_proxy_cli_refuses_bad_input(args: tuple[str, ...], message: str) -> None:
    """Bad input: non-loopback addresses and bad rules exit 2 with the reason, serving nothing."""
    rc, out, err = asyncio.run(run_cli("proxy", *args))
    assert rc == 2
    assert message in err
    assert "listening on" not in out


@pytest.mark.parametrize(
    "args", [("--help",), ("proxy", "--help"), ("rules", "add", "--help"), ("stats", "--help")]
)
def test_cli_help_answers(args: tuple[str, ...]) -> None:
    """--help answers for every command."""
    rc, out, _ = asyncio.run(run_cli(*args))
    assert rc == 0 and out.startswith("usage: python -m turnwire.faults")


def test_cli_reports_an_unreachable_control_service() -> None:
    """A control address nobody serves is reported with its status, exit 1."""

    async def main() -> tuple[int, str, str]:
        async with scripted_upstream() as (_, address):
            pass  # stopped: a loopback port nobody listens on any more
        return await run_cli("rules", "list", "--control", address)

    rc, _, err = asyncio.run(main())
    assert rc == 1
    assert "control service at 127.0.0.1:" in err and "UNAVAILABLE" in err
