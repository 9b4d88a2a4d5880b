"""The one in-process stack: real runners and a real coordinator in one event loop.

Every service is the shipped one (``runner_svc.app.start_runner``,
``coordinator_svc.app.start_coordinator``) serving real gRPC on 127.0.0.1:0,
with its data in one directory: each runner's SQLite store, the coordinator's
SQLite journal (or the PostgreSQL URL given), the tokens file, the metered
executor's ledger. Nothing is mocked; nothing listens beyond loopback.

    async with Stack(tmp_path) as stack:
        await stack.start_runner("r1", executor="metered", ledger_path=stack.ledger)
        token = stack.add_token("alice")
        coordinator = await stack.start_coordinator()
        ...  # call coordinator.address with a real channel

``StackThread`` serves a Stack from an event loop on a thread of its own, for
tests that call it from synchronous code (the blocking client, the CLI).

Runners demand a shared secret of their coordinator (issue 11): a fresh one
per stack unless ``secret`` (or ``access``, the runners' rule, and optionally
``credentials``, what the coordinators present) is given; ``stack.credentials``
is what a test presents to call a runner itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import grpc

from coordinator_svc.api.tokens_file import DEFAULT_SCOPES, Scope, TokenEntry, token_digest
from coordinator_svc.app import RunningCoordinator, start_coordinator
from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
from coordinator_svc.storage import migrate
from runner_svc.app import RunnerConfig, RunningRunner, start_runner
from runner_svc.executors import Executor
from runner_svc.service import ServiceSettings
from turnwire.transport_security import RunnerAccess, RunnerCredentials, new_secret

T = TypeVar("T")
COORDINATOR = "coordinator"
# Every start, stop and call a StackThread makes for its test is bounded by this.
STEP_SECONDS = 30.0


class Stack:
    """Runners and coordinators started in the running event loop, all under ``directory``.

    ``journal_url``: the coordinators' journal (default: ``directory/journal.db``
    on SQLite; a PostgreSQL URL works the same). It is migrated once, before the
    first coordinator starts. ``close`` stops every service this stack ever
    started (a test may have stopped one, or started another under its name),
    coordinators first (so they stop sending), then runners, then what
    ``defer`` registered, last first.
    """

    def __init__(
        self,
        directory: Path,
        *,
        journal_url: str = "",
        secret: str | None = None,
        access: RunnerAccess | None = None,
        credentials: RunnerCredentials | None = None,
    ) -> None:
        self.directory = directory
        self.journal_url = journal_url or f"sqlite:///{directory / 'journal.db'}"
        if access is None:
            shared = secret or new_secret()
            access = RunnerAccess(secret=shared)
            credentials = credentials or RunnerCredentials(secret=shared)
        if credentials is None:  # what the runners accept, as local tools present it
            credentials = RunnerCredentials.for_access(access)
        self.access = access
        self.credentials = credentials
        self.runners: dict[str, RunningRunner] = {}
        # Name -> address of every runner the coordinators are told about: the ones
        # started here and any served elsewhere (``runner_at``).
        self.runner_addresses: dict[str, str] = {}
        self.coordinators: dict[str, RunningCoordinator] = {}
        self.tokens: dict[str, str] = {}  # label (default: the principal) -> raw token
        self._migrated: set[str] = set()
        # Every service ever started here, stopped again at close (a stop is idempotent):
        # a test may stop one itself, or start another under the same name.
        self._started_runners: list[RunningRunner] = []
        self._started_coordinators: list[RunningCoordinator] = []
        self._deferred: list[Callable[[], Awaitable[object]]] = []

    # --- files -------------------------------------------------------------------------

    @property
    def ledger(self) -> Path:
        """The metered executor's ledger (give it as ``ledger_path`` to the runners)."""
        return self.directory / "ledger.jsonl"

    @property
    def tokens_file(self) -> Path:
        return self.directory / "tokens"

    def add_token(
        self,
        principal: str,
        token: str | None = None,
        *,
        scopes: Iterable[Scope] = DEFAULT_SCOPES,
        expires_at: datetime | None = None,
        label: str | None = None,
    ) -> str:
        """Append ``principal``'s line to the tokens file (owner-only, as the coordinator
        demands) and return its raw token: ``token``, or a fresh random one. A running
        coordinator picks the line up when it next reloads the file."""
        raw = token if token is not None else "tw_" + new_secret()
        entry = TokenEntry(principal, token_digest(raw), frozenset(scopes), expires_at)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.tokens_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            out.write(entry.line() + "\n")
        self.tokens[label or principal] = raw
        return raw

    # --- runners -----------------------------------------------------------------------

    async def start_runner(
        self,
        name: str = "r1",
        *,
        settings: ServiceSettings | None = None,
        executor_override: Executor | None = None,
        **config: Any,
    ) -> RunningRunner:
        """A runner named ``name`` with its store at ``directory/<name>.db`` unless
        ``store_path`` says otherwise; ``config`` holds any other RunnerConfig field
        (``executor``, ``listen``, ``writable_slots``, ``ledger_path``...)."""
        values: dict[str, Any] = {
            "store_path": self.directory / f"{name}.db",
            "access": self.access,
            "drain_seconds": 1.0,
        }
        runner = await start_runner(
            RunnerConfig(**(values | config)), settings=settings, executor=executor_override
        )
        self.runners[name] = runner
        self._started_runners.append(runner)
        self.runner_addresses[name] = runner.address
        return runner

    def runner_at(self, name: str, address: str) -> None:
        """Tell the coordinators started from now on about a runner served elsewhere
        (another process, or an address where nothing listens yet)."""
        self.runner_addresses[name] = address

    async def stop_runner(self, name: str, *, drain: bool = False) -> None:
        """Stop ``name`` (its address stays known: a runner started again may take it)."""
        await self.runners.pop(name).stop(drain=drain)

    # --- coordinators ------------------------------------------------------------------

    def endpoints(self) -> tuple[RunnerEndpoint, ...]:
        return tuple(
            RunnerEndpoint(name=name, address=address)
            for name, address in sorted(self.runner_addresses.items())
        )

    def migrate(self, journal_url: str = "") -> None:
        """Bring the journal (default: the stack's) to the schema head, once per stack."""
        url = journal_url or self.journal_url
        if url not in self._migrated:
            migrate(url)
            self._migrated.add(url)

    def coordinator_config(self, **fields: Any) -> CoordinatorConfig:
        """A coordinator on this stack's journal and tokens file, sent to every known
        runner with this stack's credentials; ``fields`` override any of it."""
        values: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "journal_url": self.journal_url,
            "runners": self.endpoints(),
            "tokens_file": str(self.tokens_file) if self.tokens_file.exists() else None,
            "runner_credentials": self.credentials,
        }
        return CoordinatorConfig(**(values | fields))

    async def start_coordinator(
        self,
        config: CoordinatorConfig | None = None,
        *,
        name: str = COORDINATOR,
        interceptors: Iterable[grpc.aio.ClientInterceptor] = (),
        **fields: Any,
    ) -> RunningCoordinator:
        """Start a coordinator (``config``, else ``coordinator_config(**fields)``) as
        ``name``, migrating its journal first if this stack has not yet."""
        config = config or self.coordinator_config(**fields)
        self.migrate(config.journal_url)
        running = await start_coordinator(config, interceptors=tuple(interceptors))
        self.coordinators[name] = running
        self._started_coordinators.append(running)
        return running

    @property
    def coordinator(self) -> RunningCoordinator:
        return self.coordinators[COORDINATOR]

    @property
    def address(self) -> str:
        """The coordinator's public API address."""
        return self.coordinator.address

    async def stop_coordinator(self, name: str = COORDINATOR, *, grace: float = 1.0) -> None:
        running = self.coordinators.pop(name, None)
        if running is not None:
            await running.stop(grace=grace)

    async def restart_coordinator(
        self,
        name: str = COORDINATOR,
        *,
        interceptors: Iterable[grpc.aio.ClientInterceptor] = (),
        **fields: Any,
    ) -> RunningCoordinator:
        """Stop ``name`` and start it again on the same address and journal (C12), its
        config changed by ``fields``; its relay buffers and memory go with it."""
        before = self.coordinators[name]
        await self.stop_coordinator(name)
        config = dataclasses.replace(before.config, listen=before.address, **fields)
        return await self.start_coordinator(config, name=name, interceptors=interceptors)

    # --- the end -----------------------------------------------------------------------

    def defer(self, stop: Callable[[], Awaitable[object]]) -> None:
        """Run ``stop`` at ``close`` (after the services), e.g. a fault proxy's stop."""
        self._deferred.append(stop)

    async def close(self) -> None:
        """Stop everything this stack started; each stop runs even if another failed."""
        stops: list[Callable[[], Awaitable[object]]] = [
            *(functools.partial(c.stop, grace=1.0) for c in self._started_coordinators),
            *(functools.partial(r.stop, drain=False) for r in self._started_runners),
            *reversed(self._deferred),
        ]
        self.coordinators.clear()
        self.runners.clear()
        self._started_coordinators.clear()
        self._started_runners.clear()
        self._deferred.clear()
        failures: list[BaseException] = []
        for stop in stops:
            try:
                await stop()
            except Exception as failure:  # keep stopping the others
                failures.append(failure)
        if failures:
            raise failures[0]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class StackThread:
    """A Stack served from an event loop on a thread of its own.

    A subclass starts what it needs in ``_start`` (a coroutine, on that loop);
    entering runs it (and closes everything again if it fails), leaving closes
    the stack and ends the loop. ``call`` runs a coroutine there and waits for
    its result; each of these waits is bounded by ``STEP_SECONDS``.
    """

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the stack's loop and wait (bounded) for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(STEP_SECONDS)

    async def _start(self) -> None:
        """What the subclass starts (runners, tokens, a coordinator)."""

    def serving(self) -> bool:
        """Whether the stack's loop still runs (nothing on it has brought it down)."""
        return self._thread.is_alive() and self._loop.is_running()

    def __enter__(self) -> Self:
        self._thread.start()
        try:
            self.call(self._start())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._thread.is_alive():
                self.call(self.stack.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STEP_SECONDS)
            self._loop.close()
