"""The oracle's copy of the services' names (oracle_schema) still matches the services.

The oracle may not import the services, so it reads tables and values by
name; these tests import the services and fail as soon as a name drifts.
"""

from __future__ import annotations

import inspect
import re

import pytest
import sqlalchemy as sa

from coordinator_svc.core import attempting, decide_preflight
from coordinator_svc.core.edges import LEGAL_EDGES
from coordinator_svc.core.model import (
    TERMINAL_STATES,
    AttemptOutcome,
    Execution,
    OpState,
    ReplayPolicy,
)
from coordinator_svc.storage import tables as journal_tables
from runner_svc.core.model import Execution as RowExecution
from runner_svc.core.model import RowState
from runner_svc.core.transitions import SETTLE_TARGETS
from runner_svc.storage import tables as runner_tables
from turnwire.harness import oracle_schema as names

_JOURNAL = [
    (names.JOURNAL_OPERATIONS, names.OPERATION_COLUMNS),
    (names.JOURNAL_ATTEMPTS, names.ATTEMPT_COLUMNS),
    (names.JOURNAL_EVENTS, names.EVENT_COLUMNS),
]
_RUNNER = [
    (names.RUNNER_META, names.RUNNER_META_COLUMNS),
    (names.RUNNER_OPERATIONS, names.RUNNER_ROW_COLUMNS),
]


def _columns(metadata: sa.MetaData, table: str) -> set[str]:
    assert table in metadata.tables, f"the service has no table {table!r}"
    return {column.name for column in metadata.tables[table].columns}


@pytest.mark.parametrize(("table", "columns"), _JOURNAL)
def test_journal_tables_and_columns_exist(table: str, columns: tuple[str, ...]) -> None:
    """The journal columns the oracle reads exist in coordinator_svc/storage/tables.py."""
    assert set(columns) <= _columns(journal_tables.metadata, table)


@pytest.mark.parametrize(("table", "columns"), _RUNNER)
def test_runner_tables_and_columns_exist(table: str, columns: tuple[str, ...]) -> None:
    """The runner store columns the oracle reads exist in runner_svc/storage/tables.py."""
    assert set(columns) <= _columns(runner_tables.metadata, table)


def test_legal_edges_equal_the_coordinators() -> None:
    """§2: the oracle's edge table equals coordinator_svc.core.edges.LEGAL_EDGES."""
    theirs = {
        source.value: frozenset(target.value for target in targets)
        for source, targets in LEGAL_EDGES.items()
    }
    assert theirs == names.LEGAL_EDGES


def test_state_and_value_names_equal_the_coordinators() -> None:
    """The state, execution, outcome and policy names match coordinator_svc.core.model."""
    assert {state.value for state in OpState} == names.ALL_STATES
    assert {state.value for state in TERMINAL_STATES} == names.TERMINAL_STATES
    assert {names.NOT_STARTED, names.STARTED, names.UNKNOWN} == {e.value for e in Execution}
    assert AttemptOutcome.REFUSED.value == names.REFUSED
    assert ReplayPolicy.SAFE.value == names.SAFE
    for name in (names.QUEUED, names.DISPATCHING, names.DISPATCH_UNKNOWN, names.RUNNING):
        assert OpState(name).value == name


def test_runner_state_names_equal_the_runners() -> None:
    """The runner row state names the oracle uses match runner_svc.core.model."""
    assert RowState.TOMBSTONED.value == names.RUNNER_TOMBSTONED
    assert RowState.SUCCEEDED.value == names.RUNNER_SUCCEEDED
    assert {s.value for s in SETTLE_TARGETS[RowState.RUNNING]} == names.RUNNER_OUTCOMES
    assert {
        s.value for s in SETTLE_TARGETS[RowState.ACCEPTED]
    } == names.RUNNER_NEVER_LAUNCHED_OUTCOMES
    assert {names.NOT_STARTED, names.STARTED, names.UNKNOWN} == {e.value for e in RowExecution}


@pytest.mark.rule("C4", "C13")
def test_dispatch_detail_format_is_the_one_write_ahead_writes() -> None:
    """C4/C13: write_ahead's DISPATCHING detail starts like dispatch_detail_prefix says."""
    source = inspect.getsource(attempting.write_ahead)
    assert 'detail=f"attempt {number} -> {runner}/{incarnation_id}: {why}"' in source
    assert names.dispatch_detail_prefix(3) == "attempt 3 -> "


@pytest.mark.parametrize("phrase", [*names.ABSENCE_PROOF_PHRASES, names.SAFE_REPLAY_PHRASE])
def test_proof_phrases_are_written_by_the_coordinator(phrase: str) -> None:
    """§8.4: every accepted proof phrase is a `why` decide_preflight really writes."""
    literal = re.compile(r'why="[^"]*' + re.escape(phrase) + r'[^"]*"')
    assert literal.search(inspect.getsource(decide_preflight))
