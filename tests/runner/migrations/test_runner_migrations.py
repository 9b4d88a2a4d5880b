"""The runner store's own Alembic environment: upgrade, check, downgrade, one head."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command

from runner_svc.storage import migrate
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
