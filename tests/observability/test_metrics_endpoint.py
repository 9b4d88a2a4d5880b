"""The /metrics endpoint's rules (issue 13): bad --metrics-listen values exit 2 with
a clear message on both services, plaintext metrics stay on loopback, and with
TLS material the endpoint speaks HTTPS only (scraped with the deployment CA)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator_svc.__main__ import main as coordinator_main
from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.metrics import CoordinatorState, JournalCounts
from coordinator_svc.storage import migrate
from runner_svc.__main__ import main as runner_main
from tests.support import runner_access
from turnwire.certs import CA_CERT, issue_deployment
from turnwire.observability.metrics_check import scrape
from turnwire.observability.metrics_http import new_registry, start_metrics_endpoint
from turnwire.transport_security import SecurityConfigError, TlsMaterial

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1", "127.0.0.1:99999", ":9100"])
def test_coordinator_refuses_a_malformed_metrics_listen_with_exit_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        coordinator_main(["serve", "--metrics-listen", value])
    assert exited.value.code == 2
    assert "--metrics-listen" in capsys.readouterr().err


def test_runner_refuses_a_malformed_metrics_listen_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        runner_main(["serve", "--store", str(tmp_path / "s.db"), "--metrics-listen", "nope"])
    assert exited.value.code == 2
    assert "--metrics-listen must be HOST:PORT" in capsys.readouterr().err


def test_plaintext_metrics_off_loopback_are_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without TLS a non-loopback address is refused (exit 2) and nothing is opened:
    no journal, no store. Nothing binds it either: the check comes first."""
    journal = tmp_path / "journal.db"
    code = coordinator_main(
        [
            "serve",
            "--plaintext",
            "--journal-url",
            f"sqlite:///{journal}",
            "--metrics-listen",
            "0.0.0.0:0",
        ]
    )
    assert code == 2
    assert "is not a loopback address" in capsys.readouterr().err
    assert not journal.exists()
    store = tmp_path / "store.db"
    code = runner_main(
        [
            "serve",
            "--store",
            str(store),
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
            "--coordinator-secret-file",
            str(runner_access.secret_file()),
            "--metrics-listen",
            "0.0.0.0:0",
        ]
    )
    assert code == 2
    assert "is not a loopback address" in capsys.readouterr().err
    assert not store.exists()


def test_with_tls_material_metrics_are_served_over_https_only(tmp_path: Path) -> None:
    issue_deployment(tmp_path)
    tls = TlsMaterial.from_files(
        tmp_path / "coordinator.pem", tmp_path / "coordinator.key", tmp_path / CA_CERT
    )
    registry = new_registry()
    Counter("turnwire_probe_total", "A probe.", registry=registry).inc(3)
    address_file = tmp_path / "metrics.addr"
    endpoint = start_metrics_endpoint("127.0.0.1:0", registry, tls=tls, address_file=address_file)
    try:
        assert endpoint.url == f"https://{endpoint.address}/metrics"
        assert address_file.read_text().strip() == endpoint.address
        text = scrape(endpoint.address, ca_file=tmp_path / CA_CERT)
        assert "turnwire_probe_total 3.0" in text
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=5).read()
        with pytest.raises(urllib.error.URLError) as untrusted:
            urllib.request.urlopen(endpoint.url, timeout=5, context=ssl.create_default_context())
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    finally:
        endpoint.stop()


def test_a_taken_metrics_port_is_an_error_not_a_shared_port(tmp_path: Path) -> None:
    first = start_metrics_endpoint("127.0.0.1:0", new_registry())
    try:
        with pytest.raises(Exception, match="cannot listen on") as taken:
            start_metrics_endpoint(first.address, new_registry())
        assert not isinstance(taken.value, SecurityConfigError)
    finally:
        first.stop()


def test_a_restarted_process_takes_its_metrics_port_back_after_a_scrape() -> None:
    """A scrape leaves the server's side of its connection in TIME_WAIT (the server
    closes first); a service restarted within that minute must still bind its port
    (SO_REUSEADDR: Linux refuses it only while a socket listens there)."""
    first = start_metrics_endpoint("127.0.0.1:0", new_registry())
    address = first.address
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            assert reply.status == 200
    finally:
        first.stop()
    again = start_metrics_endpoint(address, new_registry())
    again.stop()


def _journal_scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The journal families as a scrape shows them, through the coordinator's collector."""
    registry = new_registry()
    state = CoordinatorState(JournalCounts(url))
    registry.register(state)
    try:
        text = generate_latest(registry).decode()
    finally:
        state.close()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_an_unreadable_journal_shows_no_counts_rather_than_zeros(tmp_path: Path) -> None:
    """A journal the scrape cannot count (here: never migrated) is reported as
    unreadable, and the operation families carry no figure instead of false zeros."""
    found = _journal_scrape(f"sqlite:///{tmp_path / 'not-migrated.db'}")
    assert found["turnwire_journal_readable"] == [({}, 0.0)]
    assert found["turnwire_journal_read_failures_total"] == [({}, 1.0)]
    assert "turnwire_operations" not in found
    assert "turnwire_operations_unknown" not in found


@pytest.mark.postgres
def test_operations_are_counted_on_a_postgresql_journal(postgres_url: str) -> None:
    migrate(postgres_url)
    found = _journal_scrape(postgres_url)
    assert found["turnwire_journal_readable"] == [({}, 1.0)]
    # Every (state, execution) pair, each zero in an empty journal.
    assert len(found["turnwire_operations"]) == len(OpState) * len(Execution)
    assert {value for _, value in found["turnwire_operations"]} == {0.0}
