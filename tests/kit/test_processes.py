"""turnwire.testing.processes: real processes, ended by their PID with real signals."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support import runner_access
from turnwire.testing.processes import (
    LaunchError,
    ServiceProcess,
    start_coordinator_process,
    start_runner_process,
)


def _runner(tmp_path: Path, name: str = "runner") -> ServiceProcess:
    return start_runner_process(
        tmp_path / "r.db", tmp_path, flags=runner_access.runner_flags(), name=name
    )


def test_sigterm_drains_a_runner_to_exit_zero(tmp_path: Path) -> None:
    """A started runner process listens on 127.0.0.1 and SIGTERM by its PID ends it
    with exit 0 (R8's drain), within a bounded wait."""
    with _runner(tmp_path) as runner:
        assert runner.address.startswith("127.0.0.1:")
        runner.signal(signal.SIGTERM)
        assert runner.wait(20) == 0, runner.output()


def test_leaving_the_block_sigkills_even_a_frozen_process(tmp_path: Path) -> None:
    """A test that fails midway leaks nothing: leaving the with block SIGKILLs the
    process, one frozen with SIGSTOP included."""
    with _runner(tmp_path) as runner:
        runner.pause()
    assert not runner.alive()
    assert runner.wait(1) == -signal.SIGKILL


def test_a_process_that_cannot_start_is_a_launch_error_with_its_output(tmp_path: Path) -> None:
    """A second runner on a store in use exits before listening: LaunchError carries
    what it printed, and the first one is still ended by its PID."""
    with _runner(tmp_path) as first:
        with pytest.raises(LaunchError, match="in use by another runner process"):
            _runner(tmp_path, name="second")
        assert first.terminate() == 0


def test_a_coordinator_process_starts_and_stops_by_pid(tmp_path: Path) -> None:
    """start_coordinator_process: migrated journal, listening on 127.0.0.1; SIGTERM, exit 0."""
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    with start_coordinator_process(
        journal, tmp_path, flags=runner_access.coordinator_flags()
    ) as coordinator:
        coordinator.wait_healthy(20)
        assert coordinator.terminate() == 0, coordinator.output()
