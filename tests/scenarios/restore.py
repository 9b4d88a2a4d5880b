"""Putting a runner store back to an earlier state, every way an operator might
(issue 8.1): each must leave the coordinator unable to take the restored
store's silence as proof, so a turn that ran is never run again.

A backup is taken while runner-1 is live (before the scenario's turn is
submitted); the runner is later SIGKILLed and started on the restored store.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path


class Restore(enum.StrEnum):
    # `cp backup.db runner.db` over the store (same inode), -wal/-shm removed.
    COPY_IN_PLACE = "copy_in_place"
    # `rm runner.db*; cp backup.db runner.db` (a new inode, or the same one reused).
    REMOVE_THEN_COPY = "remove_then_copy"
    # SQLite's backup API writing the backup into the store's own path.
    BACKUP_API_INTO_STORE = "backup_api_into_store"
    # The backup copied to a new path; the runner started on that path.
    COPY_TO_NEW_PATH = "copy_to_new_path"
    # A file-level copy of the store *with* its WAL, restored with it.
    FILES_WITH_WAL = "files_with_wal"


def _sidecars(store: Path) -> tuple[Path, Path]:
    return store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")


def take_backup(store: Path, into: Path, how: Restore) -> Path:
    """A consistent copy of the live store under ``into`` (returned path)."""
    into.mkdir(parents=True, exist_ok=True)
    backup = into / "backup.db"
    for stale in (backup, *_sidecars(backup)):
        stale.unlink(missing_ok=True)
    source = sqlite3.connect(store, timeout=10.0, isolation_level=None)
    try:
        if how is Restore.FILES_WITH_WAL:
            # Hold SQLite's write lock so no commit (nor the auto-checkpoint
            # after one) moves the files while they are copied.
            source.execute("BEGIN IMMEDIATE")
            try:
                shutil.copyfile(store, backup)
                wal, _ = _sidecars(store)
                if wal.exists():
                    shutil.copyfile(wal, _sidecars(backup)[0])
            finally:
                source.execute("ROLLBACK")
        else:
            target = sqlite3.connect(backup)
            try:
                source.backup(target)
            finally:
                target.close()
    finally:
        source.close()
    return backup


def restorer(backup: Path, how: Restore) -> Callable[[Path], Path]:
    """What to do to the (stopped) runner's store; returns the path to start on."""

    def restore(store: Path) -> Path:
        wal, shm = _sidecars(store)
        if how is Restore.COPY_IN_PLACE:
            for path in (wal, shm):
                path.unlink(missing_ok=True)
            shutil.copyfile(backup, store)  # writes into the existing inode
        elif how is Restore.REMOVE_THEN_COPY:
            for path in (store, wal, shm):
                path.unlink(missing_ok=True)
            shutil.copyfile(backup, store)
        elif how is Restore.BACKUP_API_INTO_STORE:
            source = sqlite3.connect(backup)
            target = sqlite3.connect(store)
            try:
                source.backup(target)
            finally:
                target.close()
                source.close()
        elif how is Restore.COPY_TO_NEW_PATH:
            moved = store.with_name("restored-" + store.name)
            for path in (moved, *_sidecars(moved)):
                path.unlink(missing_ok=True)
            shutil.copyfile(backup, moved)
            return moved
        elif how is Restore.FILES_WITH_WAL:
            shm.unlink(missing_ok=True)
            shutil.copyfile(backup, store)
            backup_wal = _sidecars(backup)[0]
            if backup_wal.exists():
                shutil.copyfile(backup_wal, wal)
            else:
                with contextlib.suppress(FileNotFoundError):
                    wal.unlink()
        return store

    return restore
