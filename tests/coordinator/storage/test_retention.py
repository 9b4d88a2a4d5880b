"""Journal retention (issue 12, PROTOCOL.md §9 K1) on real SQLite files and PostgreSQL.

Only an operation that is terminal, released and finished past the horizon
goes, whole (row, events, attempts); batches are bounded; a failing batch
deletes nothing; a key past the horizon is free (a new operation), within it
a replay. Failures are real database failures (a trigger that aborts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptUpdate,
    Execution,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import Journal, JournalUnavailable
from coordinator_svc.retention_flags import JournalRetention
from coordinator_svc.storage import migrate, open_journal
from coordinator_svc.storage.retention import JournalPruner, JournalRetentionTask
from tests.coordinator.storage.records import T0, dispatch, first_event, new_operation, transition
from turnwire.retention import PruneSchedule

HORIZON = 3600.0  # one hour: T0 + 1 h is the first moment anything finished at T0 may go
LATE = T0 + timedelta(days=2)  # a clock at which everything finished around T0 is past it

# (statements that make deleting operation {op} fail, statements that undo it)
FAILING_DELETE = {
    "sqlite": (
        (
            "CREATE TRIGGER fail_prune BEFORE DELETE ON operations "
            "WHEN OLD.operation_id = '{op}' "
            "BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END",
        ),
        ("DROP TRIGGER fail_prune",),
    ),
    "postgresql": (
        (
            "CREATE FUNCTION fail_prune() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF OLD.operation_id = '{op}' THEN RAISE EXCEPTION 'simulated storage failure'; "
            "END IF; RETURN OLD; END $$",
            "CREATE TRIGGER fail_prune BEFORE DELETE ON operations "
            "FOR EACH ROW EXECUTE FUNCTION fail_prune()",
        ),
        ("DROP TRIGGER fail_prune ON operations", "DROP FUNCTION fail_prune()"),
    ),
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty SQL journal."""
    if request.param == "sqlite":
        found = f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        found = request.getfixturevalue("postgres_url")
    migrate(found)
    yield found


def _retention(batch: int = 500, batches: int = 20) -> JournalRetention:
    return JournalRetention(HORIZON, PruneSchedule(batch=batch, batches_per_run=batches))


def _pruner(url: str, now: datetime, batch: int = 500, batches: int = 20) -> JournalPruner:
    return JournalPruner.open(url, _retention(batch, batches), clock=lambda: now)


async def _finished(
    journal: Journal, number: int, *, at: datetime, released: bool = True, key: str | None = None
) -> OperationRecord:
    """Operation ``number``: dispatched once, then SUCCEEDED at ``at`` (events 1-3, attempt 1)."""
    operation = new_operation(number, key=key, created_at=at - timedelta(seconds=10))
    stored, _ = await journal.submit(operation, first_event(operation))
    sent = await journal.commit(dispatch(stored))
    done = transition(
        sent,
        OpState.SUCCEEDED,
        at=at,
        execution=Execution.STARTED,
        result=b"done",
        finished_at=at,
        released=released,
        attempt_updates=(AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ran"),),
    )
    return await journal.commit(done)


async def _queued(journal: Journal, number: int) -> OperationRecord:
    operation = new_operation(number, created_at=T0)
    stored, _ = await journal.submit(operation, first_event(operation))
    return stored


async def _dispatching(journal: Journal, number: int) -> OperationRecord:
    return await journal.commit(dispatch(await _queued(journal, number)))


def _rows(url: str) -> dict[str, tuple[int, int, int]]:
    """operation id -> (1, events, attempts) for every operation in the journal."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            ids = connection.exec_driver_sql("SELECT operation_id FROM operations").scalars()
            found = {}
            for op in list(ids):
                counts = [
                    connection.execute(
                        sa.text(f"SELECT count(*) FROM {table} WHERE operation_id = :op"),
                        {"op": op},
                    ).scalar_one()
                    for table in ("events", "attempts")
                ]
                found[op] = (1, int(counts[0]), int(counts[1]))
            return found
    finally:
        engine.dispose()


def _execute(url: str, statements: tuple[str, ...], **names: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement.format(**names))
    finally:
        engine.dispose()


def _with_journal(url: str, scenario: object) -> None:
    async def main() -> None:
        journal = open_journal(url)
        try:
            await scenario(journal)  # type: ignore[operator]
        finally:
            await journal.close()

    asyncio.run(main())


@pytest.mark.rule("K1", "C10")
def test_only_terminal_released_operations_past_the_horizon_go(url: str) -> None:
    """§9 K1: kept: a QUEUED one, a DISPATCHING one (attempt written ahead), a terminal one
    that still owes its Release (C10), a released one finished within the horizon; gone:
    the released one past it, with its events and attempts."""

    async def scenario(journal: Journal) -> None:
        await _queued(journal, 1)
        await _dispatching(journal, 2)
        await _finished(journal, 3, at=T0, released=False)
        await _finished(journal, 4, at=T0)
        await _finished(journal, 5, at=T0 + timedelta(minutes=50))

    _with_journal(url, scenario)
    before = _rows(url)
    assert before["op-0004"] == (1, 3, 1)
    pruner = _pruner(url, now=T0 + timedelta(hours=1, minutes=1))
    try:
        report = asyncio.run(pruner.prune())
    finally:
        pruner.close()
    assert dict(report.counts) == {"operations": 1, "events": 3, "attempts": 1}
    after = _rows(url)
    assert set(after) == {"op-0001", "op-0002", "op-0003", "op-0005"}
    assert after == {op: before[op] for op in after}  # the kept ones untouched


@pytest.mark.rule("K1")
def test_a_key_past_the_horizon_is_a_new_operation_within_it_a_replay(url: str) -> None:
    """§7, §9 K1: a SubmitTurn with a known key and request within the horizon is a replay
    (the same operation); once its operation is pruned, the same key makes a new operation
    with a new id (it runs again: the horizon's documented meaning)."""

    async def scenario(journal: Journal) -> None:
        first = await _finished(journal, 1, at=T0, key="pay-42")
        again = new_operation(2, key="pay-42", request="request-1")
        stored, replayed = await journal.submit(again, first_event(again))
        assert replayed and stored.operation_id == first.operation_id  # within: a replay
        within = _pruner(url, now=T0 + timedelta(minutes=59))
        try:
            assert not (await within.prune()).pruned
        finally:
            within.close()
        stored, replayed = await journal.submit(again, first_event(again))
        assert replayed and stored.operation_id == first.operation_id
        past = _pruner(url, now=T0 + timedelta(hours=1, seconds=1))
        try:
            assert (await past.prune()).counts["operations"] == 1
        finally:
            past.close()
        assert await journal.get(first.operation_id) is None
        stored, replayed = await journal.submit(again, first_event(again))
        assert not replayed and stored.operation_id == "op-0002"  # a new operation
        assert stored.state is OpState.QUEUED

    _with_journal(url, scenario)


@pytest.mark.rule("K1")
def test_batches_are_bounded_and_a_run_stops_at_its_batch_limit(url: str) -> None:
    """§9 K1: at most ``batch`` operations per transaction and ``batches_per_run`` per run;
    what is left waits for the next run, which says there was more."""

    async def scenario(journal: Journal) -> None:
        for number in range(1, 8):
            await _finished(journal, number, at=T0 + timedelta(seconds=number))

    _with_journal(url, scenario)
    pruner = _pruner(url, now=LATE, batch=3, batches=2)
    try:
        first = asyncio.run(pruner.prune())
        assert (first.counts["operations"], first.batches, first.more) == (6, 2, True)
        assert set(_rows(url)) == {"op-0007"}  # oldest first
        second = asyncio.run(pruner.prune())
        assert (second.counts["operations"], second.batches, second.more) == (1, 1, False)
        assert _rows(url) == {}
        assert pruner.prune_batch(pruner.cutoff()) == ([], 0, 0)
    finally:
        pruner.close()


def test_a_failing_batch_deletes_nothing_of_its_own(url: str) -> None:
    """Fail closed: a database failure in a batch (here deleting its third operation) rolls
    the whole batch back, events and attempts included; the batch before it stands, and the
    next run, once the failure is gone, deletes the rest."""

    async def scenario(journal: Journal) -> None:
        for number in range(1, 7):
            await _finished(journal, number, at=T0 + timedelta(seconds=number))

    _with_journal(url, scenario)
    before = _rows(url)
    dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
    create, drop = FAILING_DELETE[dialect]
    _execute(url, create, op="op-0006")
    pruner = _pruner(url, now=LATE, batch=3)
    try:
        with pytest.raises(JournalUnavailable, match="simulated storage failure"):
            asyncio.run(pruner.prune())
        after = _rows(url)
        assert set(after) == {"op-0004", "op-0005", "op-0006"}  # batch 1 stands
        assert after == {op: before[op] for op in after}  # batch 2: nothing half deleted
        _execute(url, drop)
        assert asyncio.run(pruner.prune()).counts["operations"] == 3
        assert _rows(url) == {}
    finally:
        pruner.close()


@pytest.mark.rule("K1")
def test_the_database_refuses_deleting_a_live_or_unreleased_operation(url: str) -> None:
    """§9 K1 in the database: whoever deletes (a bug, a hand-run statement), an operation
    that is not terminal, or terminal but owing its Release, cannot be deleted."""

    async def scenario(journal: Journal) -> None:
        await _queued(journal, 1)
        await _finished(journal, 2, at=T0, released=False)
        await _finished(journal, 3, at=T0)

    _with_journal(url, scenario)
    engine = sa.create_engine(url)
    try:
        for op in ("op-0001", "op-0002"):
            with (
                pytest.raises(sa.exc.DBAPIError, match="terminal, released"),
                engine.begin() as connection,
            ):
                for table in ("events", "attempts", "operation_envelopes", "operations"):
                    connection.execute(
                        sa.text(f"DELETE FROM {table} WHERE operation_id = :op"), {"op": op}
                    )
        with engine.begin() as connection:  # a retired one may go
            for table in ("events", "attempts", "operation_envelopes", "operations"):
                connection.execute(sa.text(f"DELETE FROM {table} WHERE operation_id = 'op-0003'"))
    finally:
        engine.dispose()
    assert set(_rows(url)) == {"op-0001", "op-0002"}


def test_dry_run_counts_what_would_go_and_deletes_nothing(url: str) -> None:
    """``prune --dry-run``: the same rule, counted, nothing deleted."""

    async def scenario(journal: Journal) -> None:
        await _finished(journal, 1, at=T0)
        await _finished(journal, 2, at=T0, released=False)
        await _queued(journal, 3)

    _with_journal(url, scenario)
    pruner = _pruner(url, now=LATE)
    try:
        assert pruner.count() == {"operations": 1, "events": 3, "attempts": 1}
    finally:
        pruner.close()
    assert len(_rows(url)) == 3


def test_the_scheduled_pass_logs_what_it_pruned_and_warns_when_it_fails(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One INFO line per run that pruned something (operations, events, attempts, time), none
    for a run that found nothing, a WARNING for a run that failed (nothing deleted)."""

    async def scenario(journal: Journal) -> None:
        await _finished(journal, 1, at=T0)
        await _finished(journal, 2, at=T0 + timedelta(seconds=1))

    _with_journal(url, scenario)
    dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
    create, drop = FAILING_DELETE[dialect]
    _execute(url, create, op="op-0001")

    async def runs() -> None:
        task = JournalRetentionTask(url, _retention(), clock=lambda: LATE)
        try:
            assert await task.schedule.run_once() is None  # fails: WARNING
            _execute(url, drop)
            report = await task.schedule.run_once()  # prunes both: INFO
            assert report is not None and report.counts["operations"] == 2
            assert await task.schedule.run_once() is not None  # nothing left: silent
        finally:
            await task.stop()

    with caplog.at_level(logging.INFO, logger="coordinator_svc.retention"):
        asyncio.run(runs())
    # Only the pass's own lines: an earlier test in this process may have left the
    # root logger at INFO (a service's main() configures logging), and then
    # alembic's INFO lines from opening the store are captured too.
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "coordinator_svc.retention"
    ]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "simulated storage failure" in lines[0][1]
    assert "pruned 2 operations, 6 events, 2 attempts in 1 batch," in lines[1][1]


def test_a_journal_past_its_schema_is_refused(tmp_path: Path) -> None:
    """The pruner opens only a journal at this code's schema (never guesses at another)."""
    from coordinator_svc.ports import JournalNotMigrated

    with pytest.raises(JournalNotMigrated):
        JournalPruner.open(f"sqlite:///{tmp_path / 'absent.db'}", _retention())
