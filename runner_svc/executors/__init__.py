"""Pluggable executors for the runner (PROTOCOL.md R10).

Use `load_executor(spec)` to build one from a spec string; see
`runner_svc.executors.loading` for the valid specs.
"""

from runner_svc.executors.base import (
    ExecutionHandle,
    ExecutionOutcome,
    ExecutionRequest,
    Executor,
    ExecutorProcess,
    ExecutorStartError,
    SettledAtOnce,
    outcome_if_settled,
)
from runner_svc.executors.loading import load_executor

__all__ = [
    "ExecutionHandle",
    "ExecutionOutcome",
    "ExecutionRequest",
    "Executor",
    "ExecutorProcess",
    "ExecutorStartError",
    "SettledAtOnce",
    "load_executor",
    "outcome_if_settled",
]
