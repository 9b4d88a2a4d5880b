"""`turnwire-coordinator serve --check-config`: each class of problem, with its fix, all at once.

Real files (certificates from `turnwire certs`' own code, tokens files, SQLite
journals migrated by the real migrations), run through the service's own
main(); nothing is served. The PostgreSQL checks are in test_check_config_postgres.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from coordinator_svc.__main__ import main
from coordinator_svc.api.tokens_file import token_digest
from coordinator_svc.storage import head_revision, migrate
from coordinator_svc.storage.schema import VERSION_TABLE
from tests.deploy.conftest import Certs


def check(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    """Run `serve --check-config ARGV`: (exit status, what it printed)."""
    status = main(["serve", "--check-config", *map(str, argv)])
    return status, capsys.readouterr().out


def line_of(out: str, subject: str) -> str:
    """The finding about ``subject`` and its fix line, if any."""
    lines = out.splitlines()
    for index, line in enumerate(lines):
        if line.split(maxsplit=1)[-1].startswith(f"{subject}:"):
            following = lines[index + 1] if index + 1 < len(lines) else ""
            return line + ("\n" + following if following.strip().startswith("fix:") else "")
    raise AssertionError(f"no finding about {subject!r} in:\n{out}")


@pytest.fixture
def journal(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    migrate(url)
    return url


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"alice {token_digest('alice-token-0123456789')}\n"
                    f"ops {token_digest('ops-token-0123456789')} scopes=admin\n")  # fmt: skip
    path.chmod(0o600)
    return path


def good(certs: Certs, journal: str, tokens: Path) -> list[str]:
    return ["--listen", "127.0.0.1:50051", "--journal-url", journal, "--tokens-file", str(tokens),
            "--runner", "runner-1=localhost:50061", *certs.flags("coordinator")]  # fmt: skip


def test_a_good_configuration_passes_every_check(
    capsys: pytest.CaptureFixture[str],
    certs: Certs,
    journal: str,
    tokens: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Exit 0, one ok line per check, the journal at this code's head, nothing served; a
    runner's variable in the environment (one file for both services) is only a warning."""
    monkeypatch.setenv("TURNWIRE_RUNNER_STORE", "/var/lib/turnwire/runner.db")
    status, out = check(capsys, *good(certs, journal, tokens))
    assert "TURNWIRE_RUNNER_STORE" in line_of(out, "environment")
    assert status == 0, out
    assert "PROBLEM" not in out
    assert f"schema at {head_revision()}, this code's head" in line_of(out, "journal")
    assert "CN 'coordinator'" in line_of(out, "TLS certificate")
    assert "2 principal(s), 1 admin token(s)" in line_of(out, "tokens file")
    assert out.rstrip().endswith("configuration ok (10 checks)")


def test_every_problem_is_reported_at_once_each_with_its_fix(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    certs: Certs,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A misspelt variable, an unreadable key mode, a replica id on SQLite, a bad tokens
    file and an unmigrated journal: five problems in one run, exit 2."""
    monkeypatch.setenv("TURNWIRE_JOURNAL_URI", "postgresql://db/turnwire")
    key = tmp_path / "coordinator.key"
    key.write_bytes(certs.key("coordinator").read_bytes())
    key.chmod(0o644)
    tokens = tmp_path / "tokens"
    tokens.write_text("alice not-a-digest\n")
    tokens.chmod(0o600)
    status, out = check(
        capsys, "--listen", "127.0.0.1:50051", "--journal-url", f"sqlite:///{tmp_path}/j.db",
        "--replica-id", "a", "--tokens-file", tokens, "--tls-cert", certs.cert("coordinator"),
        "--tls-key", key, "--tls-ca", certs.ca,
    )  # fmt: skip
    assert status == 2, out
    assert "did you mean TURNWIRE_JOURNAL_URL?)" in line_of(out, "environment")
    assert f"chmod 600 {key}" in line_of(out, "transport security")
    assert "--replica-id needs a PostgreSQL journal" in line_of(out, "replicas")
    assert "digest must be 64 lowercase hex" in line_of(out, "tokens file")
    assert "fix: write it with `turnwire-coordinator tokens add" in line_of(out, "tokens file")
    assert "fix: run `turnwire-coordinator migrate" in line_of(out, "journal")
    assert out.rstrip().endswith("5 problems found; fix them and run again")


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("expired", "expired on"),
        ("other CA", "does not chain to a CA in"),
        ("runner's certificate", "is a runner certificate"),
        ("wrong key", "is not the key of"),
        ("not PEM", "is not a PEM certificate"),
    ],
)
def test_a_certificate_problem_names_the_file_and_the_fix(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    certs: Certs,
    other_certs: Certs,
    expired_certs: Certs,
    journal: str,
    tokens: Path,
    which: str,
    expected: str,
) -> None:
    """Expired, issued by another CA, the other role's, a key that is not its own, not PEM:
    each a problem of the TLS certificate check, with what to do about it."""
    cert, key, ca = certs.cert("coordinator"), certs.key("coordinator"), certs.ca
    if which == "expired":
        cert, key, ca = (
            expired_certs.cert("coordinator"), expired_certs.key("coordinator"), expired_certs.ca
        )  # fmt: skip
    elif which == "other CA":
        cert, key = other_certs.cert("coordinator"), other_certs.key("coordinator")
    elif which == "runner's certificate":
        cert, key = certs.cert("runner-1"), certs.key("runner-1")
    elif which == "wrong key":
        key = certs.key("runner-1")
    else:
        cert = tmp_path / "garbage.pem"
        cert.write_text("not a certificate\n")
    status, out = check(
        capsys, "--listen", "127.0.0.1:50051", "--journal-url", journal, "--tokens-file", tokens,
        "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca,
    )  # fmt: skip
    assert status == 2, out
    finding = line_of(out, "TLS certificate")
    assert "PROBLEM" in finding and expected in finding and "fix:" in finding, finding


def test_plaintext_off_loopback_and_runners_without_a_secret_are_refused(
    capsys: pytest.CaptureFixture[str], journal: str, tokens: Path
) -> None:
    """--plaintext on 0.0.0.0 (and metrics there too), and runners with no
    --runner-secret-file: the start-up rules, every one reported."""
    status, out = check(
        capsys, "--plaintext", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464",
        "--journal-url", journal, "--tokens-file", tokens, "--runner", "r1=127.0.0.1:50061",
    )  # fmt: skip
    assert status == 2, out
    assert "--runner-secret-file" in line_of(out, "transport security")
    assert "not a loopback address" in line_of(out, "listen address")
    assert "not a loopback address" in line_of(out, "metrics address")


def test_a_journal_written_by_newer_code_is_refused_and_an_older_one_needs_migrate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, certs: Certs, tokens: Path
) -> None:
    """SchemaTooNew names the fix (the newer version, or a backup); an older schema says
    run migrate, and with --migrate it passes: serve would upgrade it."""
    newer = f"sqlite:///{tmp_path / 'newer.db'}"
    migrate(newer)
    engine = sa.create_engine(newer)
    with engine.begin() as connection:
        connection.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999_future'"))
    engine.dispose()
    status, out = check(capsys, *good(certs, newer, tokens))
    assert status == 2 and "9999_future" in line_of(out, "journal")
    assert "restore a backup made before the upgrade" in line_of(out, "journal")

    older = f"sqlite:///{tmp_path / 'older.db'}"
    migrate(older, "0005_change_notifications")
    status, out = check(capsys, *good(certs, older, tokens))
    assert status == 2 and "fix: run `turnwire-coordinator migrate" in line_of(out, "journal")
    status, out = check(capsys, *good(certs, older, tokens), "--migrate")
    assert status == 0, out
    assert f"--migrate upgrades it to {head_revision()}" in line_of(out, "journal")


def test_check_config_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, certs: Certs, tokens: Path
) -> None:
    """With --migrate and no journal yet it passes and leaves no file or directory behind."""
    target = tmp_path / "data" / "journal.db"
    status, out = check(capsys, *good(certs, f"sqlite:///{target}", tokens), "--migrate")
    assert status == 0, out
    assert "--migrate creates it" in line_of(out, "journal")
    assert not target.parent.exists()


def test_a_malformed_journal_url_and_an_unknown_database_are_problems(
    capsys: pytest.CaptureFixture[str], certs: Certs, tokens: Path
) -> None:
    """A URL that does not parse, and a database kind Turnwire has no backend for."""
    for url, expected in (("not a url", "invalid journal URL"), ("mysql://db/x", "mysql")):
        status, out = check(capsys, *good(certs, url, tokens))
        assert status == 2 and expected in line_of(out, "journal"), out


def test_the_same_rules_stop_start_up(tmp_path: Path, journal: str, tokens: Path) -> None:
    """serve without --check-config refuses the plaintext 0.0.0.0 listen address with the
    message --check-config prints (one rule, two callers), exit 2."""
    status = main(["serve", "--plaintext", "--listen", "0.0.0.0:50051",
                   "--journal-url", journal, "--tokens-file", str(tokens)])  # fmt: skip
    assert status == 2
    assert os.listdir(tmp_path) == ["journal.db", "tokens"]
