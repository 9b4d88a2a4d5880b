"""The hot-path statements store rows exactly as SQLAlchemy Core with the table
types does (tables.UtcDateTime, Boolean, LargeBinary), so a journal written by
either reads the same through the other, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.storage import migrate, open_journal
from coordinator_svc.storage.tables import operation_envelopes, operations
from tests.coordinator.storage.records import T0, first_event, new_operation


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    migrate(url)
    yield url


def _core_row(record: OperationRecord) -> dict[str, Any]:
    """The operations row (its envelope is stored beside it, in operation_envelopes)."""
    row = {}
    for field in dataclasses.fields(record):
        if field.name != "envelope":
            value = getattr(record, field.name)
            row[field.name] = getattr(value, "value", value)
    return row


def _full(number: int) -> OperationRecord:
    """An operation with every nullable time, boolean and bytes column set."""
    base = new_operation(number)
    return dataclasses.replace(
        base,
        last_attempt_at=T0 + timedelta(seconds=1, microseconds=7),
        lease_expires_at=T0 + timedelta(seconds=2),
        next_action_at=T0 + timedelta(seconds=3, microseconds=999999),
        unknown_since=T0,
        finished_at=T0 + timedelta(days=400),
        acknowledged=True,
        cancel_requested=True,
        released=True,
        result=b"\x00\xffresult",
        runner="runner-a",
        error_message="multi\nline",
    )


def test_rows_written_by_sqlalchemy_core_read_back_equal(url: str) -> None:
    """A row SQLAlchemy Core stored (the journal's writer before issue 10) reads back
    through the statements as the record it came from."""
    record = _full(1)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.insert(operations).values(_core_row(record)))
            connection.execute(
                sa.insert(operation_envelopes).values(
                    operation_id=record.operation_id, envelope=record.envelope
                )
            )
    finally:
        engine.dispose()

    async def read() -> OperationRecord | None:
        journal = open_journal(url)
        try:
            return await journal.get(record.operation_id)
        finally:
            await journal.close()

    assert asyncio.run(read()) == record


def test_rows_written_by_the_statements_read_back_equal_through_sqlalchemy_core(url: str) -> None:
    """The other way round: what the statements store, SQLAlchemy Core (and so the
    migrations and any SQL tool) reads as the same values."""
    record = dataclasses.replace(_full(2), last_event_sequence=0)

    async def write() -> OperationRecord:
        journal = open_journal(url)
        try:
            stored, _ = await journal.submit(record, first_event(record))
            return stored
        finally:
            await journal.close()

    stored = asyncio.run(write())
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            row = connection.execute(
                sa.select(operations).where(operations.c.operation_id == record.operation_id)
            ).one()
            envelope = connection.execute(
                sa.select(operation_envelopes.c.envelope).where(
                    operation_envelopes.c.operation_id == record.operation_id
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert row._asdict() == _core_row(stored)
    assert envelope == stored.envelope
