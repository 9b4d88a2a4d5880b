"""Journal migrations on SQLite and PostgreSQL; open_journal refusing schemas it cannot use."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import added
from coordinator_svc.core.model import AttemptRecord, EventRecord, OperationRecord, OpState
from coordinator_svc.ports import JournalNotMigrated, JournalUnavailable, SchemaTooNew
from coordinator_svc.storage import alembic_config, head_revision, migrate, open_journal
from coordinator_svc.storage.schema import VERSION_TABLE, migrations_dir
from coordinator_svc.storage.tables import (
    attempts,
    events,
    metadata,
    operation_envelopes,
    operations,
)
from tests.coordinator.storage.records import first_event, new_operation, transition
from turnwire.testing.records import T0

JOURNAL_TABLES = {
    "operations",
    "operation_envelopes",
    "attempts",
    "events",
    # The operator's records (0006, PROTOCOL.md §10).
    "operator_verdicts",
    "operation_requeues",
    "runner_drains",
    # Runner membership (0007, PROTOCOL.md §11 M1).
    "runner_membership",
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        yield request.getfixturevalue("postgres_url")


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _set_version(url: str, revision: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text(f"UPDATE {VERSION_TABLE} SET version_num = :revision"),
                {"revision": revision},
            )
    finally:
        engine.dispose()


def test_migrations_have_exactly_one_head() -> None:
    """Migrations: the revision graph has one head, so `migrate` has one target."""
    heads = ScriptDirectory(str(migrations_dir())).get_heads()
    assert heads == [head_revision()]


def test_tables_have_a_column_per_record_field() -> None:
    """Storage: each table's columns are exactly its record's fields, so rows convert
    losslessly; an operation's envelope alone is stored beside it (0004)."""
    for table, record, elsewhere in (
        (operations, OperationRecord, {"envelope"}),
        (attempts, AttemptRecord, set()),
        (events, EventRecord, set()),
    ):
        fields = [f.name for f in dataclasses.fields(record) if f.name not in elsewhere]
        assert [c.name for c in table.columns] == fields
    assert [c.name for c in operation_envelopes.columns] == ["operation_id", "envelope"]


def test_upgrade_from_empty_to_head_matches_the_models(empty_url: str) -> None:
    """Migrations: upgrading an empty database yields the tables exactly (alembic check clean)."""
    migrate(empty_url)
    assert JOURNAL_TABLES | {VERSION_TABLE} <= _tables(empty_url)
    command.check(alembic_config(empty_url))  # raises if models and schema differ
    migrate(empty_url)  # a second run is a no-op
    assert set(metadata.tables) == JOURNAL_TABLES


def test_downgrade_to_base_removes_the_journal_tables(empty_url: str) -> None:
    """Migrations: downgrading to base leaves no journal table behind."""
    migrate(empty_url)
    command.downgrade(alembic_config(empty_url), "base")
    assert _tables(empty_url) & JOURNAL_TABLES == set()
    with pytest.raises(JournalNotMigrated):
        open_journal(empty_url)


def test_every_revision_walks_up_and_down(empty_url: str) -> None:
    """Migrations: each revision upgrades, downgrades and upgrades again cleanly, base to head."""
    config = alembic_config(empty_url)
    scripts = ScriptDirectory(str(migrations_dir()))
    revisions = list(reversed(list(scripts.walk_revisions("base", "heads"))))
    assert revisions, "no migrations found"
    for script in revisions:
        command.upgrade(config, script.revision)
        command.downgrade(config, script.down_revision or "base")
        command.upgrade(config, script.revision)
    command.check(config)


def test_open_refuses_a_schema_written_by_newer_code(empty_url: str) -> None:
    """Migrations: a journal at a revision this code does not know: open and migrate refuse it."""
    migrate(empty_url)
    _set_version(empty_url, "9999_from_the_future")
    with pytest.raises(SchemaTooNew, match=r"9999_from_the_future.*newer code"):
        open_journal(empty_url)
    with pytest.raises(SchemaTooNew, match="9999_from_the_future"):
        migrate(empty_url)  # an older migrate must not guess at a newer schema


def test_open_refuses_an_unmigrated_database(empty_url: str) -> None:
    """Migrations: a database without the schema raises JournalNotMigrated naming the command."""
    engine = sa.create_engine(empty_url)
    try:
        with engine.begin() as connection:  # a database that exists, with other tables
            connection.execute(sa.text("CREATE TABLE unrelated (x INTEGER)"))
    finally:
        engine.dispose()
    with pytest.raises(JournalNotMigrated, match="python -m coordinator_svc migrate"):
        open_journal(empty_url)


def test_open_refuses_a_missing_sqlite_file_without_creating_it(tmp_path: Path) -> None:
    """Migrations: opening a SQLite journal that does not exist refuses and creates no file."""
    path = tmp_path / "absent" / "journal.db"
    with pytest.raises(JournalNotMigrated, match="python -m coordinator_svc migrate"):
        open_journal(f"sqlite:///{path}")
    assert not path.exists()


def test_migrate_creates_the_sqlite_directory(tmp_path: Path) -> None:
    """Migrations: migrate makes a missing parent directory for a SQLite journal."""
    path = tmp_path / "data" / "journal.db"
    migrate(f"sqlite:///{path}")
    assert path.exists()
    assert _tables(f"sqlite:///{path}") >= JOURNAL_TABLES


def test_open_with_an_unreachable_server_is_unavailable() -> None:
    """Storage: a PostgreSQL URL nobody answers gives JournalUnavailable, not a hang."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens
    with pytest.raises(JournalUnavailable):
        open_journal(f"postgresql+psycopg://postgres@127.0.0.1:{port}/journal", busy_timeout=2)


def test_unknown_database_scheme_is_refused() -> None:
    """Storage: a URL for a database the journal does not support is refused with its name."""
    with pytest.raises(ValueError, match="mysql"):
        open_journal("mysql://localhost/journal")


def test_open_refuses_an_older_schema(empty_url: str) -> None:
    """Migrations: a journal at an older known revision raises JournalNotMigrated, naming head."""
    scripts = ScriptDirectory(str(migrations_dir()))
    older = scripts.get_revision(head_revision()).down_revision
    if older is None:
        pytest.skip("only one revision exists, so there is no older schema to refuse")
    migrate(empty_url, str(older))
    with pytest.raises(JournalNotMigrated, match=rf"{older}.*{head_revision()}.*migrate"):
        open_journal(empty_url)


@pytest.mark.rule("C10", "C13")
def test_database_refuses_rewriting_events_or_a_terminal_state(empty_url: str) -> None:
    """C10/C13/§8.6: even raw SQL cannot update an event or move a terminal state."""
    migrate(empty_url)

    async def scenario() -> str:
        journal = open_journal(empty_url)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            await journal.commit(transition(stored, OpState.CANCELLED))
            return stored.operation_id
        finally:
            await journal.close()

    operation_id = asyncio.run(scenario())
    engine = sa.create_engine(empty_url)
    try:
        for statement in (
            "UPDATE events SET reason = 'rewritten'",
            "UPDATE operations SET state = 'QUEUED'",
        ):
            with pytest.raises(sa.exc.DBAPIError), engine.begin() as connection:
                connection.execute(sa.text(statement))
        with engine.begin() as connection:  # bookkeeping on a terminal row is still allowed
            connection.execute(sa.text("UPDATE operations SET released = true"))
            row = connection.execute(
                sa.text("SELECT state, released FROM operations WHERE operation_id = :id"),
                {"id": operation_id},
            ).one()
        assert (row.state, bool(row.released)) == ("CANCELLED", True)
    finally:
        engine.dispose()


@pytest.mark.rule("M1")
def test_database_refuses_rewriting_or_deleting_membership_records(empty_url: str) -> None:
    """§11 M1: the membership log is append-only: raw SQL can neither change a
    record nor delete one, whoever writes; a new record is still stored."""
    migrate(empty_url)

    async def scenario() -> None:
        journal = open_journal(empty_url)
        try:
            endpoint = RunnerEndpoint("r1", "127.0.0.1:7001")
            await journal.add_runner(added(endpoint, "ops", "capacity", T0))
        finally:
            await journal.close()

    asyncio.run(scenario())
    engine = sa.create_engine(empty_url)
    try:
        for statement in (
            "UPDATE runner_membership SET address = '10.0.0.1:7001'",
            "DELETE FROM runner_membership",
        ):
            with pytest.raises(sa.exc.DBAPIError), engine.begin() as connection:
                connection.execute(sa.text(statement))
        with engine.begin() as connection:
            rows = connection.execute(sa.text("SELECT address FROM runner_membership")).all()
        assert [row.address for row in rows] == ["127.0.0.1:7001"]
    finally:
        engine.dispose()


def test_sqlite_connections_use_the_durable_settings(tmp_path: Path) -> None:
    """Storage: every SQLite journal connection has WAL, synchronous=FULL, FKs on, busy timeout."""
    from coordinator_svc.storage.backends import SqliteBackend

    url = sa.make_url(f"sqlite:///{tmp_path / 'journal.db'}")
    engine = SqliteBackend().make_engine(url, busy_timeout=1.5)
    try:
        with engine.connect() as connection:
            settings = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
    finally:
        engine.dispose()
    assert settings == {
        "journal_mode": "wal",
        "synchronous": 2,  # FULL
        "foreign_keys": 1,
        "busy_timeout": 1500,
    }


# Record fields a later revision added (R15): a journal at 0003 has no such column.
_ADDED_BY_0008 = frozenset({"executions", "execution_count"})


def test_upgrading_to_the_envelope_table_keeps_every_envelope_and_back(empty_url: str) -> None:
    """0004 moves envelopes out of the operations row (issue 12): a journal written
    at 0003 reads back every record unchanged after the upgrade, and after a
    downgrade to 0003 the envelopes are back in their column."""
    config = alembic_config(empty_url)
    command.upgrade(config, "0003_retention")
    records = [
        dataclasses.replace(new_operation(n), envelope=bytes([n]) * (n * 40_000), version=1)
        for n in (1, 2, 3)
    ]
    engine = sa.create_engine(empty_url)
    try:
        with engine.begin() as connection:
            for record in records:
                row = {
                    f.name: getattr(getattr(record, f.name), "value", getattr(record, f.name))
                    for f in dataclasses.fields(record)
                    if f.name not in _ADDED_BY_0008  # not columns at 0003
                }
                columns = ", ".join(row)
                values = ", ".join(f":{name}" for name in row)
                connection.execute(
                    sa.text(f"INSERT INTO operations ({columns}) VALUES ({values})"), row
                )
    finally:
        engine.dispose()
    command.upgrade(config, "head")

    async def read() -> list[OperationRecord | None]:
        journal = open_journal(empty_url)
        try:
            return [await journal.get(r.operation_id) for r in records]
        finally:
            await journal.close()

    assert asyncio.run(read()) == records
    assert "envelope" not in {c["name"] for c in _columns(empty_url, "operations")}
    command.downgrade(config, "0003_retention")
    engine = sa.create_engine(empty_url)
    try:
        with engine.connect() as connection:
            kept = dict(
                connection.execute(sa.text("SELECT operation_id, envelope FROM operations")).all()
            )
    finally:
        engine.dispose()
    assert {k: bytes(v) for k, v in kept.items()} == {r.operation_id: r.envelope for r in records}


def _columns(url: str, table: str) -> list[dict[str, object]]:
    engine = sa.create_engine(url)
    try:
        return list(sa.inspect(engine).get_columns(table))  # type: ignore[arg-type]
    finally:
        engine.dispose()


@pytest.mark.rule("R15")
def test_the_executions_revision_upgrades_a_journal_and_old_operations_read_no_records(
    empty_url: str,
) -> None:
    """0008 (R15) adds ``executions`` and ``execution_count`` to operations: a journal
    written at 0007 upgrades in place (its guards still refuse rewriting a terminal
    state), its operations read back with no records and count 0, and a terminal
    commit can then store a runner's records; the downgrade drops both columns."""
    config = alembic_config(empty_url)
    command.upgrade(config, "0007_runner_membership")
    record = dataclasses.replace(new_operation(7), version=1)
    engine = sa.create_engine(empty_url)
    try:
        with engine.begin() as connection:
            row = {
                f.name: getattr(getattr(record, f.name), "value", getattr(record, f.name))
                for f in dataclasses.fields(record)
                if f.name not in _ADDED_BY_0008 and f.name != "envelope"
            }
            columns = ", ".join(row)
            values = ", ".join(f":{name}" for name in row)
            connection.execute(
                sa.text(f"INSERT INTO operations ({columns}) VALUES ({values})"), row
            )
            connection.execute(
                sa.text("INSERT INTO operation_envelopes (operation_id, envelope) VALUES (:o, :e)"),
                {"o": record.operation_id, "e": record.envelope},
            )
    finally:
        engine.dispose()
    command.upgrade(config, "head")

    async def read() -> OperationRecord | None:
        journal = open_journal(empty_url)
        try:
            return await journal.get(record.operation_id)
        finally:
            await journal.close()

    stored = asyncio.run(read())
    assert stored == record
    assert stored is not None and (stored.executions, stored.execution_count) == (None, 0)
    command.downgrade(config, "0007_runner_membership")
    assert not _ADDED_BY_0008 & {c["name"] for c in _columns(empty_url, "operations")}
