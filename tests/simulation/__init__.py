"""Deterministic simulation of the Turnwire protocol (issue #5).

A seeded simulator with a virtual clock drives the pure cores of both
services (``coordinator_svc.core.decide``, ``runner_svc.core``) through
schedules of deliveries, drops, duplicates, reorderings, restarts, crashes,
cancels and clock jumps, and checks PROTOCOL.md §8 after every step.

    simulator.py        the world and the step executor (labels -> effects)
    menu.py             the generator: enabled actions, weights, label sub-choices
    sim_coordinator.py  the coordinator shell: decide -> commit (CAS) -> send
    sim_journal.py      the journal in memory, with storage.rules
    wire.py             calls, watch reports, replies -> core events
    sim_runner.py       the runner shell around runner_svc.core, with its store
    world.py            virtual time, the execution ledger, the network
    invariants.py       the §8 checker (ground truth: ledger, runners, journal)
    broken_policies.py  deliberately broken wrappers of decide (teeth)
    shrink.py           delta debugging of a failing label list
    budget.py           many seeds in a row (CI budget and explore.py)
    explore.py          many seeds for as long as asked, or one replayed (a command)

Run: ``.venv/bin/pytest tests/simulation`` (CI budget, teeth, regressions);
``python -m tests.simulation.explore --seconds 60 [--jobs 2]``; ``--seed S [--shrink]``.
"""
