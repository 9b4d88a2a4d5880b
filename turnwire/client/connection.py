"""What every Turnwire client shares: a channel, a bearer token, retried unary calls.

``TurnwireClient`` and ``AdminClient`` (and their asyncio twins) differ only in
their stub and their calls; the connection, its ownership, the context-manager
protocol, ``from_env`` (turnwire.client.settings) and the retry loop of a unary
call (sent again after a transient failure, within the :class:`RetryPolicy`;
any other failure raised as the typed client exception) live here once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

import grpc
import grpc.aio

from turnwire.client.failures import exception_for, is_retryable
from turnwire.client.plaintext_check import PlaintextCheck
from turnwire.client.retrying import RetryBudget, RetryPolicy
from turnwire.client.settings import ConnectionSettings, PathLike, tls_trusting

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


def _trust(
    ca_file: PathLike | None, credentials: grpc.ChannelCredentials | None
) -> grpc.ChannelCredentials | None:
    """The channel credentials: ``credentials``, or TLS trusting ``ca_file``, or None."""
    if ca_file is None:
        return credentials
    if credentials is not None:
        raise TypeError("pass ca_file or credentials, not both")
    return tls_trusting(Path(ca_file))


class _Settings:
    """What a blocking and an asyncio connection keep alike (all but the channel and
    the sleep, whose kinds differ)."""

    address: str
    _metadata: tuple[tuple[str, str], ...]
    _timeout: float
    _policy: RetryPolicy
    _clock: Callable[[], float]
    _rng: random.Random
    _plaintext: PlaintextCheck

    @classmethod
    def from_env(
        cls,
        *,
        address: str | None = None,
        token: str | None = None,
        token_file: PathLike | None = None,
        ca_file: PathLike | None = None,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> Self:
        """A client connected as the ``turnwire`` command would be: each argument
        given here, else its variable (TURNWIRE_ADDRESS; TURNWIRE_TOKEN or
        TURNWIRE_TOKEN_FILE; TURNWIRE_CA_FILE, whose presence means TLS), else
        the default (127.0.0.1:50051, no token, plaintext). ``options`` are the
        constructor's (timeout, retries...). ``turnwire up`` prints the variables."""
        settings = ConnectionSettings.resolve(
            address=address, token=token, token_file=token_file, ca_file=ca_file, environ=environ
        )
        factory: Callable[..., Self] = cls
        return factory(settings.address, settings.token, ca_file=settings.ca_file, **options)

    def _keep_settings(
        self,
        address: str,
        token: str | None,
        timeout: float,
        retries: int | RetryPolicy,
        clock: Callable[[], float],
        rng: random.Random | None,
        *,
        plaintext: bool,
    ) -> None:
        self.address = address
        self._metadata = bearer_metadata(token)
        self._timeout = timeout
        self._policy = as_policy(retries)
        self._clock = clock
        self._rng = rng or random.Random()
        # Only a channel this client opened without TLS is known to be plaintext.
        self._plaintext = PlaintextCheck(address, armed=plaintext)


class SyncConnection(_Settings):
    """A blocking client's connection. TLS: ``ca_file`` (the CA that signed the
    coordinator's certificate, PEM) or your own ``credentials``; neither means
    plaintext. ``channel`` replaces the one it would open (tests, a traced channel)."""

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 4,
        ca_file: PathLike | None = None,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        credentials = _trust(ca_file, credentials)
        self._owns_channel = channel is None
        plaintext = channel is None and credentials is None
        if channel is None:
            channel = _open_channel(grpc, address, credentials)
        self._channel = channel
        self._sleep = sleep
        self._keep_settings(address, token, timeout, retries, clock, rng, plaintext=plaintext)
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
                self._raise_if_plaintext_to_tls(error)
                pause = budget.next_pause() if is_retryable(error) else None
                if pause is None:
                    raise exception_for(error, attempts=budget.attempts) from None
            self._sleep(pause)

    def _raise_if_plaintext_to_tls(self, error: grpc.RpcError) -> None:
        """CheckConnectionSettings if this plaintext client's coordinator speaks TLS."""
        if self._plaintext.wants_probe(error):
            misconfigured = self._plaintext.probe()
            if misconfigured is not None:
                raise misconfigured from None


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
        ca_file: PathLike | None = None,
        channel: grpc.aio.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        credentials = _trust(ca_file, credentials)
        self._owns_channel = channel is None
        plaintext = channel is None and credentials is None
        if channel is None:
            channel = _open_channel(grpc.aio, address, credentials)
        self._channel = channel
        self._sleep = sleep
        self._keep_settings(address, token, timeout, retries, clock, rng, plaintext=plaintext)
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
                await self._raise_if_plaintext_to_tls(error)
                pause = budget.next_pause() if is_retryable(error) else None
                if pause is None:
                    raise exception_for(error, attempts=budget.attempts) from None
            await self._sleep(pause)

    async def _raise_if_plaintext_to_tls(self, error: grpc.RpcError) -> None:
        """CheckConnectionSettings if this plaintext client's coordinator speaks TLS
        (the probe's blocking handshake runs in a thread)."""
        if self._plaintext.wants_probe(error):
            misconfigured = await asyncio.to_thread(self._plaintext.probe)
            if misconfigured is not None:
                raise misconfigured from None
