"""What every Turnwire client shares: a channel, a bearer token, retried unary calls.

``TurnwireClient`` and ``AdminClient`` (and their asyncio twins) differ only in
their stub and their calls; the connection, its ownership, the context-manager
protocol and the retry loop of a unary call (sent again after a transient
failure, within the :class:`RetryPolicy`; any other failure raised as the
typed client exception) live here once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeVar

import grpc
import grpc.aio

from turnwire.client.failures import exception_for, is_retryable
from turnwire.client.retrying import RetryBudget, RetryPolicy

DEFAULT_TIMEOUT = 10.0
_Reply = TypeVar("_Reply")


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying the token; none at all when there is no token."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def as_policy(retries: int | RetryPolicy) -> RetryPolicy:
    return retries if isinstance(retries, RetryPolicy) else RetryPolicy(attempts=1 + retries)


def _open_channel(kind: Any, address: str, credentials: grpc.ChannelCredentials | None) -> Any:
    """A channel of ``kind`` (``grpc`` or ``grpc.aio``, whose factories have one shape):
    TLS with ``credentials``, else plaintext."""
    if credentials is not None:
        return kind.secure_channel(address, credentials)
    return kind.insecure_channel(address)


class _Settings:
    """What a blocking and an asyncio connection keep alike (all but the channel and
    the sleep, whose kinds differ)."""

    address: str
    _metadata: tuple[tuple[str, str], ...]
    _timeout: float
    _policy: RetryPolicy
    _clock: Callable[[], float]
    _rng: random.Random

    def _keep_settings(
        self,
        address: str,
        token: str | None,
        timeout: float,
        retries: int | RetryPolicy,
        clock: Callable[[], float],
        rng: random.Random | None,
    ) -> None:
        self.address = address
        self._metadata = bearer_metadata(token)
        self._timeout = timeout
        self._policy = as_policy(retries)
        self._clock = clock
        self._rng = rng or random.Random()


class SyncConnection(_Settings):
    """A blocking client's connection. ``channel`` replaces the one it would open
    (tests, a traced channel); ``credentials`` for TLS."""

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 4,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._owns_channel = channel is None
        if channel is None:
            channel = _open_channel(grpc, address, credentials)
        self._channel = channel
        self._sleep = sleep
        self._keep_settings(address, token, timeout, retries, clock, rng)
        self._bind(channel)

    def _bind(self, channel: grpc.Channel) -> None:
        """Make the subclass's stub on ``channel``."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owns_channel:
            self._channel.close()

    def _call(self, method: Callable[..., _Reply], request: object) -> _Reply:
        """One unary call, repeated after transient failures within the policy."""
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            budget.start_attempt()
            try:
                return method(request, timeout=self._timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                pause = budget.next_pause() if is_retryable(error) else None
                if pause is None:
                    raise exception_for(error, attempts=budget.attempts) from None
            self._sleep(pause)


class AsyncConnection(_Settings):
    """An asyncio client's connection; create it inside a running event loop
    (grpc.aio channels bind to one)."""

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 4,
        channel: grpc.aio.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._owns_channel = channel is None
        if channel is None:
            channel = _open_channel(grpc.aio, address, credentials)
        self._channel = channel
        self._sleep = sleep
        self._keep_settings(address, token, timeout, retries, clock, rng)
        self._bind(channel)

    def _bind(self, channel: grpc.aio.Channel) -> None:
        """Make the subclass's stub on ``channel``."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owns_channel:
            await self._channel.close()

    async def _call(self, method: Callable[..., Any], request: object) -> Any:
        """One unary call, repeated after transient failures within the policy."""
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            budget.start_attempt()
            try:
                return await method(request, timeout=self._timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                pause = budget.next_pause() if is_retryable(error) else None
                if pause is None:
                    raise exception_for(error, attempts=budget.attempts) from None
            await self._sleep(pause)
