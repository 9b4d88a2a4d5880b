"""--check-config against a real PostgreSQL that asks for a password over TLS.

A cluster of its own (turnwire/testing/postgres.py), set up as docs/DEPLOYMENT.md
tells an operator to: the server's certificate from `turnwire certs`, a role
whose password has the characters a URL reserves, and pg_hba.conf letting that
role in only over TLS with scram-sha-256. The journal URL then carries the
password percent-encoded (or nothing, with PGPASSFILE), sslmode=verify-full
and sslrootcert; the check connects, reports the schema against this code's
head and the server's max_connections, and names the fix when it cannot.
"""

from __future__ import annotations

import os
import pwd
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from coordinator_svc.__main__ import main
from coordinator_svc.storage import head_revision
from coordinator_svc.storage.journal_check import connections_per_replica
from tests.deploy.conftest import Certs
from tests.deploy.test_check_config_coordinator import line_of
from turnwire.testing.postgres import PostgresCluster, running_cluster

pytestmark = pytest.mark.postgres
PASSWORD = "p@ss:w/rd%#?"
ROLE = "tw_app"


@dataclass(frozen=True)
class SecureCluster:
    cluster: PostgresCluster
    ca: Path

    def url(self, database: str, *, password: str | None = PASSWORD, **query: str) -> str:
        secret = f":{urllib.parse.quote(password, safe='')}" if password is not None else ""
        options = {"sslmode": "verify-full", "sslrootcert": str(self.ca), **query}
        return (
            f"postgresql://{ROLE}{secret}@127.0.0.1:{self.cluster.port}/{database}?"
            + urllib.parse.urlencode(options)
        )


def _as_postgres(path: Path) -> None:
    owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    from turnwire.certs import issue_deployment

    tls = tmp_path_factory.mktemp("pg-tls") / "tls"
    issue_deployment(tls, coordinators=[], runners=["postgres"])
    with running_cluster() as cluster:
        for name in ("postgres.pem", "postgres.key"):
            shutil.copy(tls / name, cluster.root / name)
            (cluster.root / name).chmod(0o600)
            _as_postgres(cluster.root / name)
        hba = cluster.data / "pg_hba.conf"
        hba.write_text(
            f"hostssl all {ROLE} 127.0.0.1/32 scram-sha-256\n"
            f"host all {ROLE} 127.0.0.1/32 reject\n" + hba.read_text()
        )
        cluster.admin("ALTER SYSTEM SET ssl = on")
        cluster.admin(f"ALTER SYSTEM SET ssl_cert_file = '{cluster.root / 'postgres.pem'}'")
        cluster.admin(f"ALTER SYSTEM SET ssl_key_file = '{cluster.root / 'postgres.key'}'")
        cluster.admin(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        cluster.admin("SELECT pg_reload_conf()")
        _wait_for_ssl(cluster)
        yield SecureCluster(cluster, tls / "ca.pem")


def _wait_for_ssl(cluster: PostgresCluster) -> None:
    """pg_reload_conf() signals the server; a new session sees ssl on soon after."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with psycopg.connect(cluster.dsn("postgres"), connect_timeout=5) as conn:
            if conn.execute("SHOW ssl").fetchone() == ("on",):
                return
        time.sleep(0.1)
    raise AssertionError("the test cluster did not turn ssl on")


@pytest.fixture
def database(secure_cluster: SecureCluster) -> Iterator[str]:
    name = secure_cluster.cluster.create_database()
    secure_cluster.cluster.admin(f'ALTER DATABASE "{name}" OWNER TO {ROLE}')
    try:
        yield name
    finally:
        secure_cluster.cluster.drop_database(name)


def check(capsys: pytest.CaptureFixture[str], url: str, certs: Certs) -> tuple[int, str]:
    status = main(["serve", "--check-config", "--journal-url", url, "--listen", "127.0.0.1:1",
                   "--replica-id", "coordinator-1", *certs.flags("coordinator")])  # fmt: skip
    return status, capsys.readouterr().out


def test_a_percent_encoded_password_over_verified_tls_connects_and_reports_the_schema(
    capsys: pytest.CaptureFixture[str], secure_cluster: SecureCluster, database: str, certs: Certs
) -> None:
    """Migrate with the URL, then --check-config: at head, the server's max_connections,
    what a replica opens; the password never printed."""
    url = secure_cluster.url(database)
    assert main(["migrate", "--journal-url", url]) == 0
    status, out = check(capsys, url, certs)
    assert status == 0, out
    journal = line_of(out, "journal")
    assert f"schema at {head_revision()}, this code's head" in journal
    assert "max_connections 200" in journal
    assert f"each coordinator opens {connections_per_replica()}" in journal
    assert PASSWORD not in out and urllib.parse.quote(PASSWORD, safe="") not in out


def test_an_empty_database_needs_migrate(
    capsys: pytest.CaptureFixture[str], secure_cluster: SecureCluster, database: str, certs: Certs
) -> None:
    status, out = check(capsys, secure_cluster.url(database), certs)
    assert status == 2
    assert "fix: run `turnwire-coordinator migrate" in line_of(out, "journal")


def test_a_wrong_password_a_refused_plaintext_session_and_no_server_are_problems(
    capsys: pytest.CaptureFixture[str], secure_cluster: SecureCluster, database: str, certs: Certs
) -> None:
    """Each says what the server answered and points at the URL's parts."""
    cases = (
        (secure_cluster.url(database, password="wrong"), "password authentication failed"),
        (secure_cluster.url(database, sslmode="disable"), "pg_hba.conf rejects"),
        (secure_cluster.url(database).replace(str(secure_cluster.cluster.port), "1"), "refused"),
    )
    for url, expected in cases:
        status, out = check(capsys, url, certs)
        finding = line_of(out, "journal")
        assert status == 2 and expected in finding, finding
        assert "fix: check the URL's host, port, user and database, the password" in finding


def test_pgpassfile_supplies_the_password(
    capsys: pytest.CaptureFixture[str],
    secure_cluster: SecureCluster,
    database: str,
    certs: Certs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No password in the URL; libpq reads it from PGPASSFILE (mode 600, ':' escaped)."""
    pgpass = tmp_path / "pgpass"
    escaped = PASSWORD.replace("\\", "\\\\").replace(":", "\\:")
    pgpass.write_text(f"127.0.0.1:{secure_cluster.cluster.port}:*:{ROLE}:{escaped}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    url = secure_cluster.url(database, password=None)
    assert main(["migrate", "--journal-url", url]) == 0
    status, out = check(capsys, url, certs)
    assert status == 0, out
