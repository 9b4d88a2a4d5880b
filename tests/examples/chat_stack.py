"""The chat examples end to end: stub server, runner process, coordinator, client.

    with ChatStack.start(tmp_path) as stack:
        run = stack.submit_and_wait("chat", model="stub-echo", text="hello world")
        assert run.operation.state is OperationState.SUCCEEDED
        assert stack.stub.keys() == [run.operation_id]

- the stub: examples/http/stub_server.py on 127.0.0.1:0 (real HTTP, real SSE);
- the runner: a real ``python -m runner_svc serve`` process serving
  ``chat=python:openai_chat:chat`` (examples/http on its PYTHONPATH) and
  ``chat-js=subprocess+framed:exec node examples/framed/chat_stream.mjs``, with
  OPENAI_BASE_URL and OPENAI_API_KEY in its environment (where secrets go);
- the coordinator: in process (turnwire.testing's Stack, served by a
  StackThread, as tests/sdk's LiveStack is), over real gRPC on 127.0.0.1:0.

``submit_and_wait`` names the executor on the turn (``Turn.executor``) and takes a
``configure`` hook for any other field of the proto Turn (a retry policy, say).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from tests.contract.repo_copy import in_ci
from tests.support import runner_access
from tests.support.runner_process import REPO_ROOT, runner_process
from turnwire.client import Operation, TurnwireClient
from turnwire.client.sync import new_idempotency_key
from turnwire.client.turns import Turn
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.testing.processes import ServiceProcess
from turnwire.testing.stack import Stack, StackThread

EXAMPLES = REPO_ROOT / "examples"
TOKEN = "tok-chat-examples"
API_KEY = "sk-stub-only"  # the stub's key: given to the runner's environment, never the turn
EXECUTORS = (
    "--executor", "chat=python:openai_chat:chat",
    "--executor", "chat-js=subprocess+framed:exec node examples/framed/chat_stream.mjs",
)  # fmt: skip


def load_stub_server() -> ModuleType:
    """examples/http/stub_server.py as a module (examples/ is not a package)."""
    name = "stub_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / "http" / "stub_server.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def need_node() -> None:
    if shutil.which("node") is None:
        (pytest.fail if in_ci() else pytest.skip)("the JavaScript example needs node on PATH")


@dataclass(frozen=True)
class ChatRun:
    """One turn's end: the client's view and the coordinator's proto (every field)."""

    operation: Operation
    proto: coordinator_pb2.Operation

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @property
    def text(self) -> str:
        assert self.operation.result is not None, self.operation
        return self.operation.result.output.decode()


_NOT_YET = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


def _read_output(
    stream: Iterator[runner_pb2.StreamOutputResponse], first_only: bool
) -> tuple[list[bytes], runner_pb2.RunnerOperation | None]:
    chunks: list[bytes] = []
    for message in stream:
        if message.WhichOneof("item") == "chunk":
            chunks.append(message.chunk.data)
            if first_only:
                return chunks, None
        elif message.WhichOneof("item") == "end":
            return chunks, message.end.operation
    return chunks, None


class _Coordinator(StackThread):
    """The in-process coordinator (turnwire.testing's Stack) sent to the runner process."""

    def __init__(self, directory: Path, runner_address: str) -> None:
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self.stack.runner_at("r1", runner_address)
        self.address = ""

    async def _start(self) -> None:
        self.stack.add_token("alice", TOKEN)
        self.address = (await self.stack.start_coordinator()).address


class ChatStack:
    """The stub, a runner process and a coordinator; every part ended on exit."""

    def __init__(self, stub: Any, runner: ServiceProcess, coordinator: _Coordinator) -> None:
        self.stub = stub
        self.runner = runner
        self._coordinator = coordinator
        self.address = coordinator.address
        self.client = TurnwireClient(self.address, TOKEN)
        self._channel = grpc.insecure_channel(self.address)
        self._turns = coordinator_pb2_grpc.TurnServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {TOKEN}"),)

    @classmethod
    def start(cls, directory: Path, *, env: Mapping[str, str] | None = None) -> ChatStack:
        """Start everything (a part that fails to start ends those before it)."""
        need_node()
        stub = load_stub_server().StubServer(api_key=API_KEY).start()
        runner: ServiceProcess | None = None
        try:
            runner_env = {
                "PYTHONPATH": f"{REPO_ROOT}:{EXAMPLES / 'http'}",
                "OPENAI_BASE_URL": stub.base_url,
                "OPENAI_API_KEY": API_KEY,
                **(env or {}),
            }
            runner = runner_process(
                directory / "runner.db", directory, extra_args=EXECUTORS, env=runner_env
            )
            coordinator = _Coordinator(directory, runner.address).__enter__()
            return cls(stub, runner, coordinator)
        except BaseException:
            if runner is not None:
                runner.kill()
            stub.stop()
            raise

    def submit(
        self,
        executor: str,
        *,
        model: str,
        text: str,
        parameters: Mapping[str, str] | None = None,
        configure: Callable[[coordinator_pb2.Turn], None] | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Submit one turn for ``executor`` (a fresh idempotency key unless one is
        given); its operation id. ``configure`` may set any other field of the Turn."""
        turn = Turn.build(items=[text], model=model, parameters=parameters or {}).to_proto()
        turn.executor = executor
        if configure is not None:
            configure(turn)
        request = coordinator_pb2.SubmitTurnRequest(
            idempotency_key=idempotency_key or new_idempotency_key(), turn=turn
        )
        reply = self._turns.SubmitTurn(request, timeout=10, metadata=self._metadata)
        return str(reply.operation.operation_id)

    def wait(self, operation_id: str, timeout: float = 30.0) -> ChatRun:
        """Wait (bounded) until the operation is terminal."""
        operation = self.client.wait(operation_id, timeout=timeout)
        proto = self._turns.GetOperation(
            coordinator_pb2.GetOperationRequest(operation_id=operation_id),
            timeout=10,
            metadata=self._metadata,
        ).operation
        return ChatRun(operation, proto)

    def submit_and_wait(
        self,
        executor: str,
        *,
        model: str,
        text: str,
        parameters: Mapping[str, str] | None = None,
        configure: Callable[[coordinator_pb2.Turn], None] | None = None,
        idempotency_key: str | None = None,
        timeout: float = 30.0,
    ) -> ChatRun:
        """``submit`` then ``wait``."""
        operation_id = self.submit(
            executor,
            model=model,
            text=text,
            parameters=parameters,
            configure=configure,
            idempotency_key=idempotency_key,
        )
        return self.wait(operation_id, timeout)

    def runner_output(
        self, operation_id: str, *, first_only: bool = False, timeout: float = 10.0
    ) -> tuple[list[bytes], runner_pb2.RunnerOperation | None]:
        """What the runner streamed for the turn (its chunks, R13) and, once settled,
        its row (None with ``first_only``: returns at the first chunk). A turn not
        dispatched yet (NOT_FOUND), or accepted but not started (FAILED_PRECONDITION),
        has no stream there yet: asked again, bounded."""
        channel = runner_access.sync_channel(self.runner.address)
        deadline = time.monotonic() + timeout
        try:
            runner = runner_pb2_grpc.RunnerServiceStub(channel)
            request = runner_pb2.StreamOutputRequest(operation_id=operation_id)
            while True:
                try:
                    return _read_output(runner.StreamOutput(request, timeout=timeout), first_only)
                except grpc.RpcError as error:
                    not_yet = error.code() in _NOT_YET
                    if not not_yet or time.monotonic() > deadline:
                        raise
                time.sleep(0.02)
        finally:
            channel.close()

    def close(self) -> None:
        try:
            self.client.close()
            self._channel.close()
            self._coordinator.__exit__(None, None, None)
        finally:
            self.runner.terminate()
            try:
                code = self.runner.wait(20)
            finally:
                self.runner.kill()
                self.stub.stop()
            assert code == 0, self.runner.output()

    def __enter__(self) -> ChatStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
