"""Records <-> table rows. Columns are named like record fields; enums go by name."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, TypeVar

from coordinator_svc.core.model import (
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

R = TypeVar("R", OperationRecord, EventRecord, AttemptRecord)

# Which columns hold which enum; the rest are stored as they are.
_ENUM_COLUMNS: dict[str, type[enum.Enum]] = {
    "kind": TurnKind,
    "replay_policy": ReplayPolicy,
    "state": OpState,
    "execution": Execution,
    "stop_reason": StopReason,
    "from_state": OpState,
    "to_state": OpState,
    "outcome": AttemptOutcome,
}

_BYTES_COLUMNS = frozenset({"envelope", "result"})


def to_row(record: OperationRecord | EventRecord | AttemptRecord) -> dict[str, Any]:
    """Every field of ``record`` as a column value (enums as their names)."""
    row: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        row[field.name] = value.value if isinstance(value, enum.Enum) else value
    return row


def from_row(record_type: type[R], row: Mapping[Any, Any]) -> R:
    """The record of ``record_type`` a row stores."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(record_type):
        value = row[field.name]
        if value is not None and field.name in _ENUM_COLUMNS:
            value = _ENUM_COLUMNS[field.name](value)
        elif value is not None and field.name in _BYTES_COLUMNS:
            value = bytes(value)  # some drivers hand back memoryview
        values[field.name] = value
    return record_type(**values)
