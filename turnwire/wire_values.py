"""Our enums and datetimes <-> their generated wire forms, cheaply (issue 10).

Both services and the SDK mirror each wire enum by name without its prefix
(``EXECUTION_STARTED`` <-> ``Execution.STARTED``). Spelling the name out and
asking the generated wrapper on every call cost several microseconds each,
a dozen times a turn; an :class:`EnumBridge` builds both tables once, at
import, and fails there if a member of ours has no wire value.

protobuf's ``Timestamp.FromDatetime``/``ToDatetime`` take ~4 us each, as much
as the rest of a small message; the two functions below do the same
arithmetic directly (whole microseconds, as datetime holds them).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

E = TypeVar("E", bound=enum.Enum)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_SECONDS = 86400


class EnumBridge(Generic[E]):
    """One enum of ours and one generated wire enum, mapped by name after ``prefix``."""

    def __init__(self, ours: type[E], wire: Any, prefix: str) -> None:
        # ``wire``: a generated EnumTypeWrapper (e.g. turn_pb2.Execution).
        self.to_wire: dict[E, int] = {member: wire.Value(prefix + member.value) for member in ours}
        self.from_wire: dict[int, E] = {number: member for member, number in self.to_wire.items()}


def timestamp(value: datetime) -> Timestamp:
    """A Timestamp for ``value``; a naive datetime is UTC by convention."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = aware - EPOCH  # days may be negative; seconds and microseconds never are
    return Timestamp(
        seconds=delta.days * _DAY_SECONDS + delta.seconds, nanos=delta.microseconds * 1000
    )


def utc_datetime(message: Timestamp) -> datetime:
    """The UTC datetime of a Timestamp (nanoseconds below a microsecond dropped)."""
    return EPOCH + timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
