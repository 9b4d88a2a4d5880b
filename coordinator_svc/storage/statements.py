"""The journal's hot-path SQL as fixed text, and the row codecs for each dialect.

Why not SQLAlchemy Core here: building a statement, its cache key and its
bind processors cost ~0.3 ms of CPU per call, several times the cost of the
SQL itself, and a turn makes a dozen calls (issue 10, measured by
bench/e2e.py). Each statement below is built once, from the table
definitions in ``tables`` (so a column added there is added here), and the
driver prepares it once per connection (sqlite3's statement cache,
psycopg's automatic prepare). SQLAlchemy and Alembic keep the schema, the
migrations and opening the journal.

The codecs store exactly what SQLAlchemy stored before this module existed,
so journals written by either read the same: on SQLite a datetime is UTC
text ``YYYY-MM-DD HH:MM:SS.ffffff`` (text order is time order) and a boolean
is 0/1; on PostgreSQL both are native (``timestamptz``, ``boolean``).
``tests/coordinator/storage`` runs every statement on both dialects.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from coordinator_svc.core.model import (
    TERMINAL_STATES,
    AttemptOutcome,
    AttemptRecord,
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    StopReason,
    TurnKind,
)
from coordinator_svc.storage import rules
from coordinator_svc.storage.tables import attempts, events, operations

R = TypeVar("R", OperationRecord, EventRecord, AttemptRecord)

_ENUM_FIELDS: dict[str, type[enum.Enum]] = {
    "kind": TurnKind,
    "replay_policy": ReplayPolicy,
    "state": OpState,
    "execution": Execution,
    "stop_reason": StopReason,
    "from_state": OpState,
    "to_state": OpState,
    "outcome": AttemptOutcome,
}
_BYTES_FIELDS = frozenset({"envelope", "result"})


class Dialect:
    """How one database spells parameters and stores times and booleans."""

    def __init__(self, name: str) -> None:
        if name not in ("sqlite", "postgresql"):
            raise ValueError(f"no statements for dialect {name!r}")
        self.name = name
        self.sqlite = name == "sqlite"

    def sql(self, text: str) -> str:
        """``text`` with ``:name`` parameters in this driver's style."""
        if self.sqlite:
            return text  # sqlite3 takes :name as it is
        return re.sub(r"(?<![:\w]):([a-z_][a-z0-9_]*)", r"%(\1)s", text)

    def encode_time(self, value: datetime) -> Any:
        value = rules.as_utc(value, "stored time")
        if self.sqlite:
            # SQLAlchemy's text form ("%Y-%m-%d %H:%M:%S.%f"), 4x cheaper than strftime.
            return value.replace(tzinfo=None).isoformat(" ", "microseconds")
        return value

    def decode_time(self, value: Any) -> datetime:
        if isinstance(value, str):  # SQLite keeps UTC as naive text
            return datetime.fromisoformat(value).replace(tzinfo=UTC)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def _field_kinds(record_type: type[Any]) -> list[tuple[str, str]]:
    """(field name, how it is stored) for every field, in declaration order."""
    kinds = []
    for field in dataclasses.fields(record_type):
        annotation = str(field.type)
        if field.name in _ENUM_FIELDS:
            kind = "enum"
        elif field.name in _BYTES_FIELDS:
            kind = "bytes"
        elif "datetime" in annotation:
            kind = "time"
        elif annotation.startswith("bool"):
            kind = "bool"
        else:
            kind = "plain"
        kinds.append((field.name, kind))
    return kinds


class Codec(Generic[R]):
    """One record type <-> one table row, for one dialect (converters built once)."""

    def __init__(
        self,
        record_type: type[R],
        table: sa.Table,
        dialect: Dialect,
        elsewhere: frozenset[str] = frozenset(),
    ) -> None:
        """``elsewhere``: fields stored in another table (the envelope)."""
        self.record_type: type[R] = record_type
        self.fields = _field_kinds(record_type)
        names = [name for name, _ in self.fields]
        stored = [name for name in names if name not in elsewhere]
        if set(stored) != set(table.columns.keys()):  # tests/coordinator/storage pins this too
            raise AssertionError(f"{table.name}: columns and {record_type.__name__} differ")
        self.columns = ", ".join(names)
        # The table's own columns, in field order (inserts).
        self.stored_columns = ", ".join(stored)
        self.stored_params = ", ".join(f":{name}" for name in stored)
        self._encoders = [(name, self._encoder(kind, dialect)) for name, kind in self.fields]
        self._decoders = [self._decoder(name, kind, dialect) for name, kind in self.fields]

    @staticmethod
    def _encoder(kind: str, dialect: Dialect) -> Callable[[Any], Any] | None:
        if kind == "enum":
            return lambda value: value.value
        if kind == "time":
            return dialect.encode_time
        if kind == "bool" and dialect.sqlite:
            return int
        return None

    @staticmethod
    def _decoder(name: str, kind: str, dialect: Dialect) -> Callable[[Any], Any] | None:
        if kind == "enum":
            return _ENUM_FIELDS[name]
        if kind == "time":
            return dialect.decode_time
        if kind == "bool":
            return bool
        if kind == "bytes":
            return bytes  # some drivers hand back memoryview
        return None

    def encode(self, record: R, prefix: str = "") -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, encoder in self._encoders:
            value = getattr(record, name)
            if value is not None and encoder is not None:
                value = encoder(value)
            row[prefix + name] = value
        return row

    def decode(self, row: Sequence[Any]) -> R:
        values = [
            value if value is None or decoder is None else decoder(value)
            for value, decoder in zip(row, self._decoders, strict=True)
        ]
        record: R = self.record_type(*values)
        return record


def terminal_list() -> str:
    # Literal state names (our own enum values, never input): they let the
    # planner use the (state, next_action_at) index like any constant.
    return ", ".join(f"'{state.value}'" for state in sorted(TERMINAL_STATES, key=str))


def due_ids(*, queued: bool) -> str:
    """The ids the due scan wants, one indexed question per state (issue 27):
    an open state's rows whose next_action_at is unset or has passed, through
    (state, next_action_at); a terminal state's unreleased rows, through
    (released, state). One ``WHERE`` over all of it, with ``NOT IN`` and
    ``OR``, used no index: every scan read every operation the journal keeps."""
    ids = "SELECT operation_id FROM operations WHERE"
    questions = []
    for state in sorted(OpState, key=str):
        name = f"'{state.value}'"
        if state in TERMINAL_STATES:
            questions.append(f"{ids} released = FALSE AND state = {name}")
        elif queued or state is not OpState.QUEUED:
            questions.append(f"{ids} state = {name} AND next_action_at IS NULL")
            questions.append(f"{ids} state = {name} AND next_action_at <= :now")
    return " UNION ALL ".join(questions)


class Statements:
    """Every hot-path statement of the journal, as text for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        sql = dialect.sql
        self.operation = Codec(OperationRecord, operations, dialect, frozenset({"envelope"}))
        self.event = Codec(EventRecord, events, dialect)
        self.attempt = Codec(AttemptRecord, attempts, dialect)
        # The envelope lives in its own table (0004): read back in field order by
        # a keyed subquery, so every WHERE below still names operations' columns.
        envelope = (
            "(SELECT e.envelope FROM operation_envelopes e"
            " WHERE e.operation_id = operations.operation_id)"
        )
        op_columns = ", ".join(
            envelope if name == "envelope" else name for name, _ in self.operation.fields
        )
        select_op = f"SELECT {op_columns} FROM operations"
        order = " ORDER BY created_at, operation_id LIMIT :limit"

        self.insert_operation = sql(
            f"INSERT INTO operations ({self.operation.stored_columns})"
            f" VALUES ({self.operation.stored_params})"
            " ON CONFLICT DO NOTHING RETURNING operation_id"
        )
        self.insert_envelope = sql(
            "INSERT INTO operation_envelopes (operation_id, envelope)"
            " VALUES (:operation_id, :envelope)"
        )
        self.insert_event = sql(
            f"INSERT INTO events ({self.event.columns}) VALUES ({_params(self.event)})"
        )
        self.insert_attempt = sql(
            f"INSERT INTO attempts ({self.attempt.columns}) VALUES ({_params(self.attempt)})"
        )
        self.get = sql(f"{select_op} WHERE operation_id = :operation_id")
        self.get_for_principal = sql(
            f"{select_op} WHERE operation_id = :operation_id AND principal = :principal"
        )
        self.by_key = sql(
            f"{select_op} WHERE principal = :principal"
            " AND idempotency_key_digest = :idempotency_key_digest"
        )
        self.select_operations = select_op
        self.due = sql(f"{select_op} WHERE operation_id IN ({due_ids(queued=True)}){order}")
        self.due_not_queued = sql(
            f"{select_op} WHERE operation_id IN ({due_ids(queued=False)}){order}"
        )
        self.in_state = sql(f"{select_op} WHERE state = :state{order}")
        bound = f"{select_op} WHERE state = :state AND runner = :runner"
        self.bound_to = sql(f"{bound}{order}")
        self.bound_elsewhere = sql(
            f"{bound} AND (incarnation_id IS NULL OR incarnation_id <> :incarnation){order}"
        )
        self.events = sql(
            f"SELECT {self.event.columns} FROM events WHERE operation_id = :operation_id"
            " AND sequence > :after ORDER BY sequence LIMIT :limit"
        )
        self.attempts = sql(
            f"SELECT {self.attempt.columns} FROM attempts WHERE operation_id = :operation_id"
            " ORDER BY number"
        )
        mutable = [name for name, _ in self.operation.fields if name not in rules.IMMUTABLE_FIELDS]
        self.mutable_fields = tuple(mutable)
        self.compare_and_set = sql(
            "UPDATE operations SET "
            + ", ".join(f"{name} = :{name}" for name in mutable)
            # state: redundant with version unless `before` was not read from
            # here; then the edge check judged the wrong state.
            + " WHERE operation_id = :where_operation_id AND version = :where_version"
            " AND fencing_token = :where_fencing_token AND state = :where_state"
        )
        self.version_and_token = sql(
            "SELECT version, fencing_token FROM operations WHERE operation_id = :operation_id"
        )
        self.close_attempt = sql(
            "UPDATE attempts SET outcome = :outcome, detail = :detail"
            " WHERE operation_id = :operation_id AND number = :number"
        )
        lock = "" if dialect.sqlite else " FOR UPDATE SKIP LOCKED"
        # SQLite: BEGIN IMMEDIATE already holds the database write lock. On
        # PostgreSQL a row another replica is claiming or writing is skipped,
        # not waited for: that replica is busy with it (§5).
        self.claim_read = sql(f"{select_op} WHERE operation_id = :operation_id{lock}")
        self.claim_write = sql(
            "UPDATE operations SET lease_owner = :lease_owner,"
            " lease_expires_at = :lease_expires_at, fencing_token = :fencing_token,"
            " version = :version WHERE operation_id = :operation_id AND version = :where_version"
        )

    def listing(
        self, states: Sequence[OpState], after: bool
    ) -> tuple[str, Callable[[Mapping[str, Any]], dict[str, Any]]]:
        """list_for_principal's statement (its shape depends on the filter) and
        a function that adds the state parameters to the others."""
        clauses = ["principal = :principal"]
        names = [f"state_{index}" for index in range(len(states))]
        if states:
            clauses.append(f"state IN ({', '.join(':' + name for name in names)})")
        if after:
            clauses.append(
                "(created_at > :after_created_at OR"
                " (created_at = :after_created_at AND operation_id > :after_operation_id))"
            )
        text = self.dialect.sql(
            f"{self.select_operations} WHERE {' AND '.join(clauses)}"
            " ORDER BY created_at, operation_id LIMIT :limit"
        )

        def parameters(others: Mapping[str, Any]) -> dict[str, Any]:
            return {**others, **{n: s.value for n, s in zip(names, states, strict=True)}}

        return text, parameters


def _params(codec: Codec[Any]) -> str:
    return ", ".join(f":{name}" for name, _ in codec.fields)
