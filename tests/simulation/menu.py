"""The schedule generator: which actions are enabled, how likely each is, and
the random sub-choices written into the label of the one picked.

Every random choice of a schedule is made here, from the simulator's seeded
generator, and ends up in a label; :mod:`tests.simulation.simulator` only
performs labels. Weights are scaled per schedule ("swarm testing": each
schedule draws its own profile, so some schedules are all drops, others all
restarts), but every enabled action keeps a non-zero chance at every step.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING

from coordinator_svc.core.model import OpState, ReplayPolicy, TurnKind
from coordinator_svc.core.ownership import Role, role
from tests.simulation import sim_membership
from tests.simulation.world import at

if TYPE_CHECKING:
    from tests.simulation.simulator import Setup, SimConfig, Simulator

Action = tuple[float, str]
CLOCK_STEPS = (0.05, 0.5, 1.0, 2.5, 6.0, 12.0, 35.0)
LAUNCH_VARIANTS = (("confirm", 0.8), ("intent", 0.07), ("start", 0.07), ("refused", 0.06))
BASE_WEIGHTS = {
    "submit": 3.0,
    "tick": 4.0,
    "deliver": 4.0,
    "drop": 0.5,
    "dup": 0.25,
    "launch": 3.0,
    "finish": 2.0,
    "restart": 0.12,
    "drain": 0.02,
    "crash": 0.08,
    "cancel": 0.2,
    "watch": 0.2,
    "advance": 1.2,
    "resume": 0.15,
}
# Progress actions are never switched off; fault actions may be, or boosted.
PROGRESS = frozenset({"submit", "tick", "deliver", "launch", "finish", "advance", "resume"})
PROGRESS_FACTORS = (0.5, 1.0, 1.0, 2.0, 4.0)
FAULT_FACTORS = (0.0, 0.25, 1.0, 1.0, 4.0, 8.0)


def draw_weights(rng: random.Random, swarm: bool) -> dict[str, float]:
    """This schedule's weights: the base mix, or a swarm profile drawn from it."""
    if not swarm:
        return dict(BASE_WEIGHTS)
    return {
        kind: weight * rng.choice(PROGRESS_FACTORS if kind in PROGRESS else FAULT_FACTORS)
        for kind, weight in BASE_WEIGHTS.items()
    }


def weighted(rng: random.Random, options: tuple[tuple[str, float], ...]) -> str:
    roll = rng.random()
    for name, weight in options:
        roll -= weight
        if roll < 0:
            return name
    return options[-1][0]


def actions(sim: Simulator) -> list[Action]:
    """Every action enabled now, with its weight (labels not yet completed)."""
    w = sim.weights
    acts: list[Action] = []
    journal = sim.journal
    if len(journal.operations) < sim.setup.operations:
        acts.append((w["submit"], "submit"))
    for name, coordinator in sim.coordinators.items():
        if coordinator.paused:
            acts.append((w["resume"], f"resume @{name}"))
            continue
        for op in coordinator.due(include_busy=True):
            weight = w["tick"] * (0.1 if coordinator.busy(op) else 1.0)
            acts.append((weight, f"tick {op} @{name}"))
        acts.append((w["crash"], f"crash @{name}"))
        for op, record in journal.operations.items():
            weight = w["cancel"] * (0.15 if record.state.terminal else 1.0)
            acts.append((weight / len(sim.coordinators), f"cancel {op} @{name}"))
    for mid, message in sim.network.in_flight.items():
        if message.replica and sim.coordinators[message.replica].paused:
            continue  # a frozen replica reads nothing
        acts.append((w["deliver"], f"deliver m{mid}"))
        acts.append((w["drop"], f"drop m{mid}"))
        if not message.is_request or sim.config.duplicate_requests:
            acts.append((w["dup"], f"dup m{mid}"))
    for name, runner in sim.runners.items():
        # A draining runner is often killed before its drain ends (an
        # impatient operator, a deploy tool's SIGKILL): the §6 re-admission of
        # rows its shutdown stopped before launch needs that schedule.
        crashy = 1.0 if runner.accepting else 4.0
        acts.append((w["restart"] * crashy, f"restart {name}"))
        if runner.accepting:
            acts.append((w["drain"], f"drain {name}"))
        for op, job in runner.jobs.items():
            if job.phase == "admitted":
                acts.append((w["launch"], f"launch {op}@{name}"))
            elif job.phase == "running":
                acts.append((w["finish"], f"finish {op}@{name}"))
                if job.alarm is not None and sim.now >= job.alarm:
                    # R12: an executor silent past its heartbeat timeout (no weight
                    # of its own: a new one would change every schedule's draws).
                    acts.append((w["finish"] * 0.5, f"lapse {op}@{name}"))
            if job.retry_alarm is not None and sim.now >= job.retry_alarm:
                # R15: a retry timer is due (armed in "backoff"; a broken machine
                # may arm one in any phase, and the checker must see what follows).
                acts.append((w["launch"], f"retry {op}@{name}"))
        acts += [(w["watch"], f"watch {op}@{name}") for op in runner.store.rows]
    acts.append((w["advance"], "advance"))
    if sim.membership is not None:
        acts += sim_membership.actions(sim.membership, sorted(sim.runners), _views(sim))
    return acts


def _views(sim: Simulator) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    return {name: (c.members or frozenset(), c.drained) for name, c in sim.coordinators.items()}


def _routes(sim: Simulator, replica: str) -> list[str]:
    """Where a QUEUED turn may be routed: every runner, or in a membership schedule
    the members this replica knows of that are not drained (as its scheduler)."""
    coordinator = sim.coordinators[replica]
    if coordinator.members is None:
        return sorted(sim.runners)
    return sorted(coordinator.members - coordinator.drained)


def choose(sim: Simulator) -> str:
    """Pick one enabled action and complete its label with its random sub-choices."""
    rng = sim.rng
    options = actions(sim)
    roll = rng.random() * sum(weight for weight, _ in options)
    label = options[-1][1]
    for weight, candidate in options:
        roll -= weight
        if roll < 0:
            label = candidate
            break
    label = complete(sim, label)
    if rng.random() < sim.config.crash_after_commit:
        label += f" !crash@{rng.choice((1, 1, 1, 2, 3))}"
    elif len(sim.coordinators) > 1 and rng.random() < sim.config.pause_at_commit:
        label += f" !pause-{rng.choice(('before', 'after'))}@{rng.choice((1, 1, 2))}"
    return label


def complete(sim: Simulator, label: str) -> str:
    """Draw the random sub-choices of the picked action into its label."""
    rng = sim.rng
    words = label.split()
    kind = words[0]
    if kind == "submit":
        roll = rng.random()
        policy = ReplayPolicy.PROBE_FIRST
        if roll >= 0.9:
            policy = ReplayPolicy.SAFE
        elif roll >= 0.7:
            policy = ReplayPolicy.NEVER_AUTOMATIC
        turn = TurnKind.WRITABLE if rng.random() < 0.8 else TurnKind.READ_ONLY
        label = f"submit {policy.value} {rng.choice((1, 2, 3, 3, 4, 5, 8))} {turn.value}"
        if sim.setup.scheduled:  # three principals, one flooding (issue 9)
            label += " " + rng.choice(("flood", "flood", "flood", "p1", "p2"))
        return label
    if kind == "tick":
        route = "-"
        queued = sim.journal.operations[words[1]].state is OpState.QUEUED
        routes = _routes(sim, words[2][1:])
        if queued and sim.setup.scheduled:
            route = "*"  # the real scheduler routes it
        elif queued and routes and rng.random() < 0.95:
            route = rng.choice(routes)
        return f"tick {words[1]} {route} {words[2]}"
    if kind == "member":
        return sim_membership.complete(rng, label, sorted(sim.coordinators))
    if kind == "deliver":
        message = sim.network.in_flight[int(words[1][1:])]
        return f"{label} fail" if message.is_request and rng.random() < 0.04 else label
    if kind in ("launch", "retry"):
        return f"{label} {weighted(rng, LAUNCH_VARIANTS)}"
    if kind == "finish":
        return f"{label} {_finish_outcome(rng.random())}" + (
            " unsaved" if rng.random() < 0.03 else ""
        )
    if kind == "restart":
        apart = sim.side_rng.random() < sim.config.intent_apart_share
        return f"{label} {_restart_kind(sim, words[1])}" + (" apart" if apart else "")
    if kind == "watch" and len(sim.coordinators) > 1:
        return f"{label} @{rng.choice(sorted(sim.coordinators))}"
    if kind == "advance":
        return f"advance {rng.choice(CLOCK_STEPS)}"
    return label


def _finish_outcome(roll: float) -> str:
    """How an executor ends, from one draw (as before R15, so schedules draw alike):
    a failure may declare effect NONE (retried under a policy, R15) or APPLIED."""
    if roll < 0.75:
        return "ok"
    if roll < 0.87:
        return "failed-none"
    return "failed-applied" if roll < 0.92 else "failed"


def _restart_kind(sim: Simulator, name: str) -> str:
    runner = sim.runners[name]
    snapshots = sim.snapshots.get(name, [])
    roll = sim.rng.random()
    # Durable: restored (config share, once a snapshot exists), kept (60 %), wiped.
    restored = sim.config.restored_share if snapshots else 0.0
    if runner.durable and roll < restored:
        return f"restored:{sim.rng.randrange(len(snapshots))}"
    if runner.durable and roll < restored + 0.6:
        return "kept"
    return "wiped"


def heal_action(sim: Simulator) -> str | None:
    """HEAL: reliable network, jobs run to completion, the dispatcher keeps going."""
    rng = sim.heal_rng
    if len(sim.journal.operations) < sim.setup.operations:
        return "submit PROBE_FIRST 3 WRITABLE"
    for name, coordinator in sim.coordinators.items():
        if coordinator.paused:
            return f"resume @{name}"
    if sim.network.in_flight:
        return f"deliver m{rng.choice(list(sim.network.in_flight))}"
    for name, runner in sim.runners.items():
        for op, job in runner.jobs.items():
            if job.phase == "admitted":
                return f"launch {op}@{name} confirm"
            if job.phase == "running":
                return f"finish {op}@{name} {_finish_outcome(rng.random())}"
            if job.phase == "backoff" and job.retry_alarm is not None:
                if sim.now >= job.retry_alarm:
                    return f"retry {op}@{name} confirm"
                return f"advance {job.retry_alarm - sim.now + 0.001:.3f}"  # R15: wait it out
            if job.phase == "result_not_saved":
                # R7: held until restart; an operator restarts it (the same release).
                return f"restart {name} kept" + (" apart" if runner.intent_apart else "")
        if not runner.accepting:
            # Drained: an operator starts it again (the same release).
            return f"restart {name} kept" + (" apart" if runner.intent_apart else "")
    if sim.membership is not None:
        act = sim_membership.heal_action(sim.membership, sorted(sim.runners), _views(sim))
        if act is not None:
            return act
    due = [
        (name, op)
        for name in sorted(sim.coordinators)
        for op in sim.coordinators[name].due()
        if _claimable(sim, name, op)
    ]
    if due:
        name, op = rng.choice(due)
        queued = sim.journal.operations[op].state is OpState.QUEUED
        routes = _routes(sim, name) or ["-"]
        route = ("*" if sim.setup.scheduled else rng.choice(routes)) if queued else "-"
        return f"tick {op} {route} @{name}"
    return None


def _claimable(sim: Simulator, name: str, op: str) -> bool:
    """The replica owns it or may adopt it now (a dispatcher skips the others'
    live leases): the engine's own rule, ``core.ownership.role``."""
    coordinator = sim.coordinators[name]
    if not coordinator.replica_id:
        return True
    record = sim.journal.operations[op]
    return role(record, coordinator.replica_id, at(coordinator.now)) in (Role.OWNER, Role.ADOPTER)


def draw_setup(rng: random.Random, seed: int, config: SimConfig) -> Setup:
    """The world a generated schedule starts from."""
    from tests.simulation.simulator import RunnerSpec, Setup  # a cycle at import time

    runners = rng.randint(1, config.max_runners)
    operations = rng.randint(1, config.max_operations)
    replicas = 2 if config.max_replicas > 1 and rng.random() < config.replica_share else 1
    specs = tuple(
        RunnerSpec(f"r{n}", rng.random() < 0.75, rng.choice((1, 1, 2)))
        for n in range(1, runners + 1)
    )
    # Issue 27: which runners start on the release before it, from a generator of
    # its own (as every draw below), so the other choices stay as they were.
    release = random.Random(seed * 7331 + 11)
    specs = tuple(
        dataclasses.replace(s, intent_apart=release.random() < config.intent_apart_share)
        for s in specs
    )
    skew = rng.choice((0.0, 0.0, 4.0, -4.0, 20.0, -20.0)) if replicas > 1 else 0.0
    # Its own generator, so every other schedule draws exactly as before.
    side = random.Random(seed * 7919 + 17)
    scheduled = replicas == 1 and side.random() < config.scheduled_share
    if scheduled:
        # A flood on few slots (issue 9): turns wait, so grants meet other principals.
        operations = side.randint(3, config.scheduled_operations)
        specs = tuple(dataclasses.replace(s, slots=1) for s in specs[:2])
    # Drawn last, from a generator of its own: every other choice is as before.
    membership = random.Random(seed * 104729 + 3).random() < config.membership_share
    return Setup(specs, operations, replicas, skew, scheduled, membership)


# --- replaying labels ---------------------------------------------------------------


def split(label: str) -> tuple[list[str], str]:
    """The label's words without the ``@cN`` coordinator tag, and that tag (c1 by default)."""
    words = label.split()
    replica = next((w[1:] for w in words if w.startswith("@")), "c1")
    return [w for w in words if not w.startswith("@")], replica


def enabled(sim: Simulator, label: str) -> bool:
    """Whether a scripted step can still happen in this world."""
    words, replica = split(label)
    kind = words[0]
    coordinator = sim.coordinators.get(replica)
    if coordinator is None:
        return False
    if kind in ("deliver", "drop", "dup"):
        message = sim.network.in_flight.get(int(words[1][1:]))
        return message is not None and not (
            message.replica and sim.coordinators[message.replica].paused
        )
    if kind in ("tick", "cancel", "crash") and coordinator.paused:
        return False
    if kind == "tick":
        return words[1] in coordinator.due(include_busy=True)
    if kind == "resume":
        return coordinator.paused
    if kind in ("launch", "finish", "watch", "lapse", "retry"):
        return _runner_step_enabled(sim, kind, words[1])
    if kind == "cancel":
        return words[1] in sim.journal.operations
    if kind == "submit":
        return len(sim.journal.operations) < sim.setup.operations
    if kind == "member":
        return sim.membership is not None and (words[1] == "sync" or words[2] in sim.runners)
    if kind == "restart" and words[2].startswith("restored:"):
        return int(words[2][9:]) < len(sim.snapshots.get(words[1], []))
    return kind in ("restart", "drain", "advance", "crash")


def _runner_step_enabled(sim: Simulator, kind: str, where: str) -> bool:
    op, _, name = where.partition("@")
    runner = sim.runners.get(name)
    if runner is None:
        return False
    if kind == "watch":
        return op in runner.store.rows
    job = runner.jobs.get(op)
    if kind == "retry":
        return job is not None and job.retry_alarm is not None and sim.now >= job.retry_alarm
    if kind == "lapse":
        return (
            job is not None
            and job.phase == "running"
            and job.alarm is not None
            and sim.now >= job.alarm
        )
    return job is not None and job.phase == ("admitted" if kind == "launch" else "running")
