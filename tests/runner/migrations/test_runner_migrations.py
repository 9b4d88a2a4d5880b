"""The runner store's own Alembic environment: upgrade, check, downgrade, one head."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from runner_svc.storage import migrate, rows_sql
from runner_svc.storage.sqlite_store import make_engine
from tests.support.runner_process import run_cli


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_upgrade_from_empty_creates_the_schema(tmp_path: Path) -> None:
    """An empty file upgrades to head with the runner's own version table."""
    engine = make_engine(tmp_path / "runner.db")
    try:
        with engine.connect() as connection:
            assert migrate.current_revision(connection) is None
            migrate.upgrade_to_head(connection)
            connection.commit()
            assert migrate.current_revision(connection) == migrate.head_revision()
        assert {"runner_operations", "runner_store_meta", migrate.VERSION_TABLE} <= tables(engine)
        assert "alembic_version" not in tables(engine)
    finally:
        engine.dispose()


def test_models_and_migrations_agree(tmp_path: Path) -> None:
    """`alembic check`: autogenerate finds nothing between the tables and head."""
    engine = make_engine(tmp_path / "runner.db")
    try:
        with engine.connect() as connection:
            migrate.upgrade_to_head(connection)
            connection.commit()
            command.check(migrate.alembic_config(connection))
    finally:
        engine.dispose()


def test_downgrade_to_base_on_sqlite(tmp_path: Path) -> None:
    """Every revision downgrades on SQLite, leaving only the version table."""
    engine = make_engine(tmp_path / "runner.db")
    try:
        with engine.connect() as connection:
            migrate.upgrade_to_head(connection)
            connection.commit()
            migrate.downgrade_to(connection, "base")
            connection.commit()
            assert migrate.current_revision(connection) is None
        assert tables(engine) <= {migrate.VERSION_TABLE}
    finally:
        engine.dispose()


def test_single_head() -> None:
    """The runner migrations have exactly one head."""
    assert len(migrate.script_directory().get_heads()) == 1


def test_migrate_command_upgrades_a_store(tmp_path: Path) -> None:
    """`python -m runner_svc migrate --store PATH` creates the schema and exits 0."""
    path = tmp_path / "runner.db"
    done = run_cli(["migrate", "--store", str(path)])
    assert done.returncode == 0, done.stderr
    engine = make_engine(path)
    try:
        with engine.connect() as connection:
            assert migrate.current_revision(connection) == migrate.head_revision()
    finally:
        engine.dispose()


def _triggers(connection: sa.Connection) -> set[str]:
    rows = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'")
    return {name for (name,) in rows}


def test_the_declared_effects_revision_keeps_every_trigger_and_reads_old_rows_undeclared(
    tmp_path: Path,
) -> None:
    """r0006 adds its columns in place: the store's triggers (r0004, r0005) survive
    (a batch rebuild of the table would drop them), and a row written before it
    reads as nothing declared and no chunks."""
    engine = make_engine(tmp_path / "runner.db")
    try:
        with engine.connect() as connection:
            command.upgrade(migrate.alembic_config(connection), "r0005")
            before = _triggers(connection)
            connection.exec_driver_sql(
                "INSERT INTO runner_operations (operation_id, state, execution, incarnation_id,"
                " sequence, fencing_token, attempt, envelope_digest, released, error_reason)"
                " VALUES ('op_old', 'FAILED', 'STARTED', 'i', 1, 1, 1, 'd', 0, 'EXECUTOR_FAILED')"
            )
            connection.commit()
            migrate.upgrade_to_head(connection)
            connection.commit()
            assert before and _triggers(connection) == before
            row = connection.exec_driver_sql(
                "SELECT error_effect, error_retry_after, output_chunks FROM runner_operations"
            ).one()
            assert tuple(row) == (None, None, 0)
    finally:
        engine.dispose()


@pytest.mark.rule("R15")
def test_the_executions_revision_upgrades_a_store_in_place_and_old_rows_read_no_records(
    tmp_path: Path,
) -> None:
    """r0007 (R15) adds ``executions`` in place: every trigger survives, a row written
    at r0006 reads back through the store as no execution records, and the
    downgrade drops the column again."""
    path = tmp_path / "runner.db"
    engine = make_engine(path)
    try:
        with engine.connect() as connection:
            command.upgrade(migrate.alembic_config(connection), "r0006")
            before = _triggers(connection)
            connection.exec_driver_sql(
                "INSERT INTO runner_operations (operation_id, state, execution, incarnation_id,"
                " sequence, fencing_token, attempt, envelope_digest, released, error_reason)"
                " VALUES ('op_old', 'FAILED', 'STARTED', 'i', 1, 1, 1, 'd', 0, 'EXECUTOR_FAILED')"
            )
            connection.commit()
            migrate.upgrade_to_head(connection)
            connection.commit()
            assert before and _triggers(connection) == before
            (stored,) = connection.exec_driver_sql("SELECT executions FROM runner_operations").one()
            assert stored is None
            row = connection.exec_driver_sql(
                f"SELECT {', '.join(rows_sql.COLUMNS)} FROM runner_operations"
            ).one()
            assert rows_sql.to_row(tuple(row)).executions == ()
            migrate.downgrade_to(connection, "r0006")
            connection.commit()
            columns = {c["name"] for c in sa.inspect(connection).get_columns("runner_operations")}
            assert "executions" not in columns and _triggers(connection) == before
    finally:
        engine.dispose()
