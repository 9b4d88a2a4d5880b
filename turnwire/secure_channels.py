"""gRPC credentials and channels from turnwire.transport_security's material (issue 11).

- :func:`server_credentials`: TLS for a server, asking for client certificates
  or not (a runner asks; the coordinator's public API relies on tokens);
- :func:`runner_aio_channel` / :func:`runner_sync_channel`: a channel to a
  runner that presents a coordinator's credentials on every call (mutual TLS,
  or the shared secret in each call's metadata over loopback plaintext).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import grpc

from turnwire.observability import tracing
from turnwire.transport_security import (
    RunnerCredentials,
    TlsMaterial,
    check_runner_address,
)

ChannelOptions = Sequence[tuple[str, Any]]


def server_credentials(tls: TlsMaterial, *, require_client_cert: bool) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.private_key, tls.cert_chain)],
        root_certificates=tls.ca,
        require_client_auth=require_client_cert,
    )


def channel_credentials(tls: TlsMaterial, *, present_certificate: bool = True) -> Any:
    """Trust ``tls.ca``; with ``present_certificate`` also prove who we are (mutual TLS)."""
    if not present_certificate:
        return grpc.ssl_channel_credentials(root_certificates=tls.ca)
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca, private_key=tls.private_key, certificate_chain=tls.cert_chain
    )


def runner_aio_channel(
    credentials: RunnerCredentials,
    address: str,
    *,
    options: ChannelOptions = (),
    interceptors: Iterable[grpc.aio.ClientInterceptor] = (),
    attach_secret: bool = True,
) -> grpc.aio.Channel:
    """A grpc.aio channel to a runner. With ``attach_secret`` an interceptor adds the
    secret to every call; a hot path passes ``credentials.call_metadata`` itself."""
    # A span per call, its trace context in metadata, when tracing is on (issue 13).
    chain = [*tracing.client_interceptors(), *interceptors]
    if attach_secret and credentials.secret is not None:
        chain = [*_aio_secret(credentials.call_metadata), *chain]
    check_runner_address(credentials, address)
    if credentials.tls is not None:
        return grpc.aio.secure_channel(
            address, channel_credentials(credentials.tls), options=options, interceptors=chain
        )
    return grpc.aio.insecure_channel(address, options=options, interceptors=chain or None)


def runner_sync_channel(
    credentials: RunnerCredentials, address: str, *, options: ChannelOptions = ()
) -> Any:
    """A synchronous channel to a runner, presenting ``credentials`` on every call."""
    check_runner_address(credentials, address)
    if credentials.tls is not None:
        return grpc.secure_channel(address, channel_credentials(credentials.tls), options=options)
    channel = grpc.insecure_channel(address, options=options)
    return grpc.intercept_channel(channel, _SyncSecret(credentials.call_metadata))


def _with_metadata(details: Any, extra: tuple[tuple[str, str], ...]) -> Any:
    return details._replace(metadata=tuple(details.metadata or ()) + extra)


def _with_aio_metadata(details: Any, extra: tuple[tuple[str, str], ...]) -> Any:
    return details._replace(metadata=grpc.aio.Metadata(*(tuple(details.metadata or ()) + extra)))


class _AioSecretBase:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata


# One object per call shape: grpc.aio files an interceptor under the first shape it
# implements only, so one class implementing all four would cover unary calls alone.
class _AioSecretUnaryUnary(_AioSecretBase, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_aio_metadata(details, self._metadata), request)


class _AioSecretUnaryStream(_AioSecretBase, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_aio_metadata(details, self._metadata), request)


class _AioSecretStreamUnary(_AioSecretBase, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_aio_metadata(details, self._metadata), requests)


class _AioSecretStreamStream(_AioSecretBase, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_aio_metadata(details, self._metadata), requests)


def _aio_secret(metadata: tuple[tuple[str, str], ...]) -> list[grpc.aio.ClientInterceptor]:
    return [
        _AioSecretUnaryUnary(metadata),
        _AioSecretUnaryStream(metadata),
        _AioSecretStreamUnary(metadata),
        _AioSecretStreamStream(metadata),
    ]


class _SyncSecret(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]  # grpc is untyped
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(_with_metadata(details, self._metadata), requests)
