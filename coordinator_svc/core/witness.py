"""The §6 witness, seen from the coordinator: may a runner's durable store
speak for attempts its earlier incarnations received?

The runner side is explained in ``runner_svc.core.witness``. In short: every
Dispatch carries the attempt's ``dispatch_stamp`` (its ``sent_at`` in
microseconds, kept in the journal, so the witness lives outside the runner's
store); the store keeps an admission floor per owner and, at each opening, the
floor the previous owner left. A store state is always a prefix of the store's
real history, so an opening that found incarnation ``I``'s floor above an
attempt's stamp proves the state it opened already held everything ``I``
could ever admit or launch for that attempt.

A store vouches for an operation only if that holds for *every* attempt that
went to one of its earlier incarnations and was not definitely refused. A
store that cannot vouch is read exactly like a store that is not durable: a
changed incarnation is ``INCARNATION_CHANGED`` with ``execution = UNKNOWN``
(C8/C9), never a replay and never a re-admission (issue 8.1: a runner store
restored from a backup ran a turn twice before this rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coordinator_svc.core.model import AttemptOutcome, AttemptRecord
from turnwire.ids import dispatch_stamp


@dataclass(frozen=True)
class StoreOpen:
    """One opening of a runner store, as the runner reports it."""

    incarnation_id: str
    predecessor_incarnation_id: str
    predecessor_floor: int


def floor_after(openings: Iterable[StoreOpen], incarnation_id: str) -> int | None:
    """The floor ``incarnation_id`` left when the store was next opened, or None
    when this store's chain does not show it handing the store over."""
    for opening in openings:
        if opening.predecessor_incarnation_id == incarnation_id:
            return opening.predecessor_floor
    return None


def attempt_vouched(attempt: AttemptRecord, store_id: str, openings: Iterable[StoreOpen]) -> bool:
    """The store ``store_id`` holds the last word of ``attempt``'s incarnation on it."""
    if attempt.store_id != store_id:
        return False
    floor = floor_after(openings, attempt.incarnation_id)
    return floor is not None and floor > dispatch_stamp(attempt.sent_at)


def store_vouches(
    attempts: Iterable[AttemptRecord],
    *,
    incarnation_id: str,
    store_id: str,
    openings: Iterable[StoreOpen],
) -> bool:
    """Every attempt sent to an earlier incarnation and not definitely refused
    is vouched for by the store's chain (the current incarnation speaks for its
    own attempts directly)."""
    chain = tuple(openings)
    return all(
        attempt_vouched(attempt, store_id, chain)
        for attempt in attempts
        if attempt.outcome is not AttemptOutcome.REFUSED
        and attempt.incarnation_id != incarnation_id
    )
