"""The seeded schedule explorer: one seed, one schedule, every step checked.

A schedule is a list of steps, each an enabled action picked by
:mod:`tests.simulation.menu` from a seeded ``random.Random``. Every random
sub-choice is written into the step's label, so a label list replays exactly
without the generator (:meth:`Simulator.replay`, used by the shrinker and
the regression tests). Labels (``@cN``: which coordinator process; c1 when
absent):

    submit <policy> <max_attempts> <kind>   a new operation (C1)
    tick <op> <runner|-> @cN   the dispatcher picks up a due operation; the
                               runner is the route (used only while QUEUED)
    deliver m<id> [fail]       a request reaches its runner (``fail``: the
                               runner's store write fails) / a reply or watch
                               report reaches the coordinator that asked
    drop m<id>                 the network loses it (its call times out later)
    dup m<id>                  a copy is put in flight (replies and reports;
                               requests only with ``duplicate_requests``)
    launch <op>@<runner> <until>   the launch (R3); ``intent`` / ``start``:
                               the runner crashes after that step and restarts
    finish <op>@<runner> ok|failed|failed-none|failed-applied [unsaved]
                               the executor ends (R7), a failure declaring no
                               effect or one (R15: NONE may be retried)
    retry <op>@<runner> <until>   a retry's wait is over: its next execution
                               launches (R15), with launch's crash points
    lapse <op>@<runner>        its heartbeat timeout passed with no heartbeat (R12):
                               the runner records HEARTBEAT and stops it
    restart <runner> kept|wiped|restored:<k> [apart]   crash + restart (§6); ``apart``:
                               the new process runs the release before issue 27
                               (its admissions never carry the launch intent)
    drain <runner>             graceful shutdown begins (R8)
    crash @cN                  the coordinator process restarts (C12)
    resume @cN                 a frozen replica wakes up (§5)
    cancel <op> @cN            the client cancels (C11)
    watch <op>@<runner> [@cN]  the runner's watch stream reports the row (C9)
    advance <seconds>          virtual time; calls past their deadline fail

A step may end in `` !crash@<n>`` (the coordinator dies right after the n-th
commit of the step, before sending what it licensed) or, with two replicas,
`` !pause-before@<n>`` / `` !pause-after@<n>`` (the replica freezes there and
finishes the step only when resumed, possibly after losing its lease).

Not choosing a message is how it is delayed, so any reordering can happen.
After the schedule, HEAL: nothing is lost any more, every message is
delivered, jobs run to the end, the clock moves to the next deadline when
nothing else is enabled, for a bounded number of steps; then every
operation must be terminal (§8.2).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.events import CancelRequested
from coordinator_svc.core.model import ReplayPolicy, TurnKind
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.driver.runners import LIVE_WITHIN
from coordinator_svc.ports import InvalidWrite, WriteConflict
from tests.simulation import menu, reporting
from tests.simulation.invariants import Checker, Violation
from tests.simulation.sim_coordinator import (
    CoordinatorCrashed,
    CoordinatorPaused,
    Policy,
    ShellError,
    SimCoordinator,
)
from tests.simulation.sim_journal import SimJournal
from tests.simulation.sim_membership import MembershipChecker, SimMembership
from tests.simulation.sim_retention import SimRetention
from tests.simulation.sim_runner import (
    ADMISSION_WINDOW_US,
    FLOOR_INTERVAL,
    SimRunner,
    SimStore,
)
from tests.simulation.sim_scheduling import SchedulerFactory, SchedulingChecker, SimScheduling
from tests.simulation.wire import WatchReport
from tests.simulation.world import EPOCH, DispatchRequest, Ledger, Network, describe

# A policy factory gets the simulator (so a broken wrapper may cheat, as a
# buggy shell with a cached view of the runners would) and returns a policy.
PolicyFactory = Callable[["Simulator"], Policy]


@dataclass(frozen=True)
class SimConfig:
    steps: int = 60
    heal_steps: int = 4000
    max_operations: int = 4
    max_runners: int = 3
    # Two coordinator replicas sharing the journal (§5) in this share of schedules.
    max_replicas: int = 2
    replica_share: float = 0.25
    duplicate_requests: bool = False
    # Chance per step that the coordinator dies right after a commit.
    crash_after_commit: float = 0.02
    # Chance per step (two replicas only) that a replica freezes at a commit.
    pause_at_commit: float = 0.08
    # Check §8.4's proofs structurally (off: only actual double starts count).
    check_proofs: bool = True
    swarm: bool = True
    trace: bool = True
    # Apply the proposed fix for the stale status answer in the shell.
    stale_status_guard: bool = False
    # A store restored from an older copy keeps its store_id (issue 8.1: a
    # backup copied over the file on the same inode is indistinguishable), so
    # only the §6 witness stands between its silence and a replay. False
    # models a restore that copy detection caught (a new store_id).
    restore_keeps_store_id: bool = True
    # Of a durable runner's restarts (once a snapshot exists), the share that
    # restores an older snapshot (the rest: 60 % of all kept, the remainder wiped).
    restored_share: float = 0.15
    # Issue 9: the share of one-coordinator schedules in which the real
    # scheduler routes every QUEUED turn (sim_scheduling), with up to
    # ``scheduled_operations`` turns from three principals, one of them flooding.
    scheduled_share: float = 0.5
    scheduled_operations: int = 7
    # Builds the scheduler (a broken one, to show the checks' teeth).
    scheduler_factory: SchedulerFactory = Scheduler
    # Issue 10: in scheduled schedules a turn granted at once is stored with its
    # first attempt (the engine's default); False stores every turn QUEUED first.
    attempt_with_acceptance: bool = True
    # Issue 12, §9: runners prune before every call by these rules (None: never).
    retention: SimRetention | None = None
    # §11: the share of schedules in which an operator drains, removes (with or
    # without force) and adds back runners while turns run (sim_membership).
    membership_share: float = 0.3
    # False breaks M3 (teeth): a removal without force ignores the bound turns.
    removal_checks_turns: bool = True
    # R12, R14: every third turn names an executor r2 does not serve, every even
    # one has a heartbeat timeout (world.turn_executor); False: none do, and the
    # schedules are the ones a seed gave before these rules.
    executor_rules: bool = True
    # Issue 27: the share of runner processes (first starts and restarts) on the
    # release before it, whose admissions never carry the launch intent (R3 in
    # two writes, sim_runner.py): 0 is every runner on this release, 1 every
    # runner on the one before (the "before" of a measurement).
    intent_apart_share: float = 0.25
    # §6.1 W2a: the runners' admission window (µs) and how often their floor keeper
    # raises the floor (seconds; 0: before every call). The shipped defaults; a
    # schedule kept from before W2a replays with PRE_W2A_WINDOW.
    admission_window_us: int = ADMISSION_WINDOW_US
    floor_interval: float = FLOOR_INTERVAL
    # C2a: a first attempt skips its preflight only if the runner was heard from
    # within this long (seconds; driver.runners.LIVE_WITHIN, the shipped default).
    live_within: float = LIVE_WITHIN


# Issue 27 changed what a schedule meets: a Dispatch delivered later than the
# runners' 0.25 s window is refused stale (W2a; before, a 7 s window, the floor
# raised before every call), and a first attempt asks first unless its runner
# was heard from within 0.5 s (C2a; before, whenever its identity was known, so
# the calls, and the message ids a kept schedule names, differ). A schedule kept
# from before replays with this, and meets what it was kept for.
BEFORE_ISSUE_27: dict[str, Any] = {
    "admission_window_us": 7_000_000,
    "floor_interval": 0.0,
    "live_within": 1e9,
}


@dataclass(frozen=True)
class RunnerSpec:
    name: str
    durable: bool
    slots: int
    # Its first process runs the release before issue 27 (SimConfig.intent_apart_share).
    intent_apart: bool = False


@dataclass(frozen=True)
class Setup:
    """The world a schedule starts from (drawn from the seed, or given)."""

    runners: tuple[RunnerSpec, ...]
    operations: int
    replicas: int = 1
    # Clock skew of replica c2 against c1, in seconds (leases are timed, §5).
    skew: float = 0.0
    # The real scheduler routes QUEUED turns (one coordinator only; issue 9).
    scheduled: bool = False
    # §11: the runner set changes under load (sim_membership).
    membership: bool = False


@dataclass
class RunResult:
    seed: int
    setup: Setup
    steps: int
    heal_steps: int
    violation: str | None
    coverage: Counter[str]
    labels: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"seed {self.seed}: {self.violation or 'ok'}", f"setup: {self.setup}"]
        if self.violation:
            lines += ["--- trace ---", *self.trace, "--- history ---", *self.history]
        return "\n".join(lines)


class Simulator:
    def __init__(
        self,
        seed: int,
        config: SimConfig | None = None,
        policy: PolicyFactory | None = None,
        setup: Setup | None = None,
    ) -> None:
        self.seed = seed
        self.config = config = config or SimConfig()
        self.rng = random.Random(seed)
        # The heal phase draws from its own generator, so a replayed schedule
        # heals exactly as the generated one did.
        self.heal_rng = random.Random(0)
        # Which release a restarted runner runs (issue 27), drawn apart from the
        # schedule's own choices so that they stay as they were.
        self.side_rng = random.Random(seed * 7331 + 13)
        self.network = Network()
        self.ledger = Ledger()
        self.runners: dict[str, SimRunner] = {}
        self.coverage: Counter[str] = Counter()
        self.trace: list[str] = []
        self.labels: list[str] = []
        self.snapshots: dict[str, list[SimStore]] = {}
        self._ids = 0
        self.journal = SimJournal()
        self.checker = Checker(
            journal=self.journal,
            ledger=self.ledger,
            runners=self.runners,
            check_proofs=config.check_proofs,
        )
        self.setup = setup or menu.draw_setup(self.rng, self.seed, config)
        self.coordinators = {
            f"c{n}": SimCoordinator(
                self.network,
                self.checker,
                journal=self.journal,
                name=f"c{n}",
                replica_name=f"c{n}" if self.setup.replicas > 1 else "",
                stale_status_guard=config.stale_status_guard,
                attempt_with_acceptance=config.attempt_with_acceptance,
                executor_rules=config.executor_rules,
                live_within=config.live_within,
            )
            for n in range(1, self.setup.replicas + 1)
        }
        if policy is not None:
            made = policy(self)
            for coordinator in self.coordinators.values():
                coordinator.policy = made
        if self.setup.scheduled and self.setup.replicas == 1:
            sizes = {spec.name: spec.slots for spec in self.setup.runners}
            self.coordinator.scheduling = SimScheduling(sizes, config.scheduler_factory)
            self.checker.scheduling = SchedulingChecker(sizes)
        for spec in self.setup.runners:
            runner = SimRunner(
                spec.name,
                spec.durable,
                spec.slots,
                self.ledger,
                self._new_id("inc"),
                self._new_store(spec.durable),
                retention=config.retention,
                intent_apart=spec.intent_apart,
                admission_window_us=config.admission_window_us,
                floor_interval=config.floor_interval,
            )
            runner.store.open(runner.incarnation_id)
            self.runners[spec.name] = runner
        self.membership: SimMembership | None = None
        if self.setup.membership:
            self.membership = SimMembership.of([spec.name for spec in self.setup.runners])
            self.membership.checks_turns = config.removal_checks_turns
            self.checker.membership = MembershipChecker(self.membership)
            for coordinator in self.coordinators.values():
                coordinator.membership = self.membership
                coordinator.follow(self.membership.view())
        self.weights = menu.draw_weights(self.rng, config.swarm)
        self.now = 0.0
        self._advance(0.0)

    @property
    def coordinator(self) -> SimCoordinator:
        return self.coordinators["c1"]

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    def _new_store(self, durable: bool) -> SimStore:
        store = SimStore(self._new_id("store"), durable)
        if durable:
            self.checker.durable_stores.add(store.store_id)
        return store

    # --- running ---------------------------------------------------------------------

    def run(self) -> RunResult:
        """Generate and run a schedule from the seed, then heal."""
        return self._guarded(self._generated)

    def replay(self, labels: list[str]) -> RunResult:
        """Run exactly these steps (skipping any no longer enabled), then heal."""
        return self._guarded(lambda: self._scripted(labels))

    def _generated(self) -> tuple[int, int]:
        step = 0
        for step in range(1, self.config.steps + 1):
            self._step(step, menu.choose(self), healing=False)
        return step, self._heal()

    def _scripted(self, labels: list[str]) -> tuple[int, int]:
        done = 0
        for label in labels:
            if menu.enabled(self, label.split(" !")[0]):
                done += 1
                self._step(done, label, healing=False)
        return done, self._heal()

    def _guarded(self, body: Callable[[], tuple[int, int]]) -> RunResult:
        steps = heal = 0
        violation = None
        try:
            steps, heal = body()
        except Violation as found:
            violation = str(found)
        except (ShellError, IllegalTransition, InvalidWrite, WriteConflict) as broken:
            violation = f"[shell] ?: {type(broken).__name__}: {broken}"
        if violation:
            self.coverage["violations"] += 1
        reporting.count_coverage(self)
        history = reporting.history(self, reporting.operation_of(violation)) if violation else []
        return RunResult(
            self.seed,
            self.setup,
            steps or len(self.labels),
            heal,
            violation,
            self.coverage,
            self.labels,
            self.trace,
            history,
        )

    def _step(self, number: int, label: str, *, healing: bool) -> None:
        for coordinator in self.coordinators.values():
            coordinator.log = []
        if not healing:
            self.labels.append(label)
        base, _, modifier = label.partition(" !")
        self._arm(modifier)
        result = "(stopped by a violation)"
        try:
            try:
                result = self.execute(base) or ""
            except CoordinatorPaused as paused:
                self.coverage["replica_paused_at_commit"] += 1
                result = str(paused)
            except CoordinatorCrashed as crashed:
                self.coverage["coordinator_crash_after_commit"] += 1
                result = f"{crashed}; " + self._crash(crashed.name)
        finally:
            self._arm("")
            if self.config.trace:
                phase = "heal" if healing else "step"
                self.trace.append(f"{phase} {number} t={self.now:.2f} {label}: {result}")
                for coordinator in self.coordinators.values():
                    self.trace.extend(coordinator.log)
        self.checker.after_step()

    def _arm(self, modifier: str) -> None:
        """Install this step's crash/pause point (the n-th commit of the step)."""
        kind, _, n = modifier.partition("@")
        counter = [0]

        def reached() -> bool:
            counter[0] += 1
            return counter[0] == int(n)

        for coordinator in self.coordinators.values():
            coordinator.crash_after_commit = reached if kind == "crash" else None
            multi = len(self.coordinators) > 1
            if kind.startswith("pause-") and multi:
                where = kind.removeprefix("pause-")
                coordinator.pause_at_commit = lambda where=where: where if reached() else ""
            else:
                coordinator.pause_at_commit = None

    def _heal(self) -> int:
        for number in range(1, self.config.heal_steps + 1):
            if self._settled():
                self.checker.healed()
                return number
            label = menu.heal_action(self)
            if label is None:
                label = f"advance {self._next_wakeup() - self.now:.3f}"
            self._step(number, label, healing=True)
        self.checker.healed()
        return self.config.heal_steps

    def _settled(self) -> bool:
        ops = self.journal.operations.values()
        return (
            len(ops) >= self.setup.operations
            and all(r.state.terminal for r in ops)
            and not self.network.in_flight
            and not any(r.jobs for r in self.runners.values())
            and not any(c.paused for c in self.coordinators.values())
        )

    def _next_wakeup(self) -> float:
        """The next moment anything is due (a call deadline, a timer, a backoff, a lease),
        in global time (each replica's clock may be skewed)."""
        offsets = {c.name: c.now - self.now for c in self.coordinators.values()}
        times: list[float] = []
        for coordinator in self.coordinators.values():
            offset = offsets[coordinator.name]
            times += [c.deadline - offset for c in coordinator.calls.values()]
            times += [(t - EPOCH).total_seconds() - offset for t in coordinator.agenda.pending()]
        for record in self.journal.operations.values():
            for moment in (record.next_action_at, record.lease_expires_at):
                if moment is not None:
                    local = (moment - EPOCH).total_seconds()
                    times += [local - offset for offset in offsets.values()]
        future = [t for t in times if t > self.now]
        return min(future) + 0.001 if future else self.now + 5.0

    # --- performing a step --------------------------------------------------------------

    @staticmethod
    def _split(label: str) -> tuple[list[str], str]:
        return menu.split(label)

    def execute(self, label: str) -> str:
        words, replica = self._split(label)
        kind = words[0]
        coordinator = self.coordinators[replica]
        if kind == "submit":
            principal = words[4] if len(words) > 4 else "sim"
            return self._submit(
                ReplayPolicy(words[1]), int(words[2]), TurnKind(words[3]), principal
            )
        if kind == "tick":
            state = self.journal.operations[words[1]].state
            coordinator.tick(words[1], None if words[2] == "-" else words[2])
            return str(state)
        if kind == "deliver":
            return self._deliver(int(words[1][1:]), write_fails=len(words) > 2)
        if kind == "drop":
            self.coverage["dropped"] += 1
            return describe(self.network.take(int(words[1][1:])).body)
        if kind == "dup":
            self.coverage["duplicated"] += 1
            return f"copy m{self.network.duplicate(int(words[1][1:])).id}"
        if kind in ("launch", "finish", "watch", "lapse", "retry"):
            return self._runner_step(kind, words, replica)
        if kind == "restart":
            apart = words[3:] == ["apart"]
            return self._restart(self.runners[words[1]], words[2], intent_apart=apart)
        if kind == "drain":
            self.runners[words[1]].drain(self.now)
            self.coverage["runner_drain"] += 1
            return f"{words[1]} draining"
        if kind == "crash":
            return self._crash(replica)
        if kind == "resume":
            self.coverage["replica_resumed"] += 1
            coordinator.resume()
            return f"{replica} resumed"
        if kind == "cancel":
            coordinator.handle(words[1], CancelRequested())
            self.coverage["cancel_requested"] += 1
            return str(self.journal.operations[words[1]].state)
        if kind == "advance":
            return self._advance(float(words[1]))
        if kind == "member":
            return self._member(words, coordinator)
        raise ValueError(f"unknown step {label!r}")

    def _runner_step(self, kind: str, words: list[str], replica: str) -> str:
        op, _, name = words[1].partition("@")
        runner = self.runners[name]
        if kind in ("launch", "retry"):
            result = (
                runner.launch(op, self.now, until=words[2])
                if kind == "launch"
                else runner.retry(op, self.now, until=words[2])
            )
            if words[2] in ("intent", "start") and result.startswith(("launch", "executor st")):
                where = words[2] if kind == "launch" else f"retry_{words[2]}"
                self.coverage[f"crash_after_{where}"] += 1
                # The same release again: a crash point is no upgrade.
                how = "kept" if runner.durable else "wiped"
                result += "; " + self._restart(runner, how, intent_apart=runner.intent_apart)
            return result
        if kind == "finish":
            effect = {"failed-none": "NONE", "failed-applied": "APPLIED"}.get(words[2], "")
            self.coverage[f"finish:{words[2]}"] += 1
            return runner.finish(op, words[2] == "ok", self.now, "unsaved" in words, effect)
        if kind == "lapse":
            self.coverage["heartbeat_lapsed"] += 1
            return runner.lapse(op, self.now)
        row = runner.view(runner.store.rows[op])
        report = WatchReport(runner.name, runner.incarnation_id, row)
        epoch = self.coordinators[replica].epoch
        self.network.send(None, 0, epoch, report, runner.incarnation_id, replica)
        return describe(row)

    def _submit(
        self, policy: ReplayPolicy, max_attempts: int, kind: TurnKind, principal: str
    ) -> str:
        op = self._new_id("op")
        self.checker.policies[op] = (policy, max_attempts)
        self.coordinator.submit(op, policy, max_attempts, kind, principal)
        self.coverage[f"policy:{policy.value}"] += 1
        return op

    def _deliver(self, message_id: int, *, write_fails: bool) -> str:
        message = self.network.take(message_id)
        if not message.is_request:
            coordinator = self.coordinators[message.replica or "c1"]
            return f"{describe(message.body)} -> {coordinator.name}: {coordinator.receive(message)}"
        runner = self.runners[message.to_runner or ""]
        # The tokens the runner still knows (§8.7): retention runs first, as the real
        # runner's timer may have just before this call, since a key K4 forgot takes
        # its highest token with it (PROTOCOL.md K4).
        runner.keep_time(self.now)
        before = self.checker.fencing_before(runner, message.body)
        reply = runner.handle(message.body, self.now, write_fails)
        self.checker.runner_replied(runner, message.body, before, reply)
        if isinstance(message.body, DispatchRequest):
            self.checker.dispatch_delivered(runner.name, message.body, reply)
        self.network.send(
            None, message.call_id, message.epoch, reply, runner.incarnation_id, message.replica
        )
        return f"{describe(message.body)} -> {runner.name}/{runner.incarnation_id}: " + (
            describe(reply)
        )

    def _restart(self, runner: SimRunner, how: str, *, intent_apart: bool = False) -> str:
        """Crash and restart: the store is kept, wiped, or restored from an
        older copy under a new store_id (§6: a copy never passes for the original);
        ``intent_apart``: the new process runs the release before issue 27."""
        snapshots = self.snapshots.setdefault(runner.name, [])
        store: SimStore | None = None
        if how.startswith("restored:"):
            # A backup put back over the store: rows, floor and chain as they
            # were, under the same store_id (nothing in a copy tells it apart)
            # unless the config models copy detection.
            store = snapshots[int(how[9:])].snapshot()
            if not self.config.restore_keeps_store_id:
                store.store_id = self._new_store(True).store_id
        elif how == "wiped" or not runner.durable:
            store = self._new_store(runner.durable)
        if runner.durable:
            snapshots.append(runner.store.snapshot())
        runner.restart(self._new_id("inc"), store, intent_apart=intent_apart)
        self.coverage[f"runner_restart_{how.split(':')[0]}"] += 1
        release = " (intent apart)" if intent_apart else ""
        return (
            f"{runner.name} restarted as {runner.incarnation_id}{release}, "
            f"store {runner.store.store_id}"
        )

    def _crash(self, name: str) -> str:
        coordinator = self.coordinators[name]
        self._arm("")
        coordinator.restart()
        if self.checker.scheduling is not None:
            self.checker.scheduling.restarted()
        self.coverage["coordinator_restart"] += 1
        return f"{name} restarted, epoch {coordinator.epoch}"

    def _member(self, words: list[str], coordinator: SimCoordinator) -> str:
        """An operator's act on the runner set, applied at once by the replica that
        took it (M5); or a replica's read of the set."""
        membership = self.membership
        assert membership is not None, "member steps need a membership schedule"
        verb = words[1]
        if verb == "sync":
            coordinator.follow(membership.view())
            return f"{coordinator.name} read the set"
        name = words[2]
        if verb == "drain":
            result = membership.drain(name)
        elif verb == "undrain":
            result = membership.undrain(name)
        elif verb == "remove":
            result = membership.remove(name, force="force" in words, journal=self.journal)
        else:
            result = membership.add(name)
        outcome = "refused" if result.startswith(("refused", "RUNNER_", "replay")) else "done"
        self.coverage[f"member_{verb}{'_force' if 'force' in words else ''}:{outcome}"] += 1
        coordinator.follow(membership.view())
        return result

    def _advance(self, seconds: float) -> str:
        self.now += max(seconds, 0.0)
        for coordinator in self.coordinators.values():
            coordinator.now = self.now + (self.setup.skew if coordinator.name == "c2" else 0.0)
        for coordinator in self.coordinators.values():
            coordinator.renew()  # O2: a running replica's keeper renews as time passes
        for coordinator in self.coordinators.values():
            if not coordinator.paused:
                coordinator.expire_calls()
        return f"now {self.now:.3f}"


def run_seed(
    seed: int, config: SimConfig | None = None, policy: PolicyFactory | None = None
) -> RunResult:
    """Run one generated schedule; the result carries any violation with its trace."""
    return Simulator(seed, config, policy).run()


def replay(
    setup: Setup,
    labels: list[str],
    config: SimConfig | None = None,
    policy: PolicyFactory | None = None,
) -> RunResult:
    """Run a scripted schedule (labels from a RunResult) in a fresh world."""
    return Simulator(0, config, policy, setup).replay(labels)
