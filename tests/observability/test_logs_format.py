"""The log formatters and the turn context (turnwire.observability.logs), as units."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from turnwire.observability.logs import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    current_turn,
    log_handler,
    no_turn,
    note_turn,
    remove_logging,
    resolve_format,
    turn_context,
    turn_extra,
)

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO, io.StringIO]]:
    """A private logger writing JSON to one buffer and text to another."""
    json_out, text_out = io.StringIO(), io.StringIO()
    log = logging.getLogger("tests.observability.logs")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    handlers = [log_handler("json", stream=json_out), log_handler("text", stream=text_out)]
    for handler in handlers:
        log.addHandler(handler)
    try:
        yield log, json_out, text_out
    finally:
        for handler in handlers:
            log.removeHandler(handler)


def _json_lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_json_line_has_ts_level_logger_msg_and_the_turns_fields(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    log, json_out, _ = logger
    with turn_context("op_1", attempt=2, runner="r1", incarnation="inc", principal="alice"):
        log.info("dispatch %s accepted", "op_1")
    (line,) = _json_lines(json_out)
    assert ISO_UTC.match(str(line["ts"])), line["ts"]
    assert line == {
        "ts": line["ts"],
        "level": "INFO",
        "logger": "tests.observability.logs",
        "msg": "dispatch op_1 accepted",
        "operation_id": "op_1",
        "attempt": 2,
        "runner": "r1",
        "incarnation": "inc",
        "principal": "alice",
    }


def test_a_line_outside_any_turn_has_no_turn_fields(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    log, json_out, text_out = logger
    log.warning("journal retention off")
    (line,) = _json_lines(json_out)
    assert set(line) == {"ts", "level", "logger", "msg"}
    assert text_out.getvalue().rstrip().endswith("tests.observability.logs: journal retention off")


def test_extra_wins_and_a_line_naming_another_turn_takes_nothing_from_the_context(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    """A line about op_2 logged while working on op_1 must not get op_1's fields."""
    log, json_out, _ = logger
    with turn_context("op_1", attempt=1, runner="r1", principal="alice"):
        log.info("same turn, more known", extra=turn_extra("op_1", attempt=3))
        log.info("release op_2", extra=turn_extra("op_2", incarnation="inc-2"))
    same, other = _json_lines(json_out)
    assert (same["attempt"], same["runner"], same["principal"]) == (3, "r1", "alice")
    assert {k: v for k, v in other.items() if k not in ("ts", "msg")} == {
        "level": "INFO",
        "logger": "tests.observability.logs",
        "operation_id": "op_2",
        "incarnation": "inc-2",
    }


def test_text_appends_the_same_fields_as_key_value_quoting_what_needs_it(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    log, _, text_out = logger
    with turn_context("op_1", attempt=1, runner="r 1", principal="alice"):
        log.info("op_1 QUEUED->DISPATCHING")
    line = text_out.getvalue().rstrip("\n")
    assert "\n" not in line
    stamp, level, rest = line.split(" ", 2)
    assert ISO_UTC.match(stamp) and level == "INFO"
    assert rest == (
        "tests.observability.logs: op_1 QUEUED->DISPATCHING "
        'operation_id=op_1 attempt=1 runner="r 1" principal=alice'
    )


def test_an_exception_stays_on_one_json_line_with_its_type_and_traceback(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    log, json_out, text_out = logger
    try:
        raise ValueError("bad row")
    except ValueError:
        log.exception("step failed")
    assert len(json_out.getvalue().splitlines()) == 1
    (line,) = _json_lines(json_out)
    assert line["level"] == "ERROR" and line["exc_type"] == "ValueError"
    assert "Traceback" in str(line["exc"]) and "ValueError: bad row" in str(line["exc"])
    assert "ValueError: bad row" in text_out.getvalue()  # text: the traceback below the line


def test_other_extra_fields_are_kept_and_odd_values_still_serialise(
    logger: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    log, json_out, _ = logger
    log.info("pruned", extra={"replica": "replica-1", "count": 3, "odd": object()})
    (line,) = _json_lines(json_out)
    assert line["replica"] == "replica-1" and line["count"] == 3
    assert str(line["odd"]).startswith("<object object")


def test_note_turn_refines_only_the_same_turn_and_contexts_unwind() -> None:
    note_turn("op_1", attempt=1)  # outside any context: nothing starts
    assert current_turn() is None
    with turn_context("op_1", principal="alice"):
        note_turn("op_1", attempt=2, runner="r1", incarnation="")  # "" is not known
        note_turn("op_9", attempt=7)  # another turn: ignored
        turn = current_turn()
        assert turn is not None
        assert (turn.attempt, turn.runner, turn.incarnation, turn.principal) == (
            2,
            "r1",
            None,
            "alice",
        )
        with turn_context("op_1", incarnation="inc"):  # the same turn: keeps what is known
            inner = current_turn()
            assert inner is not None and (inner.attempt, inner.incarnation) == (2, "inc")
        with turn_context("op_2"):  # another turn: afresh
            assert current_turn() == type(turn)("op_2")
            with no_turn():
                assert current_turn() is None
        assert current_turn() == turn
    assert current_turn() is None


def test_tasks_started_inside_a_turn_carry_it_and_concurrent_turns_stay_apart() -> None:
    seen: dict[str, tuple[str | None, str | None]] = {}

    async def work(op_id: str, principal: str) -> None:
        with turn_context(op_id, principal=principal):
            await asyncio.sleep(0.01)  # the other turn runs meanwhile

            async def child() -> None:
                turn = current_turn()
                seen[op_id] = (turn.operation_id, turn.principal) if turn else (None, None)

            await asyncio.get_running_loop().create_task(child())

    async def both() -> None:
        await asyncio.gather(work("op_a", "alice"), work("op_b", "bob"))

    asyncio.run(both())
    assert seen == {"op_a": ("op_a", "alice"), "op_b": ("op_b", "bob")}


def test_auto_is_text_on_a_terminal_and_json_otherwise() -> None:
    import os

    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            assert resolve_format("auto", tty) == "text"
    finally:
        os.close(leader)
        os.close(follower)
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("text", io.StringIO()) == "text"
    with pytest.raises(ValueError, match="log format"):
        resolve_format("xml", io.StringIO())


def test_formatters_are_usable_alone() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hi %s", ("there",), None)
    assert json.loads(JsonFormatter().format(record))["msg"] == "hi there"
    assert TextFormatter().format(record).endswith("INFO x: hi there")


def test_configuring_twice_keeps_other_handlers_and_replaces_only_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A service's main() run in process (tests, an embedding program) leaves the
    host's handlers alone (pytest's log capture was closed and lost before)."""
    root = logging.getLogger()
    foreign = logging.NullHandler()
    monkeypatch.setattr(root, "handlers", [foreign])
    monkeypatch.setattr(root, "level", root.level)
    first = configure_logging("INFO", "json", stream=io.StringIO())
    second = configure_logging("INFO", "json", stream=io.StringIO())
    assert root.handlers == [foreign, second]
    assert first not in root.handlers
    remove_logging()  # the host goes on without the service: its handler goes, no other
    assert root.handlers == [foreign]


def test_without_a_stream_lines_go_to_stderr_as_it_is_when_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handler follows sys.stderr, so a stderr replaced and closed since (pytest's
    capture of an earlier test) is never written to."""
    earlier = io.StringIO()
    monkeypatch.setattr(sys, "stderr", earlier)
    handler = log_handler("json")
    earlier.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None))
    assert json.loads(now.getvalue())["msg"] == "hello"
