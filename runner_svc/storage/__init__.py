"""The runner's durable dedupe store: SQLAlchemy Core tables on SQLite (R3, R9, §6)."""
