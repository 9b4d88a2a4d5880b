"""An executor for an OpenAI-compatible chat-completions API, streamed (httpx).

It POSTs ``{OPENAI_BASE_URL}/chat/completions`` with ``stream: true``, built from
the turn: the model's name, the input items as messages (each item's role and
text), and the model parameters the API knows (``temperature``, ``max_tokens``,
...). The operation id goes as the ``Idempotency-Key`` header: it is the same on
every attempt of the turn, so a provider that honours the header never
generates (or bills) twice for one turn. Each token of the server-sent events is
emitted as it comes; the whole text is the result.

Serve it (the module importable by the runner, httpx installed next to it)::

    PYTHONPATH=examples/http OPENAI_BASE_URL=http://127.0.0.1:8000/v1 \\
        turnwire up --runners 1 --executor chat=python:openai_chat:chat

Configuration comes from the runner's environment, never from the turn:
``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``), ``OPENAI_API_KEY``
(sent as ``Authorization: Bearer``; none for a server that wants none) and
``OPENAI_TIMEOUT`` (seconds without a byte from the server before the call is
abandoned, default 60). A key in the turn's parameters would be journaled and
shown to everyone who may read the operation (docs/EXECUTORS.md, "Where secrets
go").

How failures are declared (what the caller, and a retry policy, may conclude):

- 429, or any 5xx, before the first token: the provider refused the request
  before acting on it: ``RetryableNoEffect`` (``retry_after`` from Retry-After);
- the connection could not be made (refused, no route, DNS, TLS handshake):
  nothing was sent, so nothing can have happened: ``RetryableNoEffect``;
- anything after the first token (the stream broke, an event was not JSON, an
  error event): tokens were generated and billed: ``FailedAfterEffect``;
- anything else: a plain failure, effect undeclared (unknown), because nobody
  can tell whether the provider acted. See :func:`_undeclared` for the cases.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from turnwire.executor import (
    FailedAfterEffect,
    OutputRefused,
    Result,
    RetryableNoEffect,
    TurnContext,
    TurnFailed,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Connecting is quick or it fails; the read timeout is the stall detector: the
# longest the server may stay silent (before the first token, between tokens).
CONNECT_TIMEOUT_SECONDS = 10.0
DEFAULT_READ_TIMEOUT_SECONDS = 60.0
# The model parameters sent to the API, and how to read each from its string.
_PARAMETERS: Mapping[str, type] = {
    "temperature": float,
    "top_p": float,
    "presence_penalty": float,
    "frequency_penalty": float,
    "max_tokens": int,
    "max_completion_tokens": int,
    "seed": int,
    "n": int,
    "stop": str,
    "user": str,
}


@dataclass
class _Stream:
    """What the event stream has said so far."""

    parts: list[str] = field(default_factory=list)
    tokens: int = 0  # content deltas received: any means the provider acted
    finish_reason: str = ""
    model: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    refused: int = 0  # chunks the runner refused (the result still holds them)
    done: bool = False


async def chat(ctx: TurnContext) -> Result:
    """The executor: ``--executor chat=python:openai_chat:chat``."""
    request = build_request(ctx)  # bad input fails here, before anything is sent
    base_url = os.environ.get("OPENAI_BASE_URL", DEFAULT_BASE_URL).rstrip("/")
    headers = {"Idempotency-Key": ctx.operation_id, "Accept": "text/event-stream"}
    if api_key := os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {api_key}"
    read = float(os.environ.get("OPENAI_TIMEOUT", DEFAULT_READ_TIMEOUT_SECONDS))
    timeout = httpx.Timeout(read, connect=CONNECT_TIMEOUT_SECONDS)
    ctx.log.info("calling the chat API", extra={"model": request["model"]})
    stream = _Stream()
    # One client per turn: an httpx.AsyncClient belongs to one event loop. A class
    # executor (python:module:Class) could hold one for the runner's life instead.
    pulse = asyncio.create_task(_pulse(ctx))
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            await _call(ctx, client, f"{base_url}/chat/completions", request, headers, stream)
    except asyncio.CancelledError:
        if stream.tokens:
            # Stopped (a cancel, the deadline, a heartbeat timeout) after tokens were
            # generated: say so. The row still records the stop's state (CANCELLED,
            # TIMED_OUT), with this declared effect (PROTOCOL.md R7).
            raise FailedAfterEffect(f"stopped after {stream.tokens} tokens") from None
        raise  # before any token: whether the provider acted is unknown
    finally:
        # A cancel (the task is cancelled) lands at an await above: leaving the
        # ``async with`` blocks closes the response and its connection, so the
        # provider sees the client go and stops generating.
        pulse.cancel()
        await asyncio.gather(pulse, return_exceptions=True)
    metadata = {
        "model": stream.model or request["model"],
        "finish_reason": stream.finish_reason,
        "tokens": str(stream.usage.get("completion_tokens", stream.tokens)),
    }
    if stream.refused:
        metadata["refused_chunks"] = str(stream.refused)
    return Result("".join(stream.parts), "text/plain; charset=utf-8", metadata)


def build_request(ctx: TurnContext) -> dict[str, Any]:
    """The JSON body, from the turn. Raises TurnFailed for input the API cannot take
    (nothing is sent; a retry of the same turn would fail the same way)."""
    messages = []
    for item in ctx.items:
        if not item.content_type.startswith("text/"):
            raise TurnFailed(f"item {item.item_id} is {item.content_type}, not text")
        messages.append({"role": item.role or "user", "content": item.text})
    if not messages:
        raise TurnFailed("the turn has no input items to send as messages")
    body: dict[str, Any] = {
        "model": ctx.model.name,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for name, value in ctx.parameters.items():
        convert = _PARAMETERS.get(name)
        if convert is None:
            continue  # not an API parameter (an executor's own knob, say): not sent
        try:
            body[name] = convert(value)
        except ValueError:
            raise TurnFailed(f"parameter {name}={value!r} is not a {convert.__name__}") from None
    return body


async def _call(
    ctx: TurnContext,
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    stream: _Stream,
) -> None:
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                raise _refusal(response)
            async for event in _events(response.aiter_lines()):
                if _take(ctx, event, stream):
                    return
        if not stream.done and not stream.finish_reason:
            # The body ended before [DONE] and before a finish_reason: the server went away.
            raise _BadEvent("the event stream ended before [DONE]")
    except httpx.ConnectError as error:
        # The connection was never made (refused, no route, DNS, TLS handshake):
        # not one byte of the request reached the provider.
        raise RetryableNoEffect(f"could not connect to {url}: {error}") from error
    except httpx.ConnectTimeout as error:
        raise RetryableNoEffect(f"could not connect to {url} in time: {error}") from error
    except (httpx.HTTPError, _BadEvent) as error:
        if stream.tokens:
            # Tokens came, so the provider generated (and billed) them: a retry
            # would pay for them again.
            raise FailedAfterEffect(
                f"the stream broke after {stream.tokens} tokens: {_describe(error)}"
            ) from error
        raise _undeclared(error) from error


def _refusal(response: httpx.Response) -> TurnFailed:
    """A non-200 answer: the provider said no before streaming anything."""
    status, detail = response.status_code, _error_text(response)
    if status == 429 or status >= 500:
        # The provider refused before acting on the request (rate limit, overload,
        # an outage): nothing was generated. This is what the API's own clients
        # retry, and the Idempotency-Key covers a provider that did act after all.
        return RetryableNoEffect(
            f"the API answered {status}: {detail}", retry_after=_retry_after(response)
        )
    # 400, 401, 403, 404, ...: refused too, but a retry cannot fix a bad request or
    # a bad key, and a declared NONE is what invites an automatic retry. Undeclared.
    return TurnFailed(f"the API answered {status}: {detail}")


def _undeclared(error: Exception) -> TurnFailed:
    """A failure before any token that nobody can classify: effect unknown.

    - a read timeout: the request was sent and the server went silent; it may be
      generating (and billing) right now, we cannot know;
    - a write error or timeout: part of the request, perhaps all of it, was sent;
    - the connection dropped, or an event was malformed, after a 200: the
      provider had accepted the request (a 200 is "I am generating");
    - anything else httpx raises.

    Declaring NONE for any of these could make a retry bill twice; APPLIED would
    claim a knowledge we lack. A plain TurnFailed says exactly that: unknown.
    """
    return TurnFailed(f"the call failed before any token, outcome unknown: {_describe(error)}")


class _BadEvent(Exception):
    """An event that is not what the API sends."""


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The data of each server-sent event: ``data:`` lines up to a blank line
    (several are joined with newlines); comments (``:``) and other fields skipped."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _take(ctx: TurnContext, data: str, stream: _Stream) -> bool:
    """Take one event's data; True once the stream is over ([DONE])."""
    ctx.heartbeat()
    if data == "[DONE]":
        stream.done = True
        return True
    try:
        event = json.loads(data)
    except ValueError:
        raise _BadEvent(f"an event is not JSON: {data[:80]!r}") from None
    if not isinstance(event, dict):
        raise _BadEvent(f"an event is not a JSON object: {data[:80]!r}")
    if "error" in event:
        raise _BadEvent(f"the API sent an error event: {_message(event['error'])}")
    stream.model = str(event.get("model") or stream.model)
    if isinstance(event.get("usage"), dict):
        stream.usage = event["usage"]
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue  # n > 1: this executor returns the first choice only
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(content, str) and content:
            stream.tokens += 1
            stream.parts.append(content)
            try:
                ctx.emit(content)
            except OutputRefused:
                stream.refused += 1  # the turn goes on; the result holds the text
        if choice.get("finish_reason"):
            stream.finish_reason = str(choice["finish_reason"])
    return False


async def _pulse(ctx: TurnContext) -> None:
    """Heartbeat while the call is in flight (waiting for the first token can take
    a while). A server gone silent is caught by the read timeout, which fails the
    turn; the heartbeat says this executor is alive and waiting, not that it
    makes progress."""
    timeout = ctx.limits.heartbeat_timeout
    interval = min(1.0, timeout.total_seconds() / 4) if timeout else 1.0
    while True:
        ctx.heartbeat()
        await asyncio.sleep(interval)


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), capped at a day."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        date = response.headers.get("Date")  # the server's clock, when it sent one
        now = parsedate_to_datetime(date) if date else datetime.now(UTC)
        try:
            seconds = (when - now).total_seconds()
        except TypeError:  # one of them without a time zone
            return None
    return min(max(seconds, 0.0), 86400.0)


def _error_text(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(payload, dict) and "error" in payload:
        return _message(payload["error"])
    return str(payload)[:200]


def _message(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message", error))[:200]
    return str(error)[:200]


def _describe(error: BaseException) -> str:
    text = str(error)
    if isinstance(error, _BadEvent):
        return text  # its text says it all
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
