"""The restart sweep: end what earlier incarnations' executors left running (R10).

Runs once at runner start, after the store is open (so this incarnation owns
it and no earlier one can write or launch) and before anything is served. For
every executor process group an earlier incarnation recorded at launch and
never saw settle, it asks the OS whether that exact group still runs
(runner_svc/executors/groups.py: the leader's start time, or the executor's
marker, so a reused pid is never signalled); if so it SIGKILLs the whole
group, waits until it is gone (bounded), logs a line an operator can act on,
and records it as ended. A group that will not die stops the start
(ExecutorSweepError): serving on top of it could exceed the slot limits and
let its side effects land after its turn was reported INTERRUPTED.

The turn's row is not rewritten: a row an earlier incarnation left LAUNCHING
or RUNNING reads INTERRUPTED, execution UNKNOWN or STARTED (R3, §6), which
is now the whole truth: nothing of it runs any more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from runner_svc.core.model import RowState
from runner_svc.executors import groups
from runner_svc.storage.executor_records import ExecutorRecords, RecordedExecutor
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from turnwire.observability.logs import turn_extra

log = logging.getLogger("runner_svc.executor_sweep")

WAIT_SECONDS = 10.0


class ExecutorSweepError(RuntimeError):
    """An earlier incarnation's executor still runs after SIGKILL: refuse to serve."""


@dataclass(frozen=True)
class EndedExecutor:
    operation_id: str
    incarnation_id: str
    pgid: int
    pids: tuple[int, ...]


def end_earlier_executors(
    store: SqliteRunnerStore,
    *,
    wait_seconds: float = WAIT_SECONDS,
    clock: Callable[[], float] = time.time,
) -> list[EndedExecutor]:
    """End every executor group earlier incarnations left running; return those ended."""
    records = store.executor_records()
    records.close_settled(clock())
    boot = groups.boot_id()
    ended = []
    for record in records.left_open():
        if record.boot_id != boot:
            records.mark_ended(record.record_id, "gone: the machine rebooted since", clock())
            continue
        marker = groups.executor_marker(record.incarnation_id, record.operation_id)
        check = groups.end_group(record.pgid, record.start_time, marker, wait_seconds)
        if check.state is groups.GroupState.OURS:
            _ended(records, record, check, store.incarnation_id, wait_seconds, clock())
            ended.append(
                EndedExecutor(record.operation_id, record.incarnation_id, record.pgid, check.pids)
            )
        elif check.state is groups.GroupState.FOREIGN:
            log.warning(
                "executor of operation %s (incarnation %s): its process group %d now holds "
                "processes without its marker %s=%s (pids %s); left alone, check them",
                record.operation_id,
                record.incarnation_id,
                record.pgid,
                groups.MARKER_VARIABLE,
                marker,
                list(check.pids),
                extra=turn_extra(record.operation_id, incarnation=record.incarnation_id),
            )
            records.mark_ended(record.record_id, "gone: its group id is reused", clock())
        else:
            records.mark_ended(record.record_id, "gone before this incarnation started", clock())
    return ended


def _ended(
    records: ExecutorRecords,
    record: RecordedExecutor,
    check: groups.GroupCheck,
    incarnation_id: str,
    wait_seconds: float,
    now: float,
) -> None:
    execution = "STARTED" if record.operation_state is RowState.RUNNING else "UNKNOWN"
    if not check.ended:
        raise ExecutorSweepError(
            f"executor of operation {record.operation_id} (incarnation "
            f"{record.incarnation_id}, process group {record.pgid}, pids {list(check.pids)}) "
            f"still runs {wait_seconds:g}s after SIGKILL; refusing to serve on top of it: "
            "end those processes, then start the runner again"
        )
    log.warning(
        "executor of operation %s (incarnation %s, process group %d, pids %s) outlived its "
        "runner: killed the group (SIGKILL) before serving. The turn reads INTERRUPTED, "
        "execution %s; whatever it did before it was killed stands: check its side effects "
        "before running the turn again",
        record.operation_id,
        record.incarnation_id,
        record.pgid,
        list(check.pids),
        execution,
        extra=turn_extra(record.operation_id, incarnation=record.incarnation_id),
    )
    how = f"killed (SIGKILL to group {record.pgid}) at the start of incarnation {incarnation_id}"
    records.mark_ended(record.record_id, how, now)
