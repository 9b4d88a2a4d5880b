"""Counters the dispatcher keeps (read by tests and bench/, never by decisions).

Names:
    rpc_calls[method]          coordinator -> runner calls, by RunnerService method
                               ("GetOperationStatus", "BatchGetOperationStatus",
                               "Dispatch", "Cancel", "Release", "WatchOperations",
                               "StreamOutput": the output relay's, PROTOCOL.md §12)
    commits                    journal commits this dispatcher made
    replays                    attempts sent while an earlier one was unresolved
    reconciled_without_resend  DISPATCH_UNKNOWN resolved by adopting the runner's row
    ambiguous                  transitions into DISPATCH_UNKNOWN
    alarms                     protocol alarms (C10 conflicts, contract violations)
    stale_versions             commits retried after StaleVersion
    leases_lost                operations abandoned after LeaseLost
    releases_carried           Releases that rode on a Dispatch
    first_attempts_with_acceptance
                               first attempts written ahead with the acceptance
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field


@dataclass
class DispatcherMetrics:
    rpc_calls: collections.Counter[str] = field(default_factory=collections.Counter)
    commits: int = 0
    replays: int = 0
    reconciled_without_resend: int = 0
    ambiguous: int = 0
    alarms: int = 0
    stale_versions: int = 0
    leases_lost: int = 0
    # Releases that rode on a Dispatch instead of a Release call (issue 10).
    releases_carried: int = 0
    # First attempts written ahead together with their turn's acceptance (issue 10).
    first_attempts_with_acceptance: int = 0

    def count_tags(self, tags: frozenset[str]) -> None:
        self.replays += "replay" in tags
        self.reconciled_without_resend += "reconciled" in tags
        self.ambiguous += "ambiguous" in tags
        self.alarms += "alarm" in tags

    @property
    def total_rpcs(self) -> int:
        return sum(self.rpc_calls.values())
