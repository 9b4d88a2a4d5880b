"""Which metric families each service serves, and a scrape that checks them (issue 13).

The demo scrapes every process at the end of its run and fails loudly if a
family is missing; the tests check the same lists. docs/METRICS.md documents
each family named here.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from turnwire.observability.metrics_http import METRICS_PATH

if TYPE_CHECKING:
    from turnwire.deployment import LocalDeployment

# Served by both services.
COMMON_FAMILIES = ("turnwire_grpc_server_handling_seconds",)

COORDINATOR_FAMILIES = (
    "turnwire_operations",
    "turnwire_operations_unknown",
    "turnwire_operations_finished",
    "turnwire_attempts",
    "turnwire_submit_replays",
    "turnwire_dispatch_replays",
    "turnwire_reconciled_without_resend",
    "turnwire_dispatch_unknown",
    "turnwire_protocol_alarms",
    "turnwire_journal_stale_versions",
    "turnwire_leases_lost",
    "turnwire_scheduler_runner_slots",
    "turnwire_scheduler_runner_slots_in_use",
    "turnwire_queue_depth",
    "turnwire_turns_in_flight",
    "turnwire_journal_commit_seconds",
    "turnwire_journal_readable",
    "turnwire_journal_read_failures",
    "turnwire_grpc_client_handling_seconds",
    *COMMON_FAMILIES,
)

RUNNER_FAMILIES = (
    "turnwire_runner_slots",
    "turnwire_runner_slots_in_use",
    "turnwire_runner_accepting",
    "turnwire_runner_info",
    "turnwire_runner_dispatches",
    "turnwire_runner_refused_callers",
    "turnwire_store_commit_seconds",
    *COMMON_FAMILIES,
)


@dataclass(frozen=True)
class FamilySummary:
    """One family as a scrape showed it: its type, how many series, their sum
    (for a histogram: of its _count series, i.e. how many were observed)."""

    name: str
    kind: str
    series: int
    total: float


def summarize(text: str) -> dict[str, FamilySummary]:
    """Every family in an exposition text, by name (counters without ``_total``)."""
    found: dict[str, FamilySummary] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            counted = [s for s in family.samples if s.name.endswith("_count")]
        else:
            counted = [s for s in family.samples if not s.name.endswith("_created")]
        found[family.name] = FamilySummary(
            family.name, family.type, len(counted), sum(s.value for s in counted)
        )
    return found


def missing_families(text: str, expected: Sequence[str]) -> list[str]:
    """The expected families the exposition text does not declare."""
    present = summarize(text)
    return [name for name in expected if name not in present]


def scrape(address: str, ca_file: Path | None = None, timeout: float = 10.0) -> str:
    """GET ``/metrics`` at HOST:PORT: HTTPS trusting ``ca_file`` when given, else HTTP."""
    if ca_file is None:
        url, context = f"http://{address}{METRICS_PATH}", None
    else:
        url = f"https://{address}{METRICS_PATH}"
        context = ssl.create_default_context(cafile=str(ca_file))
    with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
        body: bytes = reply.read()
    return body.decode("utf-8")


@dataclass(frozen=True)
class ProcessMetrics:
    """One process's scrape: every family it served, and the expected ones it did not."""

    name: str
    address: str
    families: dict[str, FamilySummary]
    missing: tuple[str, ...]
    expected: int
    error: str = ""


@dataclass(frozen=True)
class MetricsReport:
    processes: tuple[ProcessMetrics, ...]

    @property
    def missing(self) -> list[str]:
        """``process: family`` for every expected family not served (or not scraped)."""
        return [f"{p.name}: {family}" for p in self.processes for family in p.missing]

    def render(self) -> str:
        lines = ["metrics (each process's /metrics, scraped at the end of the run):"]
        for process in self.processes:
            found = process.expected - len(process.missing)
            head = f"  {process.name:<12} {found:>2}/{process.expected} families"
            if process.error:
                lines.append(f"{head}  SCRAPE FAILED at {process.address}: {process.error}")
                continue
            lines.append(f"{head}  {_figures(process)}")
        return "\n".join(lines)


def _figures(process: ProcessMetrics) -> str:
    """A few of the figures an operator looks at first, from the families' sums."""
    fams = process.families

    def total(name: str) -> int:
        summary = fams.get(name)
        return int(summary.total) if summary is not None else 0

    if "turnwire_operations" in fams:
        return (
            f"attempts {total('turnwire_attempts')}, submit replays "
            f"{total('turnwire_submit_replays')}, dispatch replays "
            f"{total('turnwire_dispatch_replays')}, reconciled without resend "
            f"{total('turnwire_reconciled_without_resend')}, unknown now "
            f"{total('turnwire_operations_unknown')}, journal writes "
            f"{total('turnwire_journal_commit_seconds')}"
        )
    return (
        f"dispatches {total('turnwire_runner_dispatches')}, store commits "
        f"{total('turnwire_store_commit_seconds')}, RPCs "
        f"{total('turnwire_grpc_server_handling_seconds')}"
    )


def check_process(
    name: str, address: str, expected: Sequence[str], ca_file: Path | None
) -> ProcessMetrics:
    """Scrape one process and compare with the families it must serve."""
    try:
        text = scrape(address, ca_file)
    except Exception as exc:  # any failure to scrape is reported as such, never skipped
        return ProcessMetrics(name, address, {}, tuple(expected), len(expected), str(exc))
    families = summarize(text)
    missing = tuple(family for family in expected if family not in families)
    return ProcessMetrics(name, address, families, missing, len(expected))


def scrape_deployment(deployment: LocalDeployment) -> MetricsReport:
    """Scrape the coordinator and every runner of a deployment started with ``metrics``."""
    targets: list[tuple[str, Sequence[str]]] = [("coordinator", COORDINATOR_FAMILIES)]
    targets += [(slot.name, RUNNER_FAMILIES) for slot in deployment.runners]
    processes = []
    for name, expected in targets:
        try:
            address = deployment.metrics_address(name)
        except OSError as exc:
            processes.append(
                ProcessMetrics(name, "?", {}, tuple(expected), len(expected), f"no address: {exc}")
            )
            continue
        processes.append(check_process(name, address, expected, deployment.ca_file))
    return MetricsReport(tuple(processes))
