"""``serve --check-config``'s look at the runner store: where it goes, and its schema.

A runner creates its store when the file is missing and upgrades an older
schema when it opens it (``SqliteRunnerStore.open``); it refuses a schema it
does not know (written by newer code) with ``migrate.check_known``, which
this check calls too. It reads only: the file is opened ``mode=rw`` (never
created), no lock is taken, nothing is migrated.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import sqlalchemy as sa

from runner_svc.storage import migrate
from turnwire.config_check import ConfigProblem


def check_store(path: Path) -> str:
    """What the store at ``path`` is; ConfigProblem (with the fix) when serve would fail."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ConfigProblem(
            f"runner store {path}: directory {directory} does not exist",
            f"create it for the service's user: mkdir -p {directory}",
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigProblem(
            f"runner store {path}: this user (uid {os.getuid()}) cannot write in {directory} "
            "(the store, its WAL and its lock file live there)",
            f"make {directory} writable by the service's user",
        )
    head = migrate.head_revision()
    if not path.exists():
        return f"{path}: no store yet; serve creates it at schema {head}"
    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigProblem(
            f"runner store {path} cannot be read and written by this user (uid {os.getuid()})",
            f"give the service's user read and write access to {path}",
        )
    engine = sa.create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    )
    try:
        with engine.connect() as connection:
            revision = migrate.current_revision(connection)
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigProblem(
            f"runner store {path} cannot be read: {getattr(exc, 'orig', exc)}",
            "give the runner its own SQLite store file (or a new path: a new store)",
        ) from None
    finally:
        engine.dispose()
    migrate.check_known(revision, str(path))  # StoreSchemaError: written by newer code
    if revision != head:
        return f"{path}: schema at {revision or 'none'}; serve upgrades it to {head} at start"
    return f"{path}: schema at {head}, this code's head"
