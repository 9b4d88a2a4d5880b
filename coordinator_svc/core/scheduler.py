"""Which waiting turn gets which free slot (issue 9): the scheduler, pure.

The shell tells it what happened (a runner's pool sizes, a turn bound to a
runner or let go, a turn ready to be routed) and asks it for grants: pairs
(turn, runner) it should route now. No clock, no I/O, no asyncio: the shell
performs each grant as a routed Tick through the core (``decide_tick``).

Slots. Each runner reports the size of its slot pools (GetRunnerInfo); the
scheduler counts the turns bound to each runner per kind (bound, or granted
and being preflighted). A runner whose sizes are not known yet gets
``UNKNOWN_SIZE_ALLOWANCE`` turns per kind, so a coordinator that starts before
its runners does not flood them; anything it gets wrong is a NO_FREE_SLOT
refusal, which C6a makes harmless.

Two counts of use. The coordinator's own (bound, not yet terminal in the
journal) misses what it cannot see: turns another coordinator replica
dispatched there, a turn still running after this coordinator gave up on it.
The runner's own (``in_use`` on every WatchOperations message, ``reported``)
misses what it has not been sent yet: turns granted here and still being
preflighted or dispatched. Each view can only undercount what the other
knows, so a slot is counted in use when either says so: in use is the larger
of the two, ``max(own, reported)``. Taking the larger never overstates use
beyond what one of them really saw, so it never refuses a slot that both
know to be free; its cost is a moment of idle slot (a report older than a
settlement still counts it until the next report, at most the runner's
heartbeat later). The report is a snapshot: one older than a grant may still
show that slot free, which is fine because the coordinator's own count covers
its grants. It is not a lock either: an undercount both views share (this
replica's fresh grants while another replica's turns also hold slots) can
still over-grant between two reports, and the runner's NO_FREE_SLOT refusal
(C6a) covers that rarer case.

Order. Turns wait per slot class (pool, kind, executor): one runner serves
one pool, and its slots are per kind, so classes of different pools or kinds
never compete for a slot. Within a class, principals share fairly
(``core.fair_queue``). Classes that differ only in executor may compete for
the slots of a runner serving both (C6b): ``grants`` lets them take the free
slots in turn, one grant each per round, so a backlog for one executor never
starves another. A turn bound to a runner (an earlier attempt unresolved, C6)
never waits here: it waits for *that* runner, in DISPATCH_UNKNOWN.

Executors (C6b). Each runner says in GetRunnerInfo which executors it serves
(``learned_executors``); a turn is granted only a runner that serves its
executor (``core.routing.offers``: one that has not said is taken to serve
``default`` only). A turn whose executor no member serves waits here, and
``wait_reason`` says which runner serves what.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.fair_queue import FairQueue
from coordinator_svc.core.model import OperationRecord, OpState, TurnKind
from coordinator_svc.core.routing import DEFAULT_EXECUTOR, offers, route, serves

# Turns per kind sent to a runner before its pool sizes are known.
UNKNOWN_SIZE_ALLOWANCE = 4

# (pool, kind, executor): turns that any one runner could take alike.
SlotClass = tuple[str, TurnKind, str]


@dataclass(frozen=True)
class Grant:
    """Route ``operation_id`` to ``runner`` now; its slot is already reserved."""

    operation_id: str
    runner: str


class Scheduler:
    def __init__(
        self,
        runners: Sequence[RunnerEndpoint],
        weight_of: Callable[[str], float] = lambda principal: 1.0,
    ) -> None:
        self._runners = tuple(runners)
        self._weight_of = weight_of
        self._sizes: dict[str, dict[TurnKind, int]] = {}
        # What each runner said it serves (C6b); absent: not said yet.
        self._executors: dict[str, frozenset[str]] = {}
        self._bound: dict[str, tuple[str, TurnKind]] = {}
        self._in_use: collections.Counter[tuple[str, TurnKind]] = collections.Counter()
        self._reported: dict[str, dict[TurnKind, int]] = {}
        self._queues: dict[SlotClass, FairQueue] = {}
        self._class_of: dict[str, SlotClass] = {}
        self._unreachable: frozenset[str] = frozenset()
        # Drained by an operator (PROTOCOL §10 V8): no grants until undrained.
        self._drained: frozenset[str] = frozenset()

    # --- who the runners are (§11 M5) ---

    def set_runners(self, runners: Sequence[RunnerEndpoint]) -> None:
        """The members now: grants go only to these."""
        self._runners = tuple(runners)

    def forget(self, runner: str) -> None:
        """``runner`` left the set: its sizes and its own report go (a member added
        again under the name starts unknown, like any new one). Turns still bound
        to it keep their slots counted until they end (M6)."""
        self._sizes.pop(runner, None)
        self._reported.pop(runner, None)
        self._executors.pop(runner, None)

    @property
    def runners(self) -> tuple[RunnerEndpoint, ...]:
        return self._runners

    # --- what the runners have ---

    def learned(self, runner: str, sizes: Mapping[TurnKind, int]) -> None:
        """The runner's pool sizes (GetRunnerInfo)."""
        self._sizes[runner] = dict(sizes)

    def learned_executors(self, runner: str, executors: Collection[str]) -> None:
        """The executors the runner serves, by name (GetRunnerInfo, C6b)."""
        self._executors[runner] = frozenset(executors)

    def executors_of(self, runner: str) -> frozenset[str] | None:
        """What the runner said it serves; None if it has not said yet."""
        return self._executors.get(runner)

    @property
    def executors(self) -> dict[str, frozenset[str]]:
        """Every runner's executors as it said them (absent: not said yet)."""
        return dict(self._executors)

    def size(self, runner: str, kind: TurnKind) -> int:
        sizes = self._sizes.get(runner)
        return UNKNOWN_SIZE_ALLOWANCE if sizes is None else sizes.get(kind, 0)

    def known(self, runner: str) -> bool:
        return runner in self._sizes

    def reported(self, runner: str, in_use: Mapping[TurnKind, int]) -> None:
        """The runner's own count of slots in use (its watch stream), a snapshot."""
        self._reported[runner] = dict(in_use)

    def heard_from(self, runner: str) -> bool:
        """The runner has reported its own use (its watch stream has opened)."""
        return runner in self._reported

    def free(self, runner: str, kind: TurnKind) -> int:
        return max(0, self.size(runner, kind) - self.in_use(runner, kind))

    def in_use(self, runner: str, kind: TurnKind) -> int:
        """Slots in use as far as anyone knows: the larger of the two counts."""
        reported = self._reported.get(runner, {}).get(kind, 0)
        return max(self._in_use[(runner, kind)], reported)

    def avoid(self, unreachable: Collection[str], drained: Collection[str] = ()) -> None:
        """Runners that stopped answering get no grants until they answer again
        (their turns wait, saying so, instead of preflighting into silence);
        drained ones (§10 V8) none until an operator undrains them."""
        self._unreachable = frozenset(unreachable) | frozenset(drained)
        self._drained = frozenset(drained)

    # --- the ledger ---

    def bind(self, operation_id: str, runner: str, kind: TurnKind) -> None:
        """The turn holds a slot on ``runner`` (bound, or granted and routing)."""
        self.unbind(operation_id)
        self.drop(operation_id)
        self._bound[operation_id] = (runner, kind)
        self._in_use[(runner, kind)] += 1

    def follow(self, record: OperationRecord, *, routing: bool) -> bool:
        """Keep the ledger in step with the operation as the journal now has it
        (after a commit, or when a grant ends): a bound state holds a slot on its
        runner; a terminal one holds none and waits no more; a QUEUED one holds
        none unless ``routing`` (a grant's preflight is still out: the grant's
        end decides). True if that freed a slot (grant again)."""
        op_id = record.operation_id
        if record.state.terminal:
            self.drop(op_id)
            return self.unbind(op_id)
        if record.state is OpState.QUEUED or record.runner is None:
            return False if routing else self.unbind(op_id)
        self.bind(op_id, record.runner, record.kind)
        return False

    def unbind(self, operation_id: str) -> bool:
        """Forget the turn's slot; True if that freed a counted slot."""
        bound = self._bound.pop(operation_id, None)
        if bound is None:
            return False
        self._in_use[bound] -= 1
        if self._in_use[bound] <= 0:
            del self._in_use[bound]
        return True

    def bound_to(self, operation_id: str) -> str | None:
        bound = self._bound.get(operation_id)
        return bound[0] if bound is not None else None

    def load(self) -> collections.Counter[str]:
        """Slots held per runner (the router's tie-breaker)."""
        load: collections.Counter[str] = collections.Counter()
        counted = set(self._in_use)
        counted.update((runner, kind) for runner, use in self._reported.items() for kind in use)
        for runner, kind in counted:
            load[runner] += self.in_use(runner, kind)
        return +load  # runners with nothing in use are left out

    # --- the waiting turns ---

    def hold(
        self,
        operation_id: str,
        principal: str,
        pool: str,
        kind: TurnKind,
        executor: str = DEFAULT_EXECUTOR,
    ) -> None:
        """A QUEUED turn is ready to be routed: it waits for a grant (keeps its place
        if it already waits). A turn holding a slot (granted, being routed) is not
        queued again: one grant at a time per turn. ``executor``: the one it names
        (C6b; empty Turn.executor is ``default``)."""
        if operation_id in self._class_of or operation_id in self._bound:
            return
        slot_class = (pool, kind, executor)
        queue = self._queues.setdefault(slot_class, FairQueue())
        queue.push(operation_id, principal, self._weight_of(principal))
        self._class_of[operation_id] = slot_class

    def drop(self, operation_id: str) -> bool:
        """The turn no longer waits here (cancelled, timed out, bound)."""
        slot_class = self._class_of.pop(operation_id, None)
        if slot_class is None:
            return False
        return self._queues[slot_class].remove(operation_id)

    def holding(self, operation_id: str) -> bool:
        return operation_id in self._class_of

    def waiting(self) -> int:
        return len(self._class_of)

    def waiting_of(self, principal: str) -> int:
        return sum(q.waiting_of(principal) for q in self._queues.values())

    def waiting_principals(
        self, pool: str, kind: TurnKind, executor: str = DEFAULT_EXECUTOR
    ) -> set[str]:
        queue = self._queues.get((pool, kind, executor))
        return queue.principals() if queue is not None else set()

    def grants(self) -> list[Grant]:
        """Every (waiting turn, runner) pair that fits now, fairest first within a
        class, the classes taking one grant each in turn (C6b: executors sharing a
        runner share its slots); each grant's slot is reserved (``bind``) before
        it is returned."""
        granted: list[Grant] = []
        active = [slot_class for slot_class, queue in self._queues.items() if len(queue)]
        while active:
            still: list[SlotClass] = []
            for slot_class in active:
                queue = self._queues[slot_class]
                runner = self._route(*slot_class)
                if runner is None:
                    continue
                operation_id = queue.pop()
                if operation_id is None:  # pragma: no cover - active: one waits
                    continue
                del self._class_of[operation_id]
                self.bind(operation_id, runner, slot_class[1])
                granted.append(Grant(operation_id, runner))
                if len(queue):
                    still.append(slot_class)
            active = still
        return granted

    def grant_at_once(
        self,
        operation_id: str,
        principal: str,
        pool: str,
        kind: TurnKind,
        executor: str = DEFAULT_EXECUTOR,
    ) -> str | None:
        """A turn not yet stored (issue 10: its acceptance may carry its first
        attempt): the runner it gets if held now it would be granted at once,
        its slot reserved as by ``grants``; None, with nothing changed, if it
        would wait (a turn of its class waits already, or no runner is free).
        It goes through the fair queue like any grant, so its principal's
        share is counted exactly as if it had been held and granted. Only to a
        runner serving ``executor`` (C6b)."""
        slot_class = (pool, kind, executor)
        queue = self._queues.get(slot_class)
        if queue is not None and len(queue):
            return None  # the ones waiting go first
        if operation_id in self._class_of or operation_id in self._bound:
            return None
        runner = self._route(pool, kind, executor)
        if runner is None:
            return None
        self.hold(operation_id, principal, pool, kind, executor)
        popped = self._queues[slot_class].pop()
        assert popped == operation_id, "the class queue was empty before this turn"
        del self._class_of[operation_id]
        self.bind(operation_id, runner, kind)
        return runner

    def _route(self, pool: str, kind: TurnKind, executor: str) -> str | None:
        load = self.load()
        free: dict[str, int | None] = {
            r.name: 0 if r.name in self._unreachable else self.free(r.name, kind)
            for r in self._runners
        }
        chosen = route(pool, kind, self._runners, load, free, executor, self._executors)
        return chosen.name if chosen is not None else None

    # --- why a turn waits (shown to the caller, §8.2) ---

    def wait_reason(self, operation_id: str) -> str | None:
        """Why a held turn waits, in words; None if it does not wait here."""
        slot_class = self._class_of.get(operation_id)
        if slot_class is None:
            return None
        pool, kind, executor = slot_class
        queue = self._queues[slot_class]
        of_pool = [r.name for r in self._runners if serves(r, pool, kind)]
        serving = [r for r in of_pool if offers(self._executors.get(r), executor)]
        if of_pool and not serving:
            return self._executor_wait(pool, executor, of_pool)
        used = sum(self.in_use(r, kind) for r in serving)
        total = sum(self.size(r, kind) for r in serving)
        ahead = queue.ahead_of(operation_id) or 0
        drained = sorted(r for r in serving if r in self._drained)
        return (
            f"waiting for a free {kind.value} slot in pool {pool}: {used} of {total} in use "
            f"on {len(serving)} runner(s); {ahead} waiting turn(s) go first"
        ) + (f"; drained by an operator: {', '.join(drained)}" if drained else "")

    def _executor_wait(self, pool: str, executor: str, of_pool: list[str]) -> str:
        """C6b: no runner of the pool serves the turn's executor (as far as they
        have said): say what each one serves, or that it has not said yet."""
        said = []
        for runner in of_pool:
            names = self._executors.get(runner)
            if names is None:
                said.append(f"{runner} has not said which executors it serves (no GetRunnerInfo)")
            else:
                said.append(f"{runner} serves {', '.join(sorted(names)) or 'none'}")
        return (
            f"waiting for a runner that serves executor {executor!r} in pool {pool}: "
            + "; ".join(said)
        )
