"""The §6 witness: what lets a later incarnation vouch for an earlier one.

A runner store can be restored, copied or rolled back by means no check of
the store itself can see (a backup copied over it on a reused inode keeps
every byte the store would use to recognise itself). So a store's absence
proofs need a witness outside it: the coordinator's journal. Every Dispatch
carries a ``dispatch_stamp`` (microseconds on the coordinator's clock when
the attempt was written ahead, recorded with the attempt), and each store
keeps an **admission floor** for its current owner:

- the owner admits (or takes over) a Dispatch only if its stamp is not below
  the floor, and launches a row only while its stamp is not below the floor;
- the floor only grows within an owner's life: to ``now - window`` on a timer,
  but never past the stamp of an own row that is accepted and may still launch;
- a clean close seals it (``SEALED_FLOOR``) once nothing can launch any more;
- opening the store appends ``(new owner, previous owner, previous floor)`` to
  the store's chain of openings.

Any state a store is put back to is a *prefix* of its real history. If the
opening after incarnation ``I`` found ``I``'s floor above an attempt's stamp,
that prefix was taken after every admission (and launch) ``I`` could ever make
for the attempt, so absence (or an accepted, never launched row) in it is a
proof. Otherwise nothing can tell "never arrived" from "arrived, then the
store was rolled back", and the honest answer stays unknown. Clocks only
affect liveness (a stale refusal), never this argument.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from runner_svc.core.model import Refusal, RunnerRefusal

# A floor no stamp reaches: the owner closed the store and admits nothing more.
SEALED_FLOOR = 2**63 - 1
# The store keeps (and replies show) this many most recent openings.
OPENINGS_KEPT = 32
_DIGEST_MODULUS = 2**63


@dataclass(frozen=True)
class StoreOpening:
    """One opening of a store: who opened it, after whom, at which floor."""

    incarnation_id: str
    predecessor_incarnation_id: str
    predecessor_floor: int
    opened_at: float


def check_admissible(stamp: int, floor: int, operation_id: str) -> None:
    """A Dispatch below the floor is refused for good (typed, definite: C6). The
    floor goes in the refusal's metadata (``admission_floor``): with the stamp and
    the time it took, the coordinator can tell a late Dispatch from a clock that
    runs ahead of its own (C6c)."""
    if stamp < floor:
        raise RunnerRefusal(
            Refusal.DISPATCH_STALE,
            f"{operation_id}: dispatch_stamp {stamp} is below the admission floor {floor}: "
            "sent too long ago, or the coordinator's clock is behind this runner's",
            {"admission_floor": str(floor)},
        )


def next_floor(current: int, target: int, launchable_stamps: Iterable[int]) -> int:
    """The floor after an advance towards ``target``: never down, and never past
    the stamp of a row that is accepted and may still launch."""
    bound = min(launchable_stamps, default=target)
    return max(current, min(target, bound))


def vouches(openings: Iterable[StoreOpening], incarnation_id: str, stamp: int) -> bool:
    """Does this store's chain prove that the state the next owner opened held
    everything ``incarnation_id`` admitted or launched for a Dispatch stamped
    ``stamp``? Only if the opening after it found its floor above the stamp."""
    for opening in openings:
        if opening.predecessor_incarnation_id == incarnation_id:
            return opening.predecessor_floor > stamp
    return False


def row_digest_term(operation_id: str) -> int:
    """One row's share of the store's row digest (a sum, so order never matters)."""
    return int.from_bytes(hashlib.sha256(operation_id.encode()).digest()[:8], "big") % (
        _DIGEST_MODULUS
    )


def add_to_digest(digest: int, operation_id: str) -> int:
    return (digest + row_digest_term(operation_id)) % _DIGEST_MODULUS


def remove_from_digest(digest: int, operation_id: str) -> int:
    """The digest without one row (retention deletes rows, PROTOCOL.md §9 K2)."""
    return (digest - row_digest_term(operation_id)) % _DIGEST_MODULUS


def digest_of(operation_ids: Iterable[str]) -> tuple[int, int]:
    """(row count, row digest) of a set of rows, to compare with the kept pair."""
    count = 0
    digest = 0
    for operation_id in operation_ids:
        count += 1
        digest = add_to_digest(digest, operation_id)
    return count, digest
