"""The SDK and the client commands never import the server's modules, even where installed.

Run in this (dev) venv, where everything is installed, so an import that
would only fail in a client-only install is seen here too: a fresh interpreter
imports turnwire.client, then runs each client command (against a closed
loopback port, no retries: each gets as far as its call, exit 7 unavailable)
and prints what of the server got imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.packaging.venvs import REPO_ROOT

SERVER_MODULES = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "cryptography",
    "opentelemetry",
    "prometheus_client",
    "uvloop",
    "coordinator_svc",
    "runner_svc",
)
NOWHERE = ["--address", "127.0.0.1:9", "--token", "t", "--retries", "0", "--rpc-timeout", "2"]
COMMANDS = [
    ["--help"],
    ["--version"],
    ["submit", "-i", "hello", *NOWHERE],
    ["get", "op_1", *NOWHERE],
    ["list", *NOWHERE],
    ["watch", "op_1", *NOWHERE],
    ["cancel", "op_1", *NOWHERE],
    ["admin", "runners", *NOWHERE],
    ["admin", "--help"],
]
PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    server = tuple(sys.argv[1].split(","))

    def loaded():
        return sorted({name.split(".")[0] for name in sys.modules} & set(server))

    import turnwire.client
    report = {"import turnwire.client": [0, loaded()]}
    from turnwire.cli import main
    for argv in json.loads(sys.argv[2]):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = main(argv)
        report["turnwire " + " ".join(argv[:2])] = [status, loaded()]
    print(json.dumps(report))
    """
)


def test_the_sdk_and_the_client_commands_import_nothing_of_the_server() -> None:
    """`import turnwire.client`, then `turnwire --help/--version/submit/get/list/watch/
    cancel/admin`: no SQLAlchemy, alembic, cryptography, OpenTelemetry, prometheus,
    uvloop, psycopg or service module is imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(SERVER_MODULES), json.dumps(COMMANDS)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {step: found for step, (_, found) in report.items() if found} == {}
    statuses = {step: status for step, (status, _) in report.items()}
    assert statuses == {
        step: 0 if step.endswith(("help", "version", "client")) else 7 for step in statuses
    }
    assert len(report) == 1 + len(COMMANDS)
