"""turnwire.event_loop: the services run on uvloop unless told otherwise, and a
misspelt choice is refused, never ignored."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from turnwire import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.chosen() == "uvloop"
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_asyncio_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.chosen() == "asyncio"
    assert event_loop.run(_loop_module()).startswith("asyncio")


def test_an_unknown_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "tokio")
    with pytest.raises(ValueError, match="TURNWIRE_EVENT_LOOP must be one of uvloop, asyncio"):
        event_loop.chosen()


@pytest.mark.parametrize(
    "command",
    [
        ["runner_svc", "serve", "--listen", "127.0.0.1:0", "--store", "{tmp}/store.db"],
        [
            "coordinator_svc",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--journal-url",
            "sqlite:///{tmp}/journal.db",
            "--migrate",
            "--plaintext",
        ],
    ],
    ids=["runner", "coordinator"],
)
def test_a_service_refuses_an_unknown_choice_at_start_with_exit_2(
    command: list[str], tmp_path: Path
) -> None:
    """Each service's CLI turns the ValueError into a one-line usage failure (exit 2)
    before it serves anything (a process that started serving is killed by the timeout)."""
    argv = [sys.executable, "-m", *(part.format(tmp=tmp_path) for part in command)]
    done = subprocess.run(
        argv,
        env={"TURNWIRE_EVENT_LOOP": "tokio", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "TURNWIRE_EVENT_LOOP must be one of" in done.stderr
    assert "Traceback" not in done.stderr
