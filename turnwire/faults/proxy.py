"""A gRPC-aware fault proxy: forwards every call as raw bytes, injecting faults.

The proxy never decodes a message (identity serializers both ways), so it
forwards any service. It keeps the caller's metadata (minus hop-specific
headers), propagates the caller's remaining deadline, and hands back the
upstream's status, details, initial and trailing metadata untouched, so a
typed refusal (``grpc-status-details-bin`` with a google.rpc.ErrorInfo)
arrives exactly as the upstream sent it. Which calls to break is a
:class:`~turnwire.faults.rules.RuleSet`, changeable while the proxy runs.

In-process use (chaos scenarios, demos)::

    proxy = await start_proxy("127.0.0.1:50051")      # listens on 127.0.0.1:<free>
    proxy.add_rule("drop-response method=Dispatch nth=1")
    ... point the coordinator at proxy.address ...
    print(proxy.stats())
    await proxy.stop()

The proxy's port serves nothing of its own, not even health or reflection:
those calls are forwarded (and faulted) like any other, so a health probe
through a blackholed proxy fails the way it would across a real partition.
Readiness of the proxy itself: its announced address, or the control
server's health service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import descriptor_pool

# Imported for their side effect: their methods' shapes (unary or streaming)
# land in the default descriptor pool, where the proxy looks them up.
from turnwire.coordinator.v1 import coordinator_pb2 as _coordinator_pb2  # noqa: F401
from turnwire.faults import control
from turnwire.faults.loopback import require_loopback
from turnwire.faults.outcomes import FAULT_CODE, fault_details, log_fault
from turnwire.faults.rules import Action, Decision, FaultStats, Rule, RuleSet, parse_rule
from turnwire.runner.v1 import runner_pb2 as _runner_pb2  # noqa: F401
from turnwire.secure_channels import channel_credentials, server_credentials
from turnwire.serving import NO_PORT_REUSE, AddressInUseError, RunningServer, split_host_port
from turnwire.transport_security import TlsMaterial

Metadata = tuple[tuple[str, str | bytes], ...]

# Hop-by-hop or transport-owned headers: grpc sets them per connection, and
# core refuses some of them from application code.
_HOP_HEADERS = frozenset(
    {
        "user-agent",
        "te",
        "content-type",
        "content-length",
        "host",
        "connection",
        "transfer-encoding",
        "accept-encoding",
        "grpc-timeout",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-status",
        "grpc-message",
    }
)
# The proxy relays any size the two ends accept, and never retries by itself:
# a retry would be a second delivery nobody asked for. An upstream that
# restarts on the same loopback port (a chaos scenario's runner) is
# reconnected to within a second, not after grpc's default backoff of minutes.
_SIZE_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)
_CHANNEL_OPTIONS = (
    *_SIZE_OPTIONS,
    ("grpc.enable_retries", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
_SERVER_OPTIONS = _SIZE_OPTIONS


def relayable(metadata: Iterable[tuple[str, str | bytes]] | None) -> Metadata:
    """Metadata minus the hop-specific headers."""
    if metadata is None:
        return ()
    return tuple(
        (key, value)
        for key, value in metadata
        if not key.startswith(":") and key.lower() not in _HOP_HEADERS
    )


def method_shape(method: str) -> tuple[bool, bool]:
    """(client_streaming, server_streaming) of a method; unknown methods are unary."""
    name = method.strip("/").replace("/", ".")
    try:
        found = descriptor_pool.Default().FindMethodByName(name)
    except KeyError:
        return False, False
    return bool(found.client_streaming), bool(found.server_streaming)


class _Forwarder:
    """Forwards each call through the one upstream channel, applying the rules."""

    def __init__(self, channel: grpc.aio.Channel, rules: RuleSet) -> None:
        self._channel = channel
        self._rules = rules
        # Calls whose handler has not finished (held, forwarding or relaying).
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def unary(self, method: str, request: bytes, context: Any) -> bytes:
        decision = self._rules.decide(method, request)
        await _before_forward(decision, method, request, context)
        call = self._channel.unary_unary(method)(
            request,
            metadata=relayable(context.invocation_metadata()),
            timeout=context.time_remaining(),
        )
        try:
            response: bytes = await call
        except grpc.aio.AioRpcError as error:
            await _after_reply(decision, method, request, context, error.code().name)
            await _relay_error(error, context)
        await _after_reply(decision, method, request, context, "OK")
        await _send_initial(context, await call.initial_metadata())
        context.set_trailing_metadata(relayable(await call.trailing_metadata()))
        return response

    async def server_stream(self, method: str, request: bytes, context: Any) -> None:
        decision = self._rules.decide(method, request)
        await _before_forward(decision, method, request, context)
        call = self._channel.unary_stream(method)(
            request,
            metadata=relayable(context.invocation_metadata()),
            timeout=context.time_remaining(),
        )
        await _relay_stream(call, decision, method, request, context)

    async def bidi_stream(self, method: str, requests: AsyncIterator[bytes], context: Any) -> None:
        # The request stream is not read before forwarding, so rules see no
        # operation id here: only method selectors apply.
        decision = self._rules.decide(method, b"")
        await _before_forward(decision, method, b"", context)
        call = self._channel.stream_stream(method)(
            requests,
            metadata=relayable(context.invocation_metadata()),
            timeout=context.time_remaining(),
        )
        await _relay_stream(call, decision, method, b"", context)


async def _before_forward(
    decision: Decision | None, method: str, request: bytes, context: Any
) -> None:
    """Faults that act before the upstream sees the request."""
    if decision is None:
        return
    action = decision.action
    if decision.fails_before_forward:
        log_fault(decision, method, request, "not forwarded; caller gets UNAVAILABLE")
        await context.abort(FAULT_CODE, fault_details(decision))
    elif action is Action.BLACKHOLE:
        hold = decision.hold_seconds
        limit = "the caller's deadline" + ("" if hold is None else f" or {hold:.3f}s")
        log_fault(decision, method, request, f"holding, never forwarded, until {limit}")
        await _hold(hold)
        await context.abort(FAULT_CODE, fault_details(decision))
    elif action is Action.DELAY_REQUEST:
        log_fault(decision, method, request, f"request held {decision.rule.delay_ms}ms")
        await asyncio.sleep(decision.rule.delay_ms / 1000.0)


async def _hold(seconds: float | None) -> None:
    """Wait ``seconds``, or until grpc cancels the call (caller deadline or cancel)."""
    if seconds is None:
        await asyncio.Event().wait()
    else:
        await asyncio.sleep(seconds)


async def _after_reply(
    decision: Decision | None, method: str, request: bytes, context: Any, upstream: str
) -> None:
    """Faults that act once the upstream has answered (it acted)."""
    if decision is None:
        return
    if decision.cuts_response:
        log_fault(
            decision, method, request, f"upstream replied {upstream}; caller gets UNAVAILABLE"
        )
        await context.abort(FAULT_CODE, fault_details(decision))
    elif decision.action is Action.DELAY_RESPONSE:
        log_fault(
            decision,
            method,
            request,
            f"upstream replied {upstream}; reply held {decision.rule.delay_ms}ms",
        )
        await asyncio.sleep(decision.rule.delay_ms / 1000.0)


async def _relay_error(error: grpc.aio.AioRpcError, context: Any) -> None:
    """End the call with the upstream's status, details and metadata, unchanged."""
    await _send_initial(context, error.initial_metadata())
    await context.abort(error.code(), error.details() or "", relayable(error.trailing_metadata()))


async def _send_initial(context: Any, metadata: Any) -> None:
    headers = relayable(metadata)
    if headers:
        await context.send_initial_metadata(headers)


async def _relay_stream(
    call: Any, decision: Decision | None, method: str, request: bytes, context: Any
) -> None:
    """Relay a response stream; drop-response/reset cut it after ``messages`` responses."""
    cut_after = decision.rule.messages if decision and decision.cuts_response else None
    # The response-side fault acts once: at the cut point, or at the first
    # reply event (first message, error or end) for a delay.
    pending = decision if decision is not None and decision.acts_on_reply else None
    passed = 0
    try:
        await _send_initial(context, await call.initial_metadata())
        async for message in call:
            if pending is not None and (cut_after is None or passed >= cut_after):
                fault, pending = pending, None
                if cut_after is not None:
                    call.cancel()
                await _after_reply(fault, method, request, context, f"message {passed + 1}")
            await context.write(message)
            passed += 1
    except grpc.aio.AioRpcError as error:
        await _after_reply(pending, method, request, context, error.code().name)
        await _relay_error(error, context)
    await _after_reply(pending, method, request, context, f"OK after {passed} messages")
    context.set_trailing_metadata(relayable(await call.trailing_metadata()))


class _ForwardingHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Claims every method; its shape comes from the descriptor pool."""

    def __init__(self, forwarder: _Forwarder) -> None:
        self._forwarder = forwarder

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        forwarder = self._forwarder
        client_streaming, server_streaming = method_shape(method)
        if client_streaming:

            async def bidi(requests: AsyncIterator[bytes], context: Any) -> None:
                with _counted(forwarder):
                    await forwarder.bidi_stream(method, requests, context)

            return grpc.stream_stream_rpc_method_handler(bidi)
        if server_streaming:

            async def stream(request: bytes, context: Any) -> None:
                with _counted(forwarder):
                    await forwarder.server_stream(method, request, context)

            return grpc.unary_stream_rpc_method_handler(stream)

        async def unary(request: bytes, context: Any) -> bytes:
            with _counted(forwarder):
                return await forwarder.unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


@contextmanager
def _counted(forwarder: _Forwarder) -> Iterator[None]:
    forwarder.in_flight += 1
    forwarder.idle.clear()
    try:
        yield
    finally:
        forwarder.in_flight -= 1
        if not forwarder.in_flight:
            forwarder.idle.set()


@dataclass
class FaultProxy:
    """A running fault proxy; change its rules through ``rules`` or the helpers."""

    upstream: str
    rules: RuleSet
    server: grpc.aio.Server
    bound: str
    channel: grpc.aio.Channel
    forwarder: _Forwarder
    control_server: RunningServer | None = None

    @property
    def address(self) -> str:
        """Where callers connect (HOST:PORT)."""
        return self.bound

    @property
    def control_address(self) -> str | None:
        """Where the FaultControlService listens, if started."""
        return None if self.control_server is None else self.control_server.address

    @property
    def calls_in_flight(self) -> int:
        """Calls the proxy is still handling (held, forwarding or relaying)."""
        return self.forwarder.in_flight

    async def wait_idle(self) -> None:
        """Return once no call is in flight (bound it with asyncio.wait_for)."""
        await self.forwarder.idle.wait()

    def add_rule(self, rule: Rule | str) -> int:
        """Add a rule (a Rule or its text form); returns its id."""
        return self.rules.add(parse_rule(rule) if isinstance(rule, str) else rule)

    def remove_rule(self, rule_id: int) -> bool:
        return self.rules.remove(rule_id)

    def clear_rules(self) -> int:
        return self.rules.clear()

    def stats(self) -> FaultStats:
        return self.rules.stats()

    async def stop(self, grace: float | None = None) -> None:
        """Stop both servers (in-flight calls are cancelled after ``grace``), then the channel."""
        if self.control_server is not None:
            await self.control_server.stop(grace)
        await self.server.stop(grace)
        await self.channel.close()

    async def __aenter__(self) -> FaultProxy:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def _start_forwarding_server(
    listen: str, handler: _ForwardingHandler, tls: TlsMaterial | None = None
) -> tuple[grpc.aio.Server, str]:
    """A server whose only handler forwards; refuses a port in use like turnwire.serving."""
    server = grpc.aio.server(options=(*NO_PORT_REUSE, *_SERVER_OPTIONS))
    server.add_generic_rpc_handlers((handler,))
    try:
        port = (
            server.add_insecure_port(listen)
            if tls is None
            else server.add_secure_port(listen, server_credentials(tls, require_client_cert=True))
        )
    except RuntimeError as exc:
        raise AddressInUseError(f"cannot listen on {listen}: {exc}") from exc
    if port == 0:
        raise AddressInUseError(f"cannot listen on {listen}")
    host, _ = split_host_port(listen)
    await server.start()
    return server, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def start_proxy(
    upstream: str,
    *,
    listen: str = "127.0.0.1:0",
    rules: RuleSet | None = None,
    seed: int = 0,
    control_listen: str | None = None,
    tls: TlsMaterial | None = None,
) -> FaultProxy:
    """Start a fault proxy to ``upstream`` (and its control service if asked).

    Both addresses must be loopback (:class:`NonLoopbackAddressError`); a
    listen port in use is refused (turnwire.serving.AddressInUseError). With
    ``tls`` (issue 11) both hops are mutual TLS with that one certificate: callers
    must present one of its CA, and the upstream (a runner) sees the proxy's
    certificate, so the runner must list its CN among its coordinator identities.
    """
    require_loopback(listen, "listen")
    require_loopback(upstream, "upstream")
    if control_listen is not None:
        require_loopback(control_listen, "control")
    rule_set = rules if rules is not None else RuleSet(seed=seed)
    channel = (
        grpc.aio.insecure_channel(upstream, options=_CHANNEL_OPTIONS)
        if tls is None
        else grpc.aio.secure_channel(upstream, channel_credentials(tls), options=_CHANNEL_OPTIONS)
    )
    forwarder = _Forwarder(channel, rule_set)
    try:
        server, address = await _start_forwarding_server(listen, _ForwardingHandler(forwarder), tls)
    except BaseException:
        await channel.close()
        raise
    proxy = FaultProxy(upstream, rule_set, server, address, channel, forwarder)
    if control_listen is not None:
        try:
            proxy.control_server = await control.start_control_server(control_listen, rule_set)
        except BaseException:
            await proxy.stop()
            raise
    return proxy
