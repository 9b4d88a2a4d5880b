"""Envelopes leave the operations row (issue 12): ``operation_envelopes``.

Revision ID: 0004_envelope_table
Revises: 0003_retention
Create Date: 2026-12-01

Every commit rewrites an operation's row; on SQLite that rewrites the whole
record, its envelope (the turn as accepted, up to the runners' receive
limit) with it, about three times per turn. The envelope is written once and
read only when the turn is sent, so it moves to a table of its own, one row
per operation, deleted with it. Existing envelopes are copied over, then the
column is dropped with a plain ALTER TABLE (SQLite 3.35+): not in batch mode,
which would recreate the table and lose 0002's and 0003's triggers.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_envelope_table"
down_revision: str | None = "0003_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operation_envelopes",
        sa.Column(
            "operation_id",
            sa.String(128),
            sa.ForeignKey("operations.operation_id"),
            primary_key=True,
        ),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
    )
    op.execute(
        "INSERT INTO operation_envelopes (operation_id, envelope)"
        " SELECT operation_id, envelope FROM operations"
    )
    op.execute("ALTER TABLE operations DROP COLUMN envelope")


def downgrade() -> None:
    sqlite = op.get_context().dialect.name == "sqlite"
    blob, empty = ("BLOB", "x''") if sqlite else ("BYTEA", "''::bytea")
    op.execute(f"ALTER TABLE operations ADD COLUMN envelope {blob} NOT NULL DEFAULT {empty}")
    op.execute(
        "UPDATE operations SET envelope = (SELECT e.envelope FROM operation_envelopes e"
        " WHERE e.operation_id = operations.operation_id)"
    )
    op.drop_table("operation_envelopes")
