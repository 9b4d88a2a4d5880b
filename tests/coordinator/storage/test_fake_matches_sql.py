"""Differential test: random journal histories give identical results on the fake and SQLite.

The contract suite pins chosen cases; this drives both adapters through the
same random sequence of submits, commits (legal, illegal, stale) and claims,
and requires the same answer, error type and final contents from each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptUpdate,
    Change,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal, migrate, open_journal
from tests.coordinator.storage.conftest import emptied
from tests.coordinator.storage.records import (
    T0,
    bookkeeping,
    dispatch,
    first_event,
    new_operation,
    transition,
)

STATES = list(OpState)

# (claim, operation, owner, seconds since the previous claim): leases are 10 s long.
claim = st.tuples(st.just("claim"), st.integers(0, 5), st.integers(0, 2), st.integers(0, 15))
step = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(0, 1), st.integers(0, 1)),
    st.tuples(st.just("transition"), st.integers(0, 5), st.sampled_from(STATES)),
    st.tuples(st.just("dispatch"), st.integers(0, 5)),
    st.tuples(st.just("close_attempt"), st.integers(0, 5), st.sampled_from(list(AttemptOutcome))),
    st.tuples(st.just("bookkeeping"), st.integers(0, 5), st.integers(-5, 5), st.booleans()),
    st.tuples(st.just("stale"), st.integers(0, 5)),
    claim,
    claim,  # twice: lease takeovers need several claims on one operation
)


@pytest.fixture(scope="module")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite journal; each example works on a copy."""
    path = tmp_path_factory.mktemp("template") / "journal.db"
    migrate(f"sqlite:///{path}")
    return path


class Driver:
    """What a caller of one journal knows: the newest and the older records it has seen."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.ids: list[str] = []
        self.latest: dict[str, OperationRecord] = {}
        self.older: dict[str, OperationRecord] = {}
        self.submits = 0
        self.clock = T0

    def _pick(self, index: int) -> OperationRecord | None:
        if not self.ids:
            return None
        return self.latest[self.ids[index % len(self.ids)]]

    def _change(self, kind: str, record: OperationRecord, args: tuple[Any, ...]) -> Change:
        if kind == "transition":
            return transition(record, args[0])
        if kind == "dispatch":
            return dispatch(record)
        if kind == "close_attempt":
            update = AttemptUpdate(max(record.attempt_count, 1), args[0], "closed")
            return dataclasses.replace(bookkeeping(record), attempt_updates=(update,))
        if kind == "bookkeeping":
            return bookkeeping(
                record, next_action_at=T0 + timedelta(seconds=args[0]), cancel_requested=args[1]
            )
        return dispatch(self.older.get(record.operation_id, record))  # "stale"

    def _call(self, kind: str, args: tuple[Any, ...]) -> Awaitable[Any] | None:
        if kind == "submit":
            self.submits += 1
            number, key, request = args
            operation = new_operation(
                100 + self.submits,
                principal=f"p{number % 2}",
                key=f"k{key}",
                request=f"r{request}",
            )
            return self.journal.submit(operation, first_event(operation))
        record = self._pick(args[0])
        if record is None:
            return None
        if kind == "claim":
            owner, seconds = args[1:]
            self.clock += timedelta(seconds=seconds)  # the claim clock only moves forward
            return self.journal.claim(record.operation_id, f"r{owner}", self.clock, 10)
        return self.journal.commit(self._change(kind, record, args[1:]))

    def _remember(self, value: Any) -> None:
        record = value[0] if isinstance(value, tuple) else value
        if isinstance(record, OperationRecord):
            if record.operation_id not in self.latest:
                self.ids.append(record.operation_id)
            else:
                self.older[record.operation_id] = self.latest[record.operation_id]
            self.latest[record.operation_id] = record

    async def apply(self, kind: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        call = self._call(kind, args)
        if call is None:
            return ("skipped", None)
        try:
            value = await call
        except Exception as error:
            return ("error", type(error).__name__)
        self._remember(value)
        return ("ok", value)

    async def contents(self) -> tuple[Any, ...]:
        journal = self.journal
        per_operation = [
            (
                await journal.get(op_id),
                await journal.events(op_id, 0, 1000),
                await journal.attempts(op_id),
            )
            for op_id in sorted(self.ids)
        ]
        listings = [await journal.list_for_principal(p, [], 1000, None) for p in ("p0", "p1")]
        by_state = [await journal.in_state(state, 1000) for state in STATES]
        due = [await journal.due(T0 + timedelta(seconds=s), 1000) for s in (-10, 0, 10)]
        return (per_operation, listings, by_state, due, journal.commits)


async def _compare(steps: list[tuple[Any, ...]], sqlite_url: str) -> None:
    fake = Driver(FakeJournal())
    sql = Driver(open_journal(sqlite_url))
    # Two operations exist from the start, so every step has something to act on.
    history = [("submit", 0, 0, 0), ("submit", 1, 1, 0), *steps]
    try:
        for number, (kind, *args) in enumerate(history):
            expected = await fake.apply(kind, tuple(args))
            actual = await sql.apply(kind, tuple(args))
            assert actual == expected, f"step {number} {kind}{tuple(args)}"
        assert await sql.contents() == await fake.contents()
    finally:
        await sql.journal.close()


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same histories every run: a failure reproduces
    database=None,  # nothing written to .hypothesis/
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=15, max_size=40))
def test_random_histories_agree_on_fake_and_sqlite(
    migrated_template: Path, steps: list[tuple[Any, ...]]
) -> None:
    """Port contract: the fake and SQLite give the same results for any history of calls."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "journal.db"
        shutil.copyfile(migrated_template, copy)
        asyncio.run(_compare(steps, f"sqlite:///{copy}"))


@pytest.mark.postgres
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=15, max_size=40))
def test_random_histories_agree_on_fake_and_postgresql(
    module_postgres_journal: str, steps: list[tuple[Any, ...]]
) -> None:
    """Port contract: the fake and PostgreSQL give the same results for any history of calls."""
    asyncio.run(_compare(steps, emptied(module_postgres_journal)))
