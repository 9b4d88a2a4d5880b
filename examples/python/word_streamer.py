"""An executor written against turnwire.executor: streams a reply word by word.

A stand-in for an LLM call, with no network: it "generates" its reply from the
turn's input, emits each word as it comes (partial output a client can show),
heartbeats while it thinks, honours the turn's deadline and a cancel, passes
the operation id downstream as the idempotency key, and reports failures with
the error that says what happened downstream.

Serve it (the module must be importable by the runner: on its PYTHONPATH, or
installed with your package)::

    PYTHONPATH=examples/python python -m runner_svc serve ... \
        --executor words=python:word_streamer:stream_reply

Parameters it reads: ``pause_ms`` (between words, default 50) and ``fail``
(``429``: refused before anything happened; ``midway``: fails after some words).
"""

from __future__ import annotations

import asyncio

from turnwire.executor import FailedAfterEffect, Result, RetryableNoEffect, TurnContext


def fake_model(prompt: str) -> list[str]:
    """The 'model': echoes the prompt back in upper case, one word at a time."""
    return [word.upper() for word in prompt.split()] or ["(nothing", "to", "say)"]


async def stream_reply(ctx: TurnContext) -> Result:
    prompt = " ".join(item.text for item in ctx.items)
    # What a real provider call would send: the operation id is the same on every
    # attempt of this turn, so the provider never acts twice for it.
    request = {"model": ctx.model.name, "prompt": prompt, "idempotency_key": ctx.operation_id}
    ctx.log.info("calling the model", extra={"model": request["model"]})
    if ctx.parameters.get("fail") == "429":
        # The provider refused before accepting the request: nothing was billed.
        raise RetryableNoEffect("the provider answered 429 Too Many Requests", retry_after=2.0)
    pause = int(ctx.parameters.get("pause_ms", "50")) / 1000
    words = fake_model(prompt)
    for n, word in enumerate(words):
        remaining = ctx.remaining()
        if remaining is not None and remaining < pause:
            break  # out of time: return what there is rather than be cut off
        if ctx.parameters.get("fail") == "midway" and n == len(words) // 2:
            # Tokens were already generated (and billed): a retry would pay twice.
            raise FailedAfterEffect(f"the stream broke after {n} words")
        ctx.emit(word + " ")
        ctx.heartbeat()
        await asyncio.sleep(pause)  # a cancel arrives here as CancelledError
    reply = " ".join(words)
    return Result(reply, metadata={"words": str(len(words)), "model": ctx.model.name})
