"""Performing a decision's commands (the I/O half of the engine's step).

Each command becomes runner calls (``calls.RunnerCalls``) whose replies come
back as events for the next step; ScheduleAt goes back to the engine's timers.
A command for a runner that is not a member of the runner set (removed, or
never added) is not sent: it is answered ``NotAMember`` and the core decides
(PROTOCOL.md §11 M6).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide_member import not_a_member
from coordinator_svc.core.events import (
    CancelFailed,
    Event,
    PreflightFailed,
    ReleaseDone,
)
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.dispatcher.calls import RunnerCalls
from coordinator_svc.dispatcher.spans import command_span

log = logging.getLogger("coordinator_svc.dispatcher")


class CommandPerformer:
    """``bump``: count one more fruitless try of an operation (its backoff
    streak) and return the streak; ``schedule_at``: look at it again then."""

    def __init__(
        self,
        calls: RunnerCalls,
        bump: Callable[[str], int],
        schedule_at: Callable[[OperationRecord, datetime], None],
    ) -> None:
        self._calls = calls
        self._bump = bump
        self._schedule_at = schedule_at

    async def perform(self, record: OperationRecord, command: cmd.Command) -> list[Event]:
        # The runner call inside a span of the turn's trace (docs/TRACING.md).
        with command_span(record, command):
            return await self._perform(record, command)

    async def _perform(self, record: OperationRecord, command: cmd.Command) -> list[Event]:
        op_id = record.operation_id
        runner = getattr(command, "runner", None)
        if runner is not None and not self._calls.configured(runner):
            return self._not_a_member(record, command, runner)
        match command:
            case cmd.Preflight(runner=runner):
                answer = await self._calls.preflight(runner, op_id, record.attempt_count)
                # Tie the answer to the transition it was asked after (C8a).
                answer = replace(answer, asked_sequence=record.last_event_sequence)
                if isinstance(answer, PreflightFailed):
                    answer = replace(answer, retry_streak=self._bump(op_id))
                return [answer]
            case cmd.Dispatch():
                return [await self._calls.dispatch(record, command)]
            case cmd.Cancel():
                reply = await self._calls.cancel(record, command)
                if command.give_up is not None:  # the reply goes back to core.give_up
                    reply = replace(reply, give_up=command.give_up)
                if isinstance(reply, CancelFailed):
                    reply = replace(reply, retry_streak=self._bump(op_id))
                return [reply]
            case cmd.Release():
                released = await self._calls.release(op_id, command)
                return [ReleaseDone()] if released and command.record else []
            case cmd.ScheduleAt(at=at):
                self._schedule_at(record, at)
                return []
            case cmd.Alarm(reason=reason, detail=detail):
                log.warning("%s: protocol alarm %s: %s", op_id, reason, detail)
                return []
        return []  # pragma: no cover - Command is closed

    def _not_a_member(
        self, record: OperationRecord, command: cmd.Command, runner: str
    ) -> list[Event]:
        """§11 M6: nothing is sent to a runner that is not a member; the core decides."""
        answer = not_a_member(record, command)
        log.info("%s: runner %s is not a member; nothing sent", record.operation_id, runner)
        return [answer] if answer is not None else []
