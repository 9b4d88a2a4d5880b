"""Turnwire's benchmarks: ``python -m bench NAME [args]``; ``python -m bench --help`` lists them.

Each module here with a ``main(argv)`` is a bench (docs/PERFORMANCE.md says what
each measures and what it printed); the others are what the benches share. They
print figures and never pass or fail on time. The package is not installed: run
it from the repository's root. A bench that starts a process of its own starts it
in ``REPO_ROOT`` (``python -m bench.counting_coordinator``, ``python -m
runner_svc``), so the process imports this tree's code, as the bench does.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
