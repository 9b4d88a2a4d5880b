"""`turnwire-runner serve --check-config`: each class of problem, with its fix, all at once.

Real certificates, secret files and stores migrated by the runner's own
migrations, through the runner's own main(); nothing is served or locked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from runner_svc.__main__ import main
from runner_svc.storage import migrate
from runner_svc.storage.sqlite_store import make_engine
from tests.deploy.conftest import Certs
from tests.deploy.test_check_config_coordinator import line_of


def check(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    status = main(["serve", "--check-config", *map(str, argv)])
    return status, capsys.readouterr().out


def store_at(path: Path, revision: str = "head") -> Path:
    """A store file migrated to ``revision`` by the runner's migrations."""
    engine = make_engine(path)
    with engine.connect() as connection:
        migrate.upgrade_to_head(connection)
        if revision != "head":
            migrate.downgrade_to(connection, revision)
        connection.commit()
    engine.dispose()
    return path


def test_a_good_configuration_passes_every_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, certs: Certs
) -> None:
    """Exit 0; the store at head; the certificate's names and the identities it serves."""
    store = store_at(tmp_path / "runner-1.db")
    status, out = check(
        capsys, "--listen", "0.0.0.0:50061", "--store", store, *certs.flags("runner-1"),
        "--coordinator-identity", "coordinator", "--coordinator-identity", "runner-1",
    )  # fmt: skip
    assert status == 0, out
    assert "CN is one of: coordinator, runner-1" in line_of(out, "who may call")
    assert "names localhost, 127.0.0.1, ::1" in line_of(out, "TLS certificate")
    assert f"schema at {migrate.head_revision()}, this code's head" in line_of(out, "store")


def test_every_problem_is_reported_at_once_each_with_its_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A secret file others can read, plaintext on 0.0.0.0 (store and metrics), metered
    without --ledger, negative slots, a store directory that does not exist."""
    secret = tmp_path / "secret"
    secret.write_text("s" * 43 + "\n")
    secret.chmod(0o644)
    status, out = check(
        capsys, "--plaintext", "--coordinator-secret-file", secret, "--listen", "0.0.0.0:50061",
        "--executor", "metered", "--writable-slots", "-1", "--store", tmp_path / "no" / "r.db",
    )  # fmt: skip
    assert status == 2, out
    assert f"chmod 600 {secret}" in line_of(out, "who may call")
    assert "--executor metered needs --ledger" in line_of(out, "executor")
    assert "slot counts cannot be negative" in line_of(out, "slots")
    assert f"fix: create it for the service's user: mkdir -p {tmp_path / 'no'}" in line_of(
        out, "store"
    )
    # Plaintext was chosen, so its listen rule runs too once access is fixed; here the
    # access problem is reported once and the rules that depend on it wait for it.
    assert "skipped" in line_of(out, "listen address")
    assert out.rstrip().endswith("4 problems found; fix them and run again")


def test_plaintext_off_loopback_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The start-up rule: plaintext only on loopback (the secret must never cross a network)."""
    secret = tmp_path / "secret"
    secret.write_text("s" * 43 + "\n")
    secret.chmod(0o600)
    status, out = check(
        capsys, "--plaintext", "--coordinator-secret-file", secret, "--listen", "0.0.0.0:50061",
        "--store", tmp_path / "r.db",
    )  # fmt: skip
    assert status == 2
    assert "not a loopback address" in line_of(out, "listen address")


def test_a_store_written_by_newer_code_is_refused_an_older_one_is_upgraded_at_start(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, certs: Certs
) -> None:
    """check_known's refusal (with the fix), and an older schema that serve upgrades itself."""
    newer = store_at(tmp_path / "newer.db")
    engine = sa.create_engine(f"sqlite:///{newer}")
    with engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'r9999'"))
    engine.dispose()
    status, out = check(capsys, "--store", newer, *certs.flags("runner-1"))
    assert status == 2
    assert "'r9999', unknown to this runner" in line_of(out, "store")
    assert "fix: run the runner version that wrote it" in line_of(out, "store")

    older = store_at(tmp_path / "older.db", "r0004")
    status, out = check(capsys, "--store", older, *certs.flags("runner-1"))
    assert status == 0, out
    assert f"r0004; serve upgrades it to {migrate.head_revision()}" in line_of(out, "store")


def test_a_runner_given_the_coordinators_certificate_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, certs: Certs
) -> None:
    """The role in the certificate's URI SAN: a coordinator's is not a runner's."""
    status, out = check(capsys, "--store", tmp_path / "r.db", *certs.flags("coordinator"))
    assert status == 2
    assert "is a coordinator certificate" in line_of(out, "TLS certificate")
