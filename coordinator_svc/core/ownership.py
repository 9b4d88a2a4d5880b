"""§5 as a pure rule: who may act on an operation (O1, O3, O5).

Shared by the dispatcher (``dispatcher.replica``) and the deterministic
simulation, so the simulation checks the rule the engine runs.
"""

from __future__ import annotations

import enum
from datetime import datetime

from coordinator_svc.core.model import OperationRecord


class Role(enum.Enum):
    OWNER = "owner"  # the row names this replica: decide, write, send
    ADOPTER = "adopter"  # an open orphan: claim it, apply C12 (Restarted), then decide
    CANCEL_MARK = "cancel mark"  # another's: store a client's cancel for the owner (O5)
    BYSTANDER = "bystander"  # another's live lease: nothing to do here


def is_open(record: OperationRecord) -> bool:
    """Still someone's work: not terminal, or terminal with a Release owed (C10)."""
    return not record.state.terminal or not record.released


def lease_live(record: OperationRecord, now: datetime) -> bool:
    return record.lease_expires_at is not None and record.lease_expires_at > now


def is_orphan(record: OperationRecord, owner: str, now: datetime) -> bool:
    """Open, and nobody's live lease but ``owner``'s own: unowned, or another
    owner's lapsed lease (``Journal.orphans`` returns exactly these)."""
    if not is_open(record):
        return False
    if record.lease_owner is None:
        return True
    return record.lease_owner != owner and not lease_live(record, now)


def role(record: OperationRecord, owner: str, now: datetime, *, cancel: bool = False) -> Role:
    """What replica ``owner`` may do with ``record`` at ``now`` (``cancel``: the
    event is a client's CancelOperation)."""
    if record.lease_owner == owner:
        return Role.OWNER
    if is_orphan(record, owner, now):
        return Role.ADOPTER
    return Role.CANCEL_MARK if cancel else Role.BYSTANDER
