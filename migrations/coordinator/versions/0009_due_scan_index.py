"""An index for the due scan's terminal, unreleased operations (issue 27).

Revision ID: 0009_due_scan_index
Revises: 0008_executions
Create Date: 2026-12-06

The due scan (``Journal.due``, every ``--idle-poll``) asks for open operations
whose ``next_action_at`` has passed and terminal ones not yet released. Its
single ``WHERE (state NOT IN (...) AND ...) OR (... AND NOT released)`` could
use no index, so the database read every operation the journal keeps, a day
of finished turns included: with 500,000 kept it took about 200 ms of SQLite
a scan, twice a second. The scan now asks one indexed question per state
(``coordinator_svc/storage/statements.py``): the open states through
``(state, next_action_at)``, the terminal ones through this index on
``(released, state)``, where the unreleased are the few turns whose Release
is still on its way.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009_due_scan_index"
down_revision: str | None = "0008_executions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_operations_released_state", "operations", ["released", "state"])


def downgrade() -> None:
    op.drop_index("ix_operations_released_state", table_name="operations")
