"""The coordinator journal's Alembic environment (see README.md here).

Installed as the package ``coordinator_svc.migrations`` (pyproject.toml maps
it), where ``coordinator_svc.storage.schema`` finds it through
importlib.resources. Alembic runs ``env.py`` and ``versions/`` by path.
"""
