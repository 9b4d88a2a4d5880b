"""The runner store's revisions, one file each (Alembic skips this one)."""
