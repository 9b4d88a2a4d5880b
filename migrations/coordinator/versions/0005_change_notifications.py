"""Change notifications on PostgreSQL (issue 12): replicas hear each other's commits.

Revision ID: 0005_change_notifications
Revises: 0004_envelope_table
Create Date: 2026-12-02

A trigger sends ``NOTIFY turnwire_operations, '<operation id> <version>'`` whenever an
operation is inserted or its ``version`` is written (every commit and every
claim; a lease renewal writes only ``lease_expires_at`` and stays silent).
PostgreSQL delivers it when the transaction commits, and never for one that
rolled back. Each replica listens (coordinator_svc/storage/notifications.py):
it drops an older cached copy of the operation and wakes its watchers at
once, instead of at their next poll. SQLite has one coordinator: nothing to do there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005_change_notifications"
down_revision: str | None = "0004_envelope_table"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "turnwire_operations"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE FUNCTION turnwire_notify_operation_change() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_notify('{CHANNEL}', NEW.operation_id || ' ' || NEW.version);"
        " RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER operations_notify_change AFTER INSERT OR UPDATE OF version "
        "ON operations FOR EACH ROW EXECUTE FUNCTION turnwire_notify_operation_change()"
    )


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER operations_notify_change ON operations")
    op.execute("DROP FUNCTION turnwire_notify_operation_change()")
