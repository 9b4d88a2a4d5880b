"""A local deployment (``turnwire up``, the demo, chaos, the test kit's process
stacks) whose coordinator fails to start leaves nothing running: the runners it
had already started are stopped by PID before the error goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from turnwire.deployment import LocalDeployment
from turnwire.launcher import LaunchError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_coordinator_that_fails_to_start_leaves_no_runner_behind(tmp_path: Path) -> None:
    """Regression: start() raised with its runners still running, and a caller
    that never got a deployment had nothing to stop them with (runner processes
    of a failed tests/retries start outlived the test session)."""
    deployment = LocalDeployment(
        tmp_path / "deploy",
        runner_count=2,
        coordinator_args=("--no-such-flag",),  # argparse refuses it: the coordinator exits
    )
    with pytest.raises(LaunchError):
        deployment.start(timeout=30)
    pids = [slot.process.pid for slot in deployment.runners]
    assert len(pids) == 2 and all(pid is not None for pid in pids)
    assert not any(_alive(pid) for pid in pids if pid is not None)
