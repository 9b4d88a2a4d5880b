"""The fault proxy's control API (turnwire.faults.v1.FaultControlService).

Server side: :func:`start_control_server` serves a RuleSet on loopback.
Client side: :class:`FaultControlClient` (used by the CLI and by chaos code
that talks to a proxy running in another process).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Literal

import grpc

from turnwire.common.v1 import errors_pb2
from turnwire.errors import abort
from turnwire.faults.loopback import require_loopback
from turnwire.faults.rules import (
    Action,
    FaultStats,
    Phase,
    Rule,
    RuleError,
    RuleSet,
    RuleStatus,
)
from turnwire.faults.v1 import faults_pb2, faults_pb2_grpc
from turnwire.serving import RunningServer, start_server

SERVICE_NAME: str = faults_pb2.DESCRIPTOR.services_by_name["FaultControlService"].full_name

_ACTION_TO_PROTO = {
    Action.DROP_REQUEST: faults_pb2.FAULT_ACTION_DROP_REQUEST,
    Action.DROP_RESPONSE: faults_pb2.FAULT_ACTION_DROP_RESPONSE,
    Action.DELAY_REQUEST: faults_pb2.FAULT_ACTION_DELAY_REQUEST,
    Action.DELAY_RESPONSE: faults_pb2.FAULT_ACTION_DELAY_RESPONSE,
    Action.RESET: faults_pb2.FAULT_ACTION_RESET,
    Action.BLACKHOLE: faults_pb2.FAULT_ACTION_BLACKHOLE,
}
_ACTION_FROM_PROTO = {value: key for key, value in _ACTION_TO_PROTO.items()}
_PHASE_TO_PROTO = {
    Phase.REQUEST: faults_pb2.FAULT_PHASE_REQUEST,
    Phase.RESPONSE: faults_pb2.FAULT_PHASE_RESPONSE,
}
_OptionalField = Literal["method", "operation_id", "nth", "count", "probability", "duration_ms"]
_OPTIONAL_FIELDS: tuple[_OptionalField, ...] = (
    "method",
    "operation_id",
    "nth",
    "count",
    "probability",
    "duration_ms",
)


def rule_to_proto(rule: Rule) -> faults_pb2.FaultRule:
    message = faults_pb2.FaultRule(
        action=_ACTION_TO_PROTO[rule.action],
        delay_ms=rule.delay_ms,
        phase=_PHASE_TO_PROTO[rule.at],
        messages=rule.messages,
    )
    for name in _OPTIONAL_FIELDS:
        value = getattr(rule, name)
        if value is not None:
            setattr(message, name, value)
    return message


def rule_from_proto(message: faults_pb2.FaultRule) -> Rule:
    """The Rule a FaultRule describes; RuleError if it makes no sense."""
    action = _ACTION_FROM_PROTO.get(message.action)
    if action is None:
        raise RuleError("rule.action is unset or unknown")
    values: dict[str, Any] = {
        name: getattr(message, name) for name in _OPTIONAL_FIELDS if message.HasField(name)
    }
    at = Phase.RESPONSE if message.phase == faults_pb2.FAULT_PHASE_RESPONSE else Phase.REQUEST
    return Rule(action, delay_ms=message.delay_ms, at=at, messages=message.messages, **values)


def status_to_proto(status: RuleStatus) -> faults_pb2.FaultRuleStatus:
    return faults_pb2.FaultRuleStatus(
        rule_id=status.rule_id,
        rule=rule_to_proto(status.rule),
        hits=status.hits,
        selected=status.selected,
        expired=status.expired,
        text=status.rule.to_text(),
    )


def stats_to_proto(stats: FaultStats) -> faults_pb2.GetStatsResponse:
    return faults_pb2.GetStatsResponse(
        calls_by_method=dict(stats.calls_by_method),
        dropped_requests=stats.dropped_requests,
        dropped_responses=stats.dropped_responses,
        delayed=stats.delayed,
        reset=stats.reset,
        blackholed=stats.blackholed,
    )


def stats_from_proto(message: faults_pb2.GetStatsResponse) -> FaultStats:
    return FaultStats(
        calls_by_method=dict(message.calls_by_method),
        dropped_requests=message.dropped_requests,
        dropped_responses=message.dropped_responses,
        delayed=message.delayed,
        reset=message.reset,
        blackholed=message.blackholed,
    )


class FaultControlServicer(faults_pb2_grpc.FaultControlServiceServicer):
    """Serves one RuleSet: the proxy's, shared by reference."""

    def __init__(self, rules: RuleSet) -> None:
        self._rules = rules

    async def ListRules(
        self, request: faults_pb2.ListRulesRequest, context: Any
    ) -> faults_pb2.ListRulesResponse:
        return faults_pb2.ListRulesResponse(rules=[status_to_proto(s) for s in self._rules.rules()])

    async def AddRule(
        self, request: faults_pb2.AddRuleRequest, context: Any
    ) -> faults_pb2.AddRuleResponse:
        try:
            rule = rule_from_proto(request.rule)
        except RuleError as exc:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                errors_pb2.ERROR_REASON_ARGUMENT_INVALID,
                f"invalid fault rule: {exc}",
                field="rule",
            )
        rule_id = self._rules.add(rule)
        added = next(s for s in self._rules.rules() if s.rule_id == rule_id)
        return faults_pb2.AddRuleResponse(rule=status_to_proto(added))

    async def RemoveRule(
        self, request: faults_pb2.RemoveRuleRequest, context: Any
    ) -> faults_pb2.RemoveRuleResponse:
        return faults_pb2.RemoveRuleResponse(removed=self._rules.remove(request.rule_id))

    async def ClearRules(
        self, request: faults_pb2.ClearRulesRequest, context: Any
    ) -> faults_pb2.ClearRulesResponse:
        return faults_pb2.ClearRulesResponse(removed=self._rules.clear())

    async def GetStats(
        self, request: faults_pb2.GetStatsRequest, context: Any
    ) -> faults_pb2.GetStatsResponse:
        return stats_to_proto(self._rules.stats())


async def start_control_server(listen: str, rules: RuleSet) -> RunningServer:
    """Serve FaultControlService for ``rules`` on a loopback address."""
    require_loopback(listen, "control")
    servicer = FaultControlServicer(rules)
    return await start_server(
        listen,
        lambda server: faults_pb2_grpc.add_FaultControlServiceServicer_to_server(servicer, server),
        (SERVICE_NAME,),
    )


class FaultControlClient:
    """Talks to a proxy's control service (another process, or this one)."""

    def __init__(self, address: str, *, timeout: float = 5.0) -> None:
        require_loopback(address, "control")
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = faults_pb2_grpc.FaultControlServiceStub(self._channel)
        self._timeout = timeout

    async def add(self, rule: Rule) -> RuleStatus:
        reply = await self._stub.AddRule(
            faults_pb2.AddRuleRequest(rule=rule_to_proto(rule)), timeout=self._timeout
        )
        return _status_from_proto(reply.rule)

    async def list(self) -> list[RuleStatus]:
        reply = await self._stub.ListRules(faults_pb2.ListRulesRequest(), timeout=self._timeout)
        return [_status_from_proto(item) for item in reply.rules]

    async def remove(self, rule_id: int) -> bool:
        reply = await self._stub.RemoveRule(
            faults_pb2.RemoveRuleRequest(rule_id=rule_id), timeout=self._timeout
        )
        return bool(reply.removed)

    async def clear(self) -> int:
        reply = await self._stub.ClearRules(faults_pb2.ClearRulesRequest(), timeout=self._timeout)
        return int(reply.removed)

    async def stats(self) -> FaultStats:
        reply = await self._stub.GetStats(faults_pb2.GetStatsRequest(), timeout=self._timeout)
        return stats_from_proto(reply)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> FaultControlClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _status_from_proto(message: faults_pb2.FaultRuleStatus) -> RuleStatus:
    return RuleStatus(
        rule_id=message.rule_id,
        rule=rule_from_proto(message.rule),
        hits=message.hits,
        selected=message.selected,
        expired=message.expired,
    )
