"""Real journals, runner stores and ledgers, written the way a run writes them.

The coordinator side goes through the real decide builders
(``coordinator_svc.core``: write_ahead, unknown, adopt, end) and the real
``SqlJournal`` on a migrated database; the runner side through the real
``SqliteRunnerStore``; the ledger through ``turnwire.ledger.append_start``.
One fake clock drives all three so "sent before accepted" is under the
test's control. ``raw_sql`` writes what the adapters would refuse.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from coordinator_svc.core.adopt import adopt
from coordinator_svc.core.attempting import end, write_ahead
from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.decide_dispatch import on_refused, unknown
from coordinator_svc.core.decide_preflight import on_answer
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import DispatchRefused, PreflightAnswer
from coordinator_svc.core.model import (
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from coordinator_svc.core.witness import StoreOpen
from coordinator_svc.storage import SqlJournal, migrate, open_journal
from runner_svc.core.model import Execution as RowExecution
from runner_svc.core.model import RowState, SlotKind, StopReason, TurnOutput
from runner_svc.core.transitions import (
    Admit,
    ConfirmStart,
    LaunchIntent,
    RecordStopReason,
    Settle,
    TakeOver,
)
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from turnwire.common.v1 import turn_pb2
from turnwire.harness import Verdict, check_run
from turnwire.ledger import LedgerEntry, append_start

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
RUNNER = "runner-a"


def result_bytes(output: bytes, content_type: str = "text/plain") -> bytes:
    return turn_pb2.TurnResult(
        output=output, content_type=content_type, metadata={"k": "v"}
    ).SerializeToString()


@dataclass
class Incarnation:
    """One runner process's view of its store (the store stays open while it lives)."""

    incarnation_id: str
    store: SqliteRunnerStore

    @property
    def store_id(self) -> str:
        return self.store.store_id


@dataclass
class RunBuilder:
    root: Path
    journal_url: str = ""
    now: datetime = T0
    records: dict[str, OperationRecord] = field(default_factory=dict)
    incarnations: list[Incarnation] = field(default_factory=list)
    _counter: int = 0

    def __post_init__(self) -> None:
        if not self.journal_url:
            self.journal_url = f"sqlite:///{self.root / 'journal.db'}"
        migrate(self.journal_url)
        self.ledger = self.root / "ledger.jsonl"
        self.ledger.touch()
        self.store_paths: list[Path] = []

    # --- plumbing ---------------------------------------------------------

    def tick(self, seconds: float = 0.01) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now

    def _journal(self, work: Any) -> Any:
        async def main() -> Any:
            journal: SqlJournal = open_journal(self.journal_url)
            try:
                return await work(journal)
            finally:
                await journal.close()

        return asyncio.run(main())

    def _decide_and_commit(self, op_id: str, decide: Any) -> OperationRecord:
        async def work(journal: SqlJournal) -> OperationRecord:
            record = await journal.get(op_id)
            assert record is not None
            attempts = tuple(await journal.attempts(op_id))
            decision: Decision = decide(record, Context(now=self.tick(), attempts=attempts))
            assert decision.change is not None, decision.note
            stored = await journal.commit(decision.change)
            self.records[op_id] = stored
            return stored

        result: OperationRecord = self._journal(work)
        return result

    # --- coordinator side --------------------------------------------------

    def submit(
        self, op_id: str, *, policy: ReplayPolicy = ReplayPolicy.PROBE_FIRST, max_attempts: int = 5
    ) -> None:
        envelope = f"envelope of {op_id}".encode()
        now = self.tick()
        birth = Birth(
            operation_id=op_id,
            principal="alice",
            idempotency_key_digest=hashlib.sha256(op_id.encode()).hexdigest(),
            request_digest=hashlib.sha256(envelope).hexdigest(),
            envelope=envelope,
            pool="default",
            kind=TurnKind.WRITABLE,
            replay_policy=policy,
            max_attempts=max_attempts,
        )
        record, event = born(birth, now)

        async def work(journal: SqlJournal) -> None:
            stored, _ = await journal.submit(record, event)
            self.records[op_id] = stored

        self._journal(work)

    def dispatch(self, op_id: str, inc: Incarnation, why: str = "preflight: absent") -> int:
        """C4: write attempt n+1 ahead; returns its number."""
        stored = self._decide_and_commit(
            op_id,
            lambda r, ctx: write_ahead(
                r,
                ctx,
                runner=RUNNER,
                incarnation_id=inc.incarnation_id,
                store_id=inc.store_id,
                why=why,
            ),
        )
        return stored.attempt_count

    def preflight(self, op_id: str, inc: Incarnation, op: RunnerOp | None = None) -> int:
        """C2/C8: a status answer from ``inc`` (present when ``op`` is given),
        decided by the real rule; returns the attempt count after it."""

        def decide(record: OperationRecord, ctx: Context) -> Decision:
            answer = PreflightAnswer(
                RUNNER,
                inc.incarnation_id,
                inc.store_id,
                True,
                op is not None,
                op,
                record.attempt_count,
                # The store's real chain of openings (§6.1 witness).
                store_opens=tuple(
                    StoreOpen(o.incarnation_id, o.predecessor_incarnation_id, o.predecessor_floor)
                    for o in inc.store.openings
                ),
            )
            return on_answer(record, answer, ctx)

        return self._decide_and_commit(op_id, decide).attempt_count

    def refuse(self, op_id: str, inc: Incarnation, reason: str = "NO_FREE_SLOT") -> None:
        """C6: a typed refusal of the attempt in flight."""
        self._decide_and_commit(
            op_id,
            lambda r, ctx: on_refused(
                r, DispatchRefused(r.attempt_count, reason, inc.incarnation_id), ctx
            ),
        )

    def lose_reply(self, op_id: str) -> None:
        """C7: no definite answer to the Dispatch."""
        self._decide_and_commit(op_id, lambda r, ctx: unknown(r, ctx, "deadline exceeded"))

    def adopt(self, op_id: str, inc: Incarnation, op: RunnerOp, via: str = "status") -> None:
        self._decide_and_commit(
            op_id,
            lambda r, ctx: adopt(
                r, op, ctx, runner=RUNNER, incarnation_id=inc.incarnation_id, via=via
            ),
        )

    def acknowledged(self, op_id: str, inc: Incarnation, via: str = "dispatch") -> None:
        op = RunnerOp(RunnerOpState.ACCEPTED, None, inc.incarnation_id)
        self.adopt(op_id, inc, op, via)

    def succeeded(self, op_id: str, inc: Incarnation, output: bytes = b"done") -> None:
        op = RunnerOp(
            RunnerOpState.SUCCEEDED,
            Execution.STARTED,
            inc.incarnation_id,
            result=result_bytes(output),
        )
        self.adopt(op_id, inc, op, via="watch")

    def give_up(self, op_id: str, reason: str = "INCARNATION_CHANGED") -> None:
        self._decide_and_commit(
            op_id, lambda r, ctx: end(r, ctx, OpState.TIMED_OUT, reason, "runner restarted")
        )

    # --- runner side -------------------------------------------------------

    def start_runner(self, name: str = "runner-a.db") -> Incarnation:
        """A runner process start: a new incarnation opens (takes over) its store."""
        path = self.root / name
        for old in self.incarnations:
            if old.store.path == path and old.store._lock is not None:
                old.store.close()
        self._counter += 1
        incarnation_id = f"{self._counter:032x}"
        store = SqliteRunnerStore.open(path, incarnation_id)
        if path not in self.store_paths:
            self.store_paths.append(path)
        inc = Incarnation(incarnation_id, store)
        self.incarnations.append(inc)
        return inc

    def admit(self, op_id: str, inc: Incarnation, attempt: int, *, at: float | None = None) -> None:
        when = at if at is not None else self.tick().timestamp()
        envelope_digest = hashlib.sha256(f"envelope of {op_id}".encode()).hexdigest()
        inc.store.write(
            op_id,
            Admit(op_id, inc.incarnation_id, SlotKind.WRITABLE, envelope_digest, attempt, 1, when),
        )

    def drain(self, op_id: str, inc: Incarnation) -> None:
        """R8: the shutdown stops the never-launched row and the store is sealed (§6.1)."""
        inc.store.write(op_id, RecordStopReason(StopReason.SHUTDOWN))
        assert inc.store.seal()

    def take_over(self, op_id: str, inc: Incarnation, attempt: int) -> None:
        """§6 re-admission of an earlier incarnation's never-launched row."""
        inc.store.write(op_id, TakeOver(inc.incarnation_id, attempt, 1, self.tick().timestamp()))

    def launch(self, op_id: str, inc: Incarnation, attempt: int) -> None:
        """R3 launch intent, the metered ledger line, start confirmation."""
        inc.store.write(op_id, LaunchIntent(inc.incarnation_id))
        self.ledger_line(op_id, inc.incarnation_id, attempt)
        inc.store.write(op_id, ConfirmStart(inc.incarnation_id, self.tick().timestamp()))

    def ledger_line(
        self, op_id: str, incarnation_id: str, attempt: int, execution: int = 1
    ) -> None:
        started = self.tick().isoformat()
        entry = LedgerEntry(op_id, incarnation_id, attempt, 4242, started, execution)
        append_start(self.ledger, entry)

    def settle_success(self, op_id: str, inc: Incarnation, output: bytes = b"done") -> None:
        inc.store.write(
            op_id,
            Settle(
                inc.incarnation_id,
                RowState.SUCCEEDED,
                RowExecution.STARTED,
                self.tick().timestamp(),
                result=TurnOutput(output, "text/plain", {"k": "v"}),
            ),
        )

    def close(self) -> None:
        for inc in self.incarnations:
            if inc.store._lock is not None:
                inc.store.close()

    # --- whole stories -------------------------------------------------------

    def happy(self, op_id: str, inc: Incarnation) -> None:
        """Dispatched once, acknowledged, ran, succeeded."""
        self.submit(op_id)
        attempt = self.preflight(op_id, inc)
        self.admit(op_id, inc, attempt)
        self.acknowledged(op_id, inc)
        self.launch(op_id, inc, attempt)
        self.settle_success(op_id, inc)
        self.succeeded(op_id, inc)

    def lost_reply(self, op_id: str, inc: Incarnation) -> None:
        """The Dispatch reply is lost; a status read finds it running: no resend (C8)."""
        self.submit(op_id)
        attempt = self.preflight(op_id, inc)
        self.admit(op_id, inc, attempt)
        self.lose_reply(op_id)
        self.launch(op_id, inc, attempt)
        self.preflight(
            op_id, inc, RunnerOp(RunnerOpState.RUNNING, Execution.STARTED, inc.incarnation_id)
        )
        self.settle_success(op_id, inc)
        self.succeeded(op_id, inc)

    def replayed(self, op_id: str, inc: Incarnation) -> None:
        """The Dispatch never arrived; absent on the bound incarnation; exact replay (C8)."""
        self.submit(op_id)
        self.preflight(op_id, inc)
        self.lose_reply(op_id)
        attempt = self.preflight(op_id, inc)
        assert attempt == 2
        self.admit(op_id, inc, attempt)
        self.acknowledged(op_id, inc)
        self.launch(op_id, inc, attempt)
        self.settle_success(op_id, inc)
        self.succeeded(op_id, inc)

    def ambiguous(
        self, op_id: str, inc: Incarnation, *, store: str = "runner-a-new.db"
    ) -> Incarnation:
        """Accepted, reply lost, the runner comes back on a new store:
        TIMED_OUT INCARNATION_CHANGED, execution UNKNOWN (C8). Returns the new incarnation."""
        self.submit(op_id)
        attempt = self.preflight(op_id, inc)
        self.admit(op_id, inc, attempt)
        self.lose_reply(op_id)
        new = self.start_runner(store)
        self.preflight(op_id, new)
        return new

    # --- judging ------------------------------------------------------------

    def verdict(self, *, healed: bool = True) -> Verdict:
        return check_run(self.journal_url, self.store_paths, self.ledger, healed=healed)

    def raw_sql(self, statement: str, **params: Any) -> None:
        """Write what the adapters refuse: histories the code must never produce."""
        engine = sa.create_engine(self.journal_url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(statement), params)
        finally:
            engine.dispose()

    def raw_store_sql(self, path: Path, statement: str, **params: Any) -> None:
        engine = sa.create_engine(f"sqlite:///{path}")
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(statement), params)
        finally:
            engine.dispose()


def invariants(verdict: Verdict) -> set[int]:
    return {violation.invariant for violation in verdict.violations}
