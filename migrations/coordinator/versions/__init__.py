"""The coordinator journal's revisions, one file each (Alembic skips this one)."""
