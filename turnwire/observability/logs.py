"""Structured logs (issue 13): JSON lines for machines, ``key=value`` for people.

Every line that concerns a turn carries the turn's fields: ``operation_id``,
``attempt``, ``runner``, ``incarnation`` and ``principal`` (each when known).
They come from two places:

* the **turn context**, a ``contextvars`` value the dispatcher and the runner
  set around their work on one turn (:func:`turn_context`, refined with
  :func:`note_turn` as more becomes known). asyncio copies it into every task
  and callback started from there, so a line logged deep inside a runner call
  or a job still names its turn without each call site passing it;
* ``extra=`` on a line that names a turn explicitly (:func:`turn_extra`),
  which wins over the context. A line naming *another* operation than the
  context's takes nothing from the context, so fields never mix two turns.

:func:`configure_logging` installs one handler on the root logger with
:class:`TurnFields` (copies the context onto each record) and the chosen
formatter: :class:`JsonFormatter` (one object per line: ``ts`` ISO-8601 UTC,
``level``, ``logger``, ``msg``, the turn fields, any other ``extra=`` field,
``exc`` with the traceback) or :class:`TextFormatter` (the message, then the
same fields as ``key=value``). ``--log-format auto`` picks text on a terminal
and JSON otherwise (a log file, a pipe, a collector). docs/LOGS.md describes
the fields and how to follow one turn with ``jq``.

Cost: a line outside any turn pays one ``ContextVar.get``; a turn's line adds
five attribute copies, and the JSON formatter one encoding of a small flat
dict (a shared encoder). A dispatcher step adds one ``note_turn`` (a tuple
compare when nothing is new). Secrets never reach a log line from here: only the five fields
and what call sites pass are written (never tokens, never envelope bodies).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any, Final

TURN_FIELDS: Final = ("operation_id", "attempt", "runner", "incarnation", "principal")
LOG_FORMATS: Final = ("auto", "json", "text")
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True, slots=True)
class Turn:
    """What is known of the turn being worked on (None: not known here)."""

    operation_id: str
    attempt: int | None = None
    runner: str | None = None
    incarnation: str | None = None
    principal: str | None = None


_current: ContextVar[Turn | None] = ContextVar("turnwire_turn", default=None)


def current_turn() -> Turn | None:
    """The turn the running code works on, if any."""
    return _current.get()


def _known(value: Any) -> Any:
    # Empty strings and 0 attempts mean "not known" in records and protos.
    return value if value not in (None, "", 0) else None


@contextlib.contextmanager
def turn_context(
    operation_id: str,
    *,
    attempt: int | None = None,
    runner: str | None = None,
    incarnation: str | None = None,
    principal: str | None = None,
) -> Iterator[None]:
    """Work on ``operation_id`` from here to the end of the block: every line
    logged meanwhile (in this task, and in tasks and callbacks started from it)
    carries the turn's fields. Within work on the same operation it keeps what
    is known and adds what is given; within another's it starts afresh, so a
    task spawned from one turn's work that drives another never mixes them."""
    outer = _current.get()
    if outer is None or outer.operation_id != operation_id:
        outer = Turn(operation_id)
    token = _current.set(
        Turn(
            operation_id,
            _known(attempt) or outer.attempt,
            _known(runner) or outer.runner,
            _known(incarnation) or outer.incarnation,
            _known(principal) or outer.principal,
        )
    )
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def no_turn() -> Iterator[None]:
    """Work on no turn in particular (e.g. a batch for many): lines carry no turn fields."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def note_turn(
    operation_id: str,
    *,
    attempt: int | None = None,
    runner: str | None = None,
    incarnation: str | None = None,
    principal: str | None = None,
) -> None:
    """Refine the current turn context with what just became known (a record
    loaded, a runner bound). Only inside :func:`turn_context` for the same
    operation; anywhere else it does nothing (it never starts a context that
    no block would end). Unknown values (None, "", 0) leave a field as it is."""
    turn = _current.get()
    if turn is None or turn.operation_id != operation_id:
        return
    if (attempt, runner, incarnation, principal) == (
        turn.attempt,
        turn.runner,
        turn.incarnation,
        turn.principal,
    ):
        return  # the usual case on a step: nothing new
    refined = Turn(
        operation_id,
        _known(attempt) or turn.attempt,
        _known(runner) or turn.runner,
        _known(incarnation) or turn.incarnation,
        _known(principal) or turn.principal,
    )
    if refined != turn:
        _current.set(refined)


def turn_extra(
    operation_id: str,
    *,
    attempt: int | None = None,
    runner: str | None = None,
    incarnation: str | None = None,
    principal: str | None = None,
) -> dict[str, Any]:
    """``extra=`` for a line that names a turn explicitly (unknown values left out)."""
    extra: dict[str, Any] = {"operation_id": operation_id}
    for name, value in (
        ("attempt", attempt),
        ("runner", runner),
        ("incarnation", incarnation),
        ("principal", principal),
    ):
        if _known(value) is not None:
            extra[name] = value
    return extra


class TurnFields(logging.Filter):
    """Copies the turn context onto each record it passes (a handler filter: it
    runs in the thread and context that logged the line). Fields a record got
    from ``extra=`` stay; a record naming another operation gets none."""

    def filter(self, record: logging.LogRecord) -> bool:
        turn = _current.get()
        if turn is None:
            return True
        fields = record.__dict__
        named = fields.get("operation_id")
        if named is not None and named != turn.operation_id:
            return True
        fields.setdefault("operation_id", turn.operation_id)
        for name in ("attempt", "runner", "incarnation", "principal"):
            value = getattr(turn, name)
            if value is not None and fields.get(name) is None:
                fields[name] = value
        return True


# Attributes every LogRecord has (and those formatting adds): not "extra" fields.
_STANDARD: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
_NOT_EXTRA: Final = _STANDARD | frozenset(TURN_FIELDS)


def _iso_utc(created: float, _cache: dict[int, str] = {}) -> str:  # noqa: B006 - a cache
    """ISO-8601 UTC with milliseconds; the seconds part is formatted once per second."""
    whole = int(created)
    head = _cache.get(whole)
    if head is None:
        _cache.clear()
        head = _cache[whole] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{head}.{int((created - whole) * 1000):03d}Z"


def _fields(record: logging.LogRecord) -> Iterator[tuple[str, Any]]:
    """The turn fields in their fixed order, then any other ``extra=`` field."""
    attrs = record.__dict__
    for name in TURN_FIELDS:
        value = attrs.get(name)
        if value is not None:
            yield name, value
    extras = attrs.keys() - _NOT_EXTRA  # one set difference, usually empty
    for name in sorted(extras):
        if not name.startswith("_"):
            yield name, attrs[name]


# One encoder for every line: json.dumps with options builds a new one per call.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the turn fields, extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name, value in _fields(record):
            line[name] = value
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            line["exc_type"] = getattr(record.exc_info[0], "__name__", "")
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return _ENCODER.encode(line)


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' ="\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """For a terminal: ``TS LEVEL logger: message key=value ...`` (+ traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_iso_utc(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        tail = " ".join(f"{name}={_text_value(value)}" for name, value in _fields(record))
        if tail:
            line = f"{line} {tail}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line = f"{line}\n{record.exc_text}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


class _ProcessFields(logging.Filter):
    """Fields every line of this process carries unless the line says otherwise
    (e.g. a runner's own name: in its log, every turn is on that runner)."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        super().__init__()
        self._fields = {k: v for k, v in fields.items() if _known(v) is not None}

    def filter(self, record: logging.LogRecord) -> bool:
        attrs = record.__dict__
        for name, value in self._fields.items():
            if attrs.get(name) is None:
                attrs[name] = value
        return True


def resolve_format(log_format: str, stream: IO[str]) -> str:
    """``auto``: text on a terminal, JSON otherwise. Raises ValueError for anything else."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    if log_format != "auto":
        return log_format
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return "json"


_OURS = "_turnwire_configured"  # marks the handler configure_logging installed


class _CurrentStderr:
    """A stream that is always the current ``sys.stderr``."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def log_handler(
    log_format: str = "auto",
    *,
    stream: IO[str] | None = None,
    process_fields: Mapping[str, Any] | None = None,
) -> logging.Handler:
    """A handler writing to ``stream`` (stderr) in ``log_format``, turn fields included."""
    chosen = resolve_format(log_format, stream if stream is not None else sys.stderr)
    # Without a stream: whatever sys.stderr is when a line is written, as
    # logging's own last-resort handler does, so a replaced stderr (pytest's
    # capture of one test, since closed) is never written to later.
    handler = logging.StreamHandler(stream if stream is not None else _CurrentStderr())
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    handler.addFilter(TurnFields())
    if process_fields:
        handler.addFilter(_ProcessFields(process_fields))
    return handler


def configure_logging(
    level: str | int = "INFO",
    log_format: str = "auto",
    *,
    stream: IO[str] | None = None,
    process_fields: Mapping[str, Any] | None = None,
) -> logging.Handler:
    """Make the root logger write ``level`` and above to ``stream`` (stderr) in
    ``log_format``, replacing the handler an earlier call installed.
    ``process_fields`` go on every line that does not set them (a runner's name).
    Returns the handler.

    Other handlers stay: a process starts with none, and a host that runs a
    service's ``main()`` in process (pytest's log capture, an embedding
    program) keeps its own."""
    handler = log_handler(log_format, stream=stream, process_fields=process_fields)
    remove_logging()
    setattr(handler, _OURS, True)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def remove_logging() -> None:
    """Take away the handler ``configure_logging`` installed, if any: a host that ran
    a service's ``main()`` in process (a test, an embedding program) and goes on
    without it. Other handlers stay."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _OURS, False):
            root.removeHandler(handler)
            handler.close()


def _log_format(text: str) -> str:
    value = text.strip().lower()
    if value not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(LOG_FORMATS)}, got {text!r}")
    return value


def add_log_format_flag(parser: argparse.ArgumentParser, env: str) -> None:
    """``--log-format auto|json|text`` (falls back to the environment variable ``env``;
    a bad value there is refused as a bad flag would be)."""
    parser.add_argument(
        "--log-format",
        type=_log_format,
        metavar="{auto,json,text}",
        default=os.environ.get(env) or "auto",
        help="json: one JSON object per line (ts, level, logger, msg, operation_id, attempt, "
        "runner, incarnation, principal; docs/LOGS.md); text: the same fields as key=value, "
        f"for people; auto: text on a terminal, json otherwise (env {env}; default auto)",
    )
