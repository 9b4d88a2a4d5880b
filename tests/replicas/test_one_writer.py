"""Issue 12: one journal, one writer where it must be. A SQLite journal serves
one coordinator process (a second is refused, clearly, before it touches the
journal); a replica id is refused where replicas cannot be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import runner_access
from turnwire.testing.processes import ServiceProcess, start_coordinator_process

TIMEOUT = 60


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNWIRE_")}


def _serve(journal: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "coordinator_svc", "serve", *runner_access.coordinator_flags(),
        "--listen", "127.0.0.1:0", "--journal-url", journal, "--migrate", *extra,
    ]  # fmt: skip


def _start(journal: str, work: Path, name: str) -> ServiceProcess:
    return start_coordinator_process(
        journal, work, flags=runner_access.coordinator_flags(), name=name, timeout=TIMEOUT
    )


def test_a_second_coordinator_on_one_sqlite_journal_is_refused_until_the_first_stops(
    tmp_path: Path,
) -> None:
    """The second exits 1 naming the file, the holder's PID and what to do, and
    changes nothing; once the first stops, a coordinator starts on it again."""
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    with _start(journal, tmp_path, "first") as first:
        before = (tmp_path / "journal.db").stat().st_mtime_ns
        second = subprocess.run(
            _serve(journal), capture_output=True, text=True, timeout=TIMEOUT, env=_env()
        )
        assert second.returncode == 1, second.stderr
        message = second.stderr.strip().splitlines()[-1]
        assert "in use by another coordinator" in message
        assert f"pid {first.pid}" in message
        assert "PostgreSQL" in message
        assert (tmp_path / "journal.db").stat().st_mtime_ns == before
        assert first.terminate(timeout=TIMEOUT) == 0, first.output()
    with _start(journal, tmp_path, "again") as again:
        assert again.terminate(timeout=TIMEOUT) == 0, again.output()


def test_a_replica_id_on_a_sqlite_journal_is_a_usage_error(tmp_path: Path) -> None:
    """Exit 2 before anything opens: the journal file is never created."""
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    done = subprocess.run(
        [*_serve(journal), "--replica-id", "r1"],
        capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--replica-id needs a PostgreSQL journal" in done.stderr
    assert not (tmp_path / "journal.db").exists()


def test_bad_replica_flags_are_usage_errors(tmp_path: Path) -> None:
    journal = f"sqlite:///{tmp_path / 'journal.db'}"
    for flags, says in (
        (("--replica-id", "has space"), "replica id"),
        (("--replica-id", "-dash-first"), "expected one argument"),
        (("--lease-ttl", "0.5"), "between 1 and 3600"),
        (("--lease-ttl", "soon"), "not a number"),
        (("--watch-poll", "0"), "between 0.05 and 600"),
    ):
        done = subprocess.run(
            [*_serve(journal), *flags], capture_output=True, text=True, timeout=TIMEOUT, env=_env()
        )
        assert done.returncode == 2, (flags, done.stderr)
        assert says in done.stderr, (flags, done.stderr)
