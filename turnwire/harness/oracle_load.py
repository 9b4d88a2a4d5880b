"""Reading a finished run: the journal (any SQLAlchemy URL), runner stores, the ledger.

Tables are read by reflection, so the oracle never imports the services; the
names it needs are in ``oracle_schema``. Reading only selects: nothing in the
journal or a store is changed. Any input the oracle cannot read raises
:class:`OracleInputError` with what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from turnwire.harness import oracle_schema as names
from turnwire.harness.oracle_history import (
    JournalAttempt,
    JournalEvent,
    JournalOperation,
    RunnerResult,
    RunnerRow,
    RunnerStore,
    RunRecord,
    assemble,
    utc,
)
from turnwire.ledger import LedgerCorruptError, LedgerEntry, read_ledger


class OracleInputError(Exception):
    """A journal, store or ledger the oracle cannot read; nothing was checked."""


def load_run(journal_url: str, runner_stores: Sequence[Path], ledger: Path) -> RunRecord:
    """Read everything a run left behind, joined per operation."""
    operations, attempts, events = load_journal(journal_url)
    # A store named twice must not count its rows twice.
    unique = dict.fromkeys(Path(path).resolve() for path in runner_stores)
    stores = [load_runner_store(path) for path in unique]
    return assemble(operations, attempts, events, stores, load_ledger(ledger))


def load_ledger(path: Path) -> list[LedgerEntry]:
    if not path.is_file():
        raise OracleInputError(f"no ledger file at {path} (the metered executor's --ledger)")
    try:
        return read_ledger(path)
    except LedgerCorruptError as error:
        raise OracleInputError(str(error)) from error


def _engine_url(url: str) -> sa.URL:
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as error:
        raise OracleInputError(f"not a database URL: {url!r}") from error
    if parsed.drivername == "postgresql":  # what the coordinator means by it too
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if not database or database == ":memory:" or not Path(database).is_file():
            raise OracleInputError(f"no SQLite database file at {database or '(none)'}")
    return parsed


def _read(connection: sa.Connection, table_name: str, columns: Sequence[str]) -> list[Any]:
    """The named columns of every row, via reflection (no service import)."""
    try:
        table = sa.Table(table_name, sa.MetaData(), autoload_with=connection)
    except sa.exc.NoSuchTableError as error:
        raise OracleInputError(f"table {table_name!r} is missing: not migrated?") from error
    missing = [column for column in columns if column not in table.c]
    if missing:
        raise OracleInputError(f"table {table_name!r} lacks columns {', '.join(missing)}")
    query = sa.select(*(table.c[column] for column in columns))
    return list(connection.execute(query).mappings())


def _read_all(url: sa.URL, wanted: Mapping[str, Sequence[str]], what: str) -> dict[str, list[Any]]:
    engine = sa.create_engine(url)
    try:
        # One read transaction: every table from the same snapshot.
        with engine.connect() as connection, connection.begin():
            return {table: _read(connection, table, cols) for table, cols in wanted.items()}
    except sa.exc.SQLAlchemyError as error:
        raise OracleInputError(f"cannot read {what}: {error}") from error
    finally:
        engine.dispose()


def load_journal(
    url: str,
) -> tuple[list[JournalOperation], list[JournalAttempt], list[JournalEvent]]:
    tables = _read_all(
        _engine_url(url),
        {
            names.JOURNAL_OPERATIONS: names.OPERATION_COLUMNS,
            names.JOURNAL_ATTEMPTS: names.ATTEMPT_COLUMNS,
            names.JOURNAL_EVENTS: names.EVENT_COLUMNS,
        },
        f"the journal at {url}",
    )
    try:
        operations = [_operation(row) for row in tables[names.JOURNAL_OPERATIONS]]
        attempts = [_attempt(row) for row in tables[names.JOURNAL_ATTEMPTS]]
        events = [_event(row) for row in tables[names.JOURNAL_EVENTS]]
    except ValueError as error:
        raise OracleInputError(
            f"the journal at {url} holds an unreadable value: {error}"
        ) from error
    return operations, attempts, events


def load_runner_store(path: Path) -> RunnerStore:
    if not path.is_file():
        raise OracleInputError(f"no runner store file at {path}")
    tables = _read_all(
        sa.make_url(f"sqlite:///{path}"),
        {
            names.RUNNER_META: names.RUNNER_META_COLUMNS,
            names.RUNNER_OPERATIONS: names.RUNNER_ROW_COLUMNS,
        },
        f"the runner store at {path}",
    )
    metas = tables[names.RUNNER_META]
    if len(metas) != 1:
        raise OracleInputError(f"runner store {path} has {len(metas)} meta rows, expected 1")
    store_id = str(metas[0]["store_id"])
    try:
        rows = tuple(
            _runner_row(str(path), store_id, row) for row in tables[names.RUNNER_OPERATIONS]
        )
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        raise OracleInputError(f"runner store {path} holds an unreadable value: {error}") from error
    return RunnerStore(path=str(path), store_id=store_id, rows=rows)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _operation(row: Mapping[str, Any]) -> JournalOperation:
    result = row["result"]
    return JournalOperation(
        operation_id=str(row["operation_id"]),
        state=str(row["state"]),
        execution=str(row["execution"]),
        replay_policy=str(row["replay_policy"]),
        max_attempts=int(row["max_attempts"]),
        attempt_count=int(row["attempt_count"]),
        runner=_text(row["runner"]),
        incarnation_id=_text(row["incarnation_id"]),
        store_id=_text(row["store_id"]),
        result=None if result is None else bytes(result),
        error_reason=_text(row["error_reason"]),
        error_message=_text(row["error_message"]),
        last_event_sequence=int(row["last_event_sequence"]),
    )


def _attempt(row: Mapping[str, Any]) -> JournalAttempt:
    return JournalAttempt(
        operation_id=str(row["operation_id"]),
        number=int(row["number"]),
        runner=str(row["runner"]),
        incarnation_id=str(row["incarnation_id"]),
        store_id=_text(row["store_id"]),
        sent_at=utc(row["sent_at"]),
        outcome=str(row["outcome"]),
        detail=str(row["detail"]),
    )


def _event(row: Mapping[str, Any]) -> JournalEvent:
    return JournalEvent(
        operation_id=str(row["operation_id"]),
        sequence=int(row["sequence"]),
        from_state=_text(row["from_state"]),
        to_state=str(row["to_state"]),
        execution=str(row["execution"]),
        at=utc(row["at"]),
        reason=str(row["reason"]),
        detail=str(row["detail"]),
    )


def _seconds(value: object) -> float | None:
    return None if value is None else float(str(value))


def _runner_result(row: Mapping[str, Any]) -> RunnerResult | None:
    if row["result_output"] is None:
        return None
    metadata = json.loads(row["result_metadata"] or "{}")
    return RunnerResult(
        output=bytes(row["result_output"]),
        content_type=str(row["result_content_type"] or ""),
        metadata=_pairs(metadata.items()),
    )


def _pairs(items: Iterable[tuple[object, object]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(key), str(value)) for key, value in items))


def _runner_row(path: str, store_id: str, row: Mapping[str, Any]) -> RunnerRow:
    return RunnerRow(
        store_path=path,
        store_id=store_id,
        operation_id=str(row["operation_id"]),
        state=str(row["state"]),
        execution=str(row["execution"]),
        incarnation_id=str(row["incarnation_id"]),
        attempt=int(row["attempt"]),
        result=_runner_result(row),
        error_reason=_text(row["error_reason"]),
        released=bool(row["released"]),
        accepted_at=_seconds(row["accepted_at"]),
        started_at=_seconds(row["started_at"]),
        settled_at=_seconds(row["settled_at"]),
    )
