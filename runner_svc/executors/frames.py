"""The framed subprocess protocol, ``subprocess+framed:<command>`` (docs/EXECUTORS.md).

Any language can implement it: JSON, one object per line, both ways.

stdin, runner -> command: the request, one line (the plain subprocess
executor's document plus ``"protocol"`` and ``"limits"``), then, as the turn
runs, *notices*: ``{"type": "refused", "reason": "CHUNK_TOO_LARGE" |
"STREAM_BUDGET_EXHAUSTED", "message": ..., "frame": <line number>}``. Notices
are best effort: one that would block (the command does not read stdin and the
pipe is full) is dropped; a command may ignore them. stdin closes when the
runner stops reading the command's output.

stdout, command -> runner: frames, one JSON object per line (UTF-8, ending
in ``\\n``; blank lines are skipped), each with a ``"type"``:

    {"type": "chunk", "text": "..."}               partial output (or "base64": ...;
                                                   optional "content_type")
    {"type": "heartbeat"}                          a sign of life (R12)
    {"type": "result", "text": "..."}              the final result (or "base64";
                                                   optional "content_type", "metadata")
    {"type": "error", "message": "...",            the final failure; "effect":
     "effect": "none" | "applied"}                 what took effect downstream
                                                   (absent: not declared); with
                                                   "none", optional "retry_after" (s)

Every frame counts as a heartbeat. ``result`` and ``error`` are final: the
command should exit after one; any frame after it is a protocol error. A
frame of an unknown type is ignored (so a newer command runs on an older
runner); a line that is not a JSON object, a known type with a field of the
wrong type, or a line over MAX_FRAME_BYTES is a protocol error: the group is
killed and the turn fails RESULT_INVALID naming the line. A refused chunk
(too large, past the stream budget) is not a protocol error: it is dropped,
the command gets a notice, the turn goes on.

Exit status (read with the final frame, PROTOCOL.md R7):

    result frame, exit 0                success
    error frame, any exit               failed, with the frame's declared effect
    no final frame, exit 0              RESULT_INVALID (a result frame is required)
    no final frame, exit 75             failed, effect NONE (retryable: EX_TEMPFAIL)
    no final frame, exit 76             failed, effect APPLIED (never retried)
    anything else                       failed, effect not declared

After a stop (cancel, deadline, budget, heartbeat, drain) the group gets
SIGTERM, then SIGKILL after the runner's grace; whatever it then reports is
recorded with the stop's outcome (a result frame and exit 0 still succeed: it
finished first).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

from runner_svc.executors import pipes
from runner_svc.executors.base import ExecutionOutcome
from runner_svc.executors.outcomes import (
    EXECUTOR_FAILED,
    MAX_OUTPUT_BYTES,
    OCTET_STREAM,
    RESULT_INVALID,
    cancelled,
    failed,
    succeeded,
)
from turnwire.executor.context import TurnChannel
from turnwire.executor.outcomes import OutputRefused
from turnwire.vocabulary import DeclaredEffect

PROTOCOL = "turnwire.framed.v1"
# The longest line the runner reads: a result of MAX_OUTPUT_BYTES in base64 fits.
MAX_FRAME_BYTES = 2 * 1024 * 1024
EXIT_RETRYABLE_NO_EFFECT = 75
EXIT_FAILED_AFTER_EFFECT = 76
_EFFECTS = {"none": DeclaredEffect.NONE, "applied": DeclaredEffect.APPLIED}
TEXT_PLAIN = "text/plain; charset=utf-8"


class MalformedFrame(ValueError):
    """A line the protocol does not allow (see the module docstring)."""


@dataclass(frozen=True)
class Final:
    """The command's last word: a result or an error frame."""

    succeeded: bool
    output: bytes = b""
    content_type: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    message: str = ""
    effect: DeclaredEffect | None = None
    retry_after: float | None = None


def _payload(frame: dict[str, object], default_type: str) -> tuple[bytes, str]:
    text, encoded = frame.get("text"), frame.get("base64")
    content_type = frame.get("content_type")
    if content_type is not None and not isinstance(content_type, str):
        raise MalformedFrame('"content_type" must be a string')
    if isinstance(text, str) and encoded is None:
        return text.encode(), content_type or TEXT_PLAIN
    if isinstance(encoded, str) and text is None:
        try:
            return base64.b64decode(encoded, validate=True), content_type or default_type
        except (binascii.Error, ValueError) as error:
            raise MalformedFrame(f'"base64" does not decode: {error}') from None
    raise MalformedFrame('exactly one of "text" (a string) or "base64" (a string) is required')


def _final(frame: dict[str, object], kind: str) -> Final:
    if kind == "result":
        output, content_type = _payload(frame, OCTET_STREAM)
        metadata = frame.get("metadata", {})
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise MalformedFrame('"metadata" must map strings to strings')
        return Final(True, output, content_type, metadata)
    message, effect_name = frame.get("message", ""), frame.get("effect")
    retry_after = frame.get("retry_after")
    if not isinstance(message, str):
        raise MalformedFrame('"message" must be a string')
    if effect_name is not None and effect_name not in _EFFECTS:
        raise MalformedFrame('"effect" must be "none" or "applied" (or absent: undeclared)')
    effect = _EFFECTS[effect_name] if isinstance(effect_name, str) else None
    if retry_after is not None and (
        effect is not DeclaredEffect.NONE
        or isinstance(retry_after, bool)
        or not isinstance(retry_after, int | float)
        or not 0 <= retry_after <= 86400
    ):
        raise MalformedFrame('"retry_after" is 0..86400 seconds, with "effect": "none" only')
    hint = float(retry_after) if isinstance(retry_after, int | float) else None
    return Final(False, message=message, effect=effect, retry_after=hint)


@dataclass
class FramedRun:
    """What the runner read from one command's stdout, frame by frame."""

    channel: TurnChannel
    notify: Callable[[bytes], bool]  # writes a notice line to the command's stdin
    lines: int = 0
    final: Final | None = None
    malformed: str | None = None  # set: a protocol error; the group is to be killed
    refused_chunks: int = 0

    def take(self, line: bytes) -> None:
        """One line of stdout (without its newline)."""
        self.lines += 1
        if not line.strip() or self.malformed is not None:
            return
        try:
            self._frame(line)
        except MalformedFrame as error:
            self.malformed = f"stdout line {self.lines}: {error}"

    def _frame(self, line: bytes) -> None:
        try:
            frame = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise MalformedFrame(f"not JSON ({error})") from None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise MalformedFrame('a frame is a JSON object with a string "type"')
        kind = frame["type"]
        if self.final is not None:
            raise MalformedFrame(f'a "{kind}" frame after the final frame')
        self.channel.heartbeat()  # every frame is a sign of life (R12)
        if kind not in ("chunk", "heartbeat", "result", "error"):
            return  # a newer command's frame: ignored, never an error
        if kind == "chunk":
            self._chunk(*_payload(frame, OCTET_STREAM))
        elif kind in ("result", "error"):
            self.final = _final(frame, kind)

    def _chunk(self, data: bytes, content_type: str) -> None:
        if not data:
            return
        try:
            self.channel.emit(data, content_type)
        except OutputRefused as refused:
            self.refused_chunks += 1
            notice = {
                "type": "refused",
                "reason": refused.reason,
                "message": refused.message,
                "frame": self.lines,
            }
            self.notify(json.dumps(notice, separators=(",", ":")).encode() + b"\n")

    def overlong(self) -> None:
        """The current line passed MAX_FRAME_BYTES before its newline."""
        self.malformed = f"stdout line {self.lines + 1}: a frame over {MAX_FRAME_BYTES} bytes"


def framed_outcome(
    run: FramedRun, returncode: int, exit_detail: str, cancel_requested: bool
) -> ExecutionOutcome:
    """The turn's outcome from the frames and the exit status (module docstring)."""
    metadata = {"exit_code": str(returncode)}
    if run.malformed is not None:
        return failed(RESULT_INVALID, f"framed protocol error: {run.malformed}", metadata)
    final = run.final
    if final is not None and final.succeeded:
        if returncode == 0:
            if len(final.output) > MAX_OUTPUT_BYTES:
                limit = MAX_OUTPUT_BYTES
                return failed(RESULT_INVALID, f"result frame over {limit} bytes", metadata)
            return succeeded(final.output, final.content_type, {**final.metadata, **metadata})
        return _failure(f"{exit_detail} after its result frame", None, None, metadata)
    if cancel_requested:
        effect = final.effect if final is not None else _exit_effect(returncode)
        outcome = cancelled(f"cancelled: {exit_detail}")
        return _with_effect(outcome, effect, None)
    if final is not None:
        return _failure(final.message or exit_detail, final.effect, final.retry_after, metadata)
    if returncode == 0:
        return failed(RESULT_INVALID, "exited 0 without a result frame", metadata)
    return _failure(exit_detail, _exit_effect(returncode), None, metadata)


def _exit_effect(returncode: int) -> DeclaredEffect | None:
    if returncode == EXIT_RETRYABLE_NO_EFFECT:
        return DeclaredEffect.NONE
    if returncode == EXIT_FAILED_AFTER_EFFECT:
        return DeclaredEffect.APPLIED
    return None


def _failure(
    message: str,
    effect: DeclaredEffect | None,
    retry_after: float | None,
    metadata: dict[str, str],
) -> ExecutionOutcome:
    return _with_effect(failed(EXECUTOR_FAILED, message, metadata), effect, retry_after)


def _with_effect(
    outcome: ExecutionOutcome, effect: DeclaredEffect | None, retry_after: float | None
) -> ExecutionOutcome:
    if effect is None:
        return outcome
    return ExecutionOutcome(
        succeeded=False,
        error_reason=outcome.error_reason,
        error_message=outcome.error_message,
        metadata=outcome.metadata,
        effect=effect.value,
        retry_after=retry_after if effect is DeclaredEffect.NONE else None,
    )


async def read_framed(pipe: IO[bytes], run: FramedRun) -> FramedRun:
    """Read the command's stdout to EOF, frame by frame, or until a protocol error."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    buffer = bytearray()
    searched = 0  # the buffer holds no newline before this index
    try:
        while run.malformed is None:
            data = await pipes.read_some(fd)
            if not data:
                if buffer:  # a last line without its newline still counts
                    run.take(bytes(buffer))
                break
            buffer += data
            while run.malformed is None and (newline := buffer.find(b"\n", searched)) >= 0:
                run.take(bytes(buffer[:newline]))
                del buffer[: newline + 1]
                searched = 0
            searched = len(buffer)
            if len(buffer) > MAX_FRAME_BYTES and run.malformed is None:
                run.overlong()
    finally:
        pipe.close()
    return run
