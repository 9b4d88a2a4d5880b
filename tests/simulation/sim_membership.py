"""The runner set changing under load (PROTOCOL.md §11): the journal's set, each
coordinator's view of it, the operator's acts, and the rules checked.

In a *membership* schedule (``Setup.membership``) an operator drains,
undrains, removes (with or without force) and adds back runners while turns
run. The journal's set is here (``SimMembership``), decided by the real pure
rules (``core.membership``: ``removal_refusal``, ``BOUND_STATES``). Each
coordinator process has its own view: the replica that took the call sees
the change at once, the others only at their next read (``member sync
@cN``), and a restart reads it before recovery (M5). So a replica that has
not read a drain can bind a turn to a runner after the removal's check, the
race M3 names. The runner processes are not touched: a removed runner keeps
running, and may still hold rows, executors and results.

Labels (with ``@cN``: the replica that takes the call):

    member drain <runner> @cN          DrainRunner (V8)
    member undrain <runner> @cN
    member remove <runner> [force] @cN RemoveRunner (M3, M4)
    member add <runner> @cN            AddRunner of a removed name: a new generation (M7)
    member sync @cN                    the replica reads the set (its poll, M5)

Checked (``MembershipChecker``, beside the §8 checker): no coordinator sends
a call to a runner outside its view (M6: nothing is sent to a non-member);
a turn ends RUNNER_REMOVED only if its runner's removal was forced, or the
turn was bound after that removal was checked (the M3 race); nothing else
is special: every §8 invariant holds as in any schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import BOUND_STATES, added, removal_refusal
from coordinator_svc.core.model import OperationRecord
from tests.simulation.sim_journal import SimJournal
from tests.simulation.world import EPOCH

# Weights of the operator's acts (per runner or replica) in a membership schedule.
WEIGHTS = {"drain": 0.3, "undrain": 0.08, "remove": 0.25, "force": 0.06, "add": 0.3, "sync": 0.8}


@dataclass(frozen=True)
class Removal:
    runner: str
    order: int  # when, in the order of the world's events (steps share virtual times)
    forced: bool


@dataclass
class SimMembership:
    """The journal's runner set (M1): member names with their generation, drains, removals."""

    generation: dict[str, int]
    drained: set[str] = field(default_factory=set)
    removals: list[Removal] = field(default_factory=list)
    _sequence: dict[str, int] = field(default_factory=dict)
    # Counts the world's membership-relevant events (removals, attempts written).
    events: int = 0
    # False breaks M3 (teeth): a removal without force ignores the bound turns.
    checks_turns: bool = True

    def next_event(self) -> int:
        self.events += 1
        return self.events

    @classmethod
    def of(cls, names: list[str]) -> SimMembership:
        return cls({name: 1 for name in names}, _sequence={name: 1 for name in names})

    def members(self) -> frozenset[str]:
        return frozenset(self.generation)

    def view(self) -> tuple[frozenset[str], frozenset[str]]:
        """What a replica reads: the members and the drains."""
        return self.members(), frozenset(self.drained)

    def drain(self, runner: str) -> str:
        if runner not in self.generation:
            return "RUNNER_NOT_FOUND"
        self.drained.add(runner)
        return f"{runner} drained"

    def undrain(self, runner: str) -> str:
        self.drained.discard(runner)
        return f"{runner} undrained"

    def remove(self, runner: str, *, force: bool, journal: SimJournal) -> str:
        """M3/M4 by the real rule: drained and no bound turn, unless forced."""
        bound = [r.operation_id for r in journal.operations.values() if _bound_to(r, runner)]
        live = None
        if runner in self.generation:
            live = added(RunnerEndpoint(runner, "sim"), "ops", "", EPOCH, self.generation[runner])
        refusal = removal_refusal(
            live,
            generation=0,
            drained=runner in self.drained,
            bound=len(bound) if self.checks_turns else 0,
            force=force,
        )
        if refusal is not None:
            return f"refused {refusal} ({len(bound)} bound)"
        del self.generation[runner]
        self.drained.discard(runner)  # the drain goes with the member (M1)
        self._sequence[runner] += 1
        self.removals.append(Removal(runner, self.next_event(), force))
        return f"{runner} removed{' by force' if force else ''}, {len(bound)} bound"

    def add(self, runner: str) -> str:
        if runner in self.generation:
            return "replay"
        self._sequence[runner] += 1
        self.generation[runner] = self._sequence[runner]
        return f"{runner} added, generation {self.generation[runner]}"

    def last_removal(self, runner: str) -> Removal | None:
        return next((r for r in reversed(self.removals) if r.runner == runner), None)


def _bound_to(record: OperationRecord, runner: str) -> bool:
    return record.runner == runner and record.state in BOUND_STATES


def actions(
    membership: SimMembership,
    names: list[str],
    views: dict[str, tuple[frozenset[str], frozenset[str]]],
) -> list[tuple[float, str]]:
    """The operator's acts enabled now, and each replica's read of the set."""
    w = WEIGHTS
    acts: list[tuple[float, str]] = []
    for name in names:
        if name in membership.generation:
            acts.append((w["force"], f"member remove {name} force"))
            if name in membership.drained:
                acts.append((w["undrain"], f"member undrain {name}"))
                acts.append((w["remove"], f"member remove {name}"))
            else:
                acts.append((w["drain"], f"member drain {name}"))
        else:
            acts.append((w["add"], f"member add {name}"))
    for replica, view in views.items():
        if view != membership.view():
            acts.append((w["sync"], f"member sync @{replica}"))
    return acts


def complete(rng: random.Random, label: str, replicas: list[str]) -> str:
    """The replica that takes an operator's call."""
    if label.startswith("member sync"):
        return label
    return f"{label} @{rng.choice(replicas)}"


def heal_action(
    membership: SimMembership,
    names: list[str],
    views: dict[str, tuple[frozenset[str], frozenset[str]]],
) -> str | None:
    """HEAL: an operator puts every runner back (undrained) and every replica reads it."""
    for name in names:
        if name not in membership.generation:
            return f"member add {name} @c1"
        if name in membership.drained:
            return f"member undrain {name} @c1"
    for replica, view in sorted(views.items()):
        if view != membership.view():
            return f"member sync @{replica}"
    return None


@dataclass
class MembershipChecker:
    """The membership rules, from the journal's set and what the coordinators did."""

    membership: SimMembership
    # (operation, attempt) -> when its attempt was written ahead (SimMembership.events).
    bound_at: dict[tuple[str, int], int] = field(default_factory=dict)
    removed_endings: int = 0
    raced_endings: int = 0

    def attempt_written(self, operation_id: str, number: int) -> None:
        self.bound_at[(operation_id, number)] = self.membership.next_event()

    def ended_removed(self, record: OperationRecord) -> str | None:
        """A violation message, or None, for a turn that ended RUNNER_REMOVED."""
        self.removed_endings += 1
        removal = self.membership.last_removal(record.runner or "")
        if removal is None:
            return f"ended RUNNER_REMOVED but {record.runner} was never removed"
        if removal.forced:
            return None
        written = self.bound_at.get((record.operation_id, record.attempt_count))
        if written is not None and written > removal.order:
            self.raced_endings += 1
            return None  # bound by a replica that had not read the drain (M3's race)
        return (
            f"ended RUNNER_REMOVED after {record.runner}'s removal without force (event "
            f"{removal.order}), although bound before it (attempt {record.attempt_count}, "
            f"event {written})"
        )
