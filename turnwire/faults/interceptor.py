"""The fault rules applied in-process, as a grpc.aio client interceptor.

Same rules and the same statuses as the proxy, without a hop::

    rules = RuleSet(seed=7)
    rules.add(parse_rule("drop-response method=Dispatch nth=1"))
    channel = grpc.aio.insecure_channel(address, interceptors=fault_interceptors(rules))

- drop-request: raises UNAVAILABLE; nothing is sent.
- drop-response / reset at=response: the call is made and its reply awaited
  (the server acted), then UNAVAILABLE is raised.
- delay-request / delay-response: sleeps (inside the call's deadline: a delay
  past it ends in DEADLINE_EXCEEDED, and a delayed request is then never sent).
- reset (at=request): UNAVAILABLE "connection reset"; nothing is sent.
- blackhole: nothing is sent; sleeps until the call's timeout (then
  DEADLINE_EXCEEDED) or the rule's duration (then UNAVAILABLE).

Streams cut by a rule are returned as async iterators: read them with
``async for`` (grpc's ``read()`` is not available on such a call).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from turnwire.faults.outcomes import FAULT_CODE, fault_details, log_fault
from turnwire.faults.rules import Action, Decision, RuleSet

_DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def _method_name(details: Any) -> str:
    method = details.method
    return method.decode() if isinstance(method, bytes) else str(method)


def _request_bytes(request: Any) -> bytes:
    if isinstance(request, bytes):
        return request
    serialize = getattr(request, "SerializeToString", None)
    return serialize() if callable(serialize) else b""


class _Deadline:
    """The call's deadline on the loop clock (None: the call has no timeout)."""

    def __init__(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        self._clock: Callable[[], float] = loop.time
        self._at = None if timeout is None else loop.time() + timeout

    def remaining(self) -> float | None:
        return None if self._at is None else max(0.0, self._at - self._clock())

    async def sleep(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (None: forever); DEADLINE_EXCEEDED if the deadline comes first."""
        remaining = self.remaining()
        if remaining is not None and (seconds is None or remaining < seconds):
            await asyncio.sleep(remaining)
            raise _error(_DEADLINE, "Deadline Exceeded")
        if seconds is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(seconds)


class _RuleSetInterceptor:
    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules

    def _decide(self, details: Any, request: Any) -> tuple[str, bytes, Decision | None]:
        method, raw = _method_name(details), _request_bytes(request)
        return method, raw, self.rules.decide(method, raw)


class FaultUnaryUnaryInterceptor(_RuleSetInterceptor, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Applies a RuleSet to every unary call of a channel."""

    async def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], client_call_details: Any, request: Any
    ) -> Any:
        method, raw, decision = self._decide(client_call_details, request)
        if decision is None:
            return await continuation(client_call_details, request)
        deadline = _Deadline(client_call_details.timeout)
        await _before_send(decision, method, raw, deadline)
        call = await continuation(_with_timeout(client_call_details, deadline), request)
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            await _after_reply(decision, method, raw, deadline, error.code().name)
            raise
        await _after_reply(decision, method, raw, deadline, "OK")
        return response


class FaultUnaryStreamInterceptor(_RuleSetInterceptor, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Applies a RuleSet to every server-streaming call of a channel."""

    async def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], client_call_details: Any, request: Any
    ) -> Any:
        method, raw, decision = self._decide(client_call_details, request)
        if decision is None:
            return await continuation(client_call_details, request)
        deadline = _Deadline(client_call_details.timeout)
        await _before_send(decision, method, raw, deadline)
        call = await continuation(_with_timeout(client_call_details, deadline), request)
        if decision.action is Action.DELAY_REQUEST:
            return call
        return _faulty_stream(call, decision, method, raw, deadline)


def fault_interceptors(rules: RuleSet) -> list[Any]:
    """Both interceptors for ``rules``: pass the list as a channel's ``interceptors``.

    They are two objects because grpc.aio files each interceptor under the
    first kind it is an instance of, so one class implementing both would
    only ever see unary calls.
    """
    return [FaultUnaryUnaryInterceptor(rules), FaultUnaryStreamInterceptor(rules)]


def _with_timeout(details: Any, deadline: _Deadline) -> Any:
    """The call details with what is left of the timeout after a request-side delay."""
    return grpc.aio.ClientCallDetails(
        details.method,
        deadline.remaining(),
        details.metadata,
        details.credentials,
        details.wait_for_ready,
    )


async def _before_send(decision: Decision, method: str, raw: bytes, deadline: _Deadline) -> None:
    action = decision.action
    if decision.fails_before_forward:
        log_fault(decision, method, raw, "not sent; caller gets UNAVAILABLE")
        raise _error(FAULT_CODE, fault_details(decision))
    if action is Action.BLACKHOLE:
        log_fault(decision, method, raw, "held, never sent")
        await deadline.sleep(decision.hold_seconds)
        raise _error(FAULT_CODE, fault_details(decision))
    if action is Action.DELAY_REQUEST:
        log_fault(decision, method, raw, f"request held {decision.rule.delay_ms}ms")
        await deadline.sleep(decision.rule.delay_ms / 1000.0)


async def _after_reply(
    decision: Decision, method: str, raw: bytes, deadline: _Deadline, reply: str
) -> None:
    if decision.cuts_response:
        log_fault(decision, method, raw, f"server replied {reply}; caller gets UNAVAILABLE")
        raise _error(FAULT_CODE, fault_details(decision))
    if decision.action is Action.DELAY_RESPONSE:
        log_fault(
            decision, method, raw, f"server replied {reply}; reply held {decision.rule.delay_ms}ms"
        )
        await deadline.sleep(decision.rule.delay_ms / 1000.0)


async def _faulty_stream(
    call: Any, decision: Decision, method: str, raw: bytes, deadline: _Deadline
) -> AsyncIterator[Any]:
    """The response stream with the response-side fault applied once."""
    cut_after = decision.rule.messages if decision.cuts_response else None
    pending: Decision | None = decision
    passed = 0
    try:
        async for message in call:
            if pending is not None and (cut_after is None or passed >= cut_after):
                fault, pending = pending, None
                if cut_after is not None:
                    call.cancel()
                await _after_reply(fault, method, raw, deadline, f"message {passed + 1}")
            yield message
            passed += 1
    except grpc.aio.AioRpcError as error:
        if pending is not None:
            await _after_reply(pending, method, raw, deadline, error.code().name)
        raise
    if pending is not None:
        await _after_reply(pending, method, raw, deadline, f"OK after {passed} messages")
