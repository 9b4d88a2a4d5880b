"""The runner store's Alembic environment.

Installed as the package ``runner_svc.migrations`` (pyproject.toml maps it),
where ``runner_svc.storage.migrate`` finds it through importlib.resources.
Alembic runs ``env.py`` and ``versions/`` by path.
"""
