"""The built-in subcommands: submit, get, watch, cancel, list.

Each has ``configure(parser)`` (its arguments and examples) and ``run(args) ->
exit status``; ``turnwire.cli`` registers them the way it registers extension
modules. Output goes to stdout, one clear line per error to stderr (printed by
``turnwire.cli.main``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from turnwire.cli import render
from turnwire.cli.exit_codes import ExitCode, for_cancel, for_outcome
from turnwire.cli.options import (
    UsageError,
    add_connection_options,
    add_json_option,
    non_negative_int,
    open_client,
    parse_pairs,
    positive_float,
)
from turnwire.cli.retry_flags import add_retry_flags, retry_from_args
from turnwire.cli.streaming import StreamResume, print_stream
from turnwire.client import (
    InputItem,
    Operation,
    OperationState,
    RetryLater,
    Turn,
    TurnwireClient,
    TurnwireError,
    new_idempotency_key,
)

KINDS = ("writable", "read-only")
POLICIES = ("probe-first", "never-automatic", "safe")
STATES = tuple(render.flag_spelling(s.value) for s in OperationState if s.value != "UNSPECIFIED")


class Hinted(Exception):
    """A client error plus what this command line should do about it."""

    def __init__(self, error: TurnwireError, hint: str) -> None:
        super().__init__(f"{error}; {hint}")
        self.error = error
        self.hint = hint


class WatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a watch; the message says how to resume it."""


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    examples: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _emit_json(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    sys.stdout.flush()


def _emit(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _arrow() -> str:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return "→" if encoding.startswith("utf") else "->"


def _add_wait_options(parser: argparse.ArgumentParser, *, wait_flag: bool) -> None:
    if wait_flag:
        parser.add_argument(
            "--wait",
            action="store_true",
            help="stay and show each transition until the turn is terminal; "
            "the exit status then says how it ended",
        )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="print the turn's streamed output as it arrives (raw text on stdout, lost "
        "chunks said on stderr) instead of each transition, then the final summary"
        + (" (with --wait)" if wait_flag else ""),
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        metavar="SECONDS",
        help="give up waiting after SECONDS (exit 9; the turn keeps running)",
    )


# --- submit ----------------------------------------------------------------


def configure_submit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i",
        "--input",
        action="append",
        metavar="TEXT",
        help="an input item (repeat for several); without it, stdin is read as one item",
    )
    parser.add_argument("--model", default="", metavar="PROVIDER/NAME", help="the model to use")
    parser.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a model parameter, e.g. sleep_ms=500 (repeatable)",
    )
    parser.add_argument("--kind", choices=KINDS, default="writable", help="(default: writable)")
    parser.add_argument("--pool", default="", help="runner pool (default: the default pool)")
    parser.add_argument(
        "--executor",
        default="",
        metavar="NAME",
        help="the runner executor the turn needs, by name (a runner's --executor NAME=SPEC; "
        "default: the runners' default executor); refused at submit when no runner serves it",
    )
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default="probe-first",
        help="what may happen when a dispatch is ambiguous (default: probe-first; "
        "safe means the turn may run more than once)",
    )
    parser.add_argument("--max-attempts", type=non_negative_int, default=0, metavar="N")
    add_retry_flags(parser)
    parser.add_argument("--budget-ms", type=non_negative_int, default=0, metavar="MS")
    parser.add_argument(
        "--deadline", type=positive_float, metavar="SECONDS", help="finish within SECONDS from now"
    )
    parser.add_argument(
        "--metadata", action="append", metavar="KEY=VALUE", help="item metadata (repeatable)"
    )
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="resubmitting with the same key returns the same operation (default: a new key)",
    )
    _add_wait_options(parser, wait_flag=True)


def turn_from_args(args: argparse.Namespace, stdin: IO[bytes] | None) -> Turn:
    """The Turn a submit command line describes; stdin is read only without --input."""
    if args.input:
        items: list[InputItem | str | bytes] = list(args.input)
    elif stdin is not None:
        items = [_stdin_item(stdin.read())]
    else:
        raise UsageError("nothing to submit: give --input TEXT or pipe the input on stdin")
    deadline = None
    if args.deadline is not None:
        deadline = datetime.now(UTC) + timedelta(seconds=args.deadline)
    return Turn.build(
        items=items,
        model=args.model,
        parameters=parse_pairs(args.param, "--param"),
        kind=args.kind,
        pool=args.pool,
        executor=args.executor,
        item_metadata=parse_pairs(args.metadata, "--metadata"),
        deadline=deadline,
        budget_ms=args.budget_ms,
        replay_policy=args.policy,
        max_attempts=args.max_attempts,
        retry=retry_from_args(args),
    )


def _stdin_item(data: bytes) -> InputItem:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return InputItem(content=data, content_type="application/octet-stream")
    return InputItem(content=data)


def _interactive_stdin() -> IO[bytes] | None:
    """stdin's bytes if something is piped in; None at a terminal (nothing to read)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return sys.stdin.buffer


def run_submit(args: argparse.Namespace) -> int:
    turn = turn_from_args(args, None if args.input else _interactive_stdin())
    key = args.idempotency_key or new_idempotency_key()
    with open_client(args) as client:
        try:
            submission = client.submit(turn, idempotency_key=key)
        except RetryLater as error:
            # The turn may have been accepted: only the same key is safe.
            raise Hinted(
                error, f"resubmit with --idempotency-key {key} to get the same turn, never a second"
            ) from None
        if args.json:
            _emit_json(render.submission_json(submission))
        else:
            _emit(render.submission_headline(submission))
        operation_id = submission.operation.operation_id
        if args.stream and args.wait:
            return for_outcome(_streamed(client, operation_id, 0, args))
        if not args.wait:
            if not args.json:
                _emit(render.operation_detail(submission.operation))
                _emit(f"\nfollow it: turnwire watch {operation_id}")
            return ExitCode.OK
        final = follow(client, operation_id, 0, args.timeout, as_json=args.json)
        return for_outcome(final)


# --- watch -----------------------------------------------------------------


def configure_watch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")
    parser.add_argument(
        "--after",
        type=non_negative_int,
        default=0,
        metavar="SEQUENCE",
        help="only events after this sequence (to resume an earlier watch)",
    )
    parser.add_argument(
        "--after-offset",
        type=non_negative_int,
        default=0,
        metavar="OFFSET",
        help="with --stream: only chunks after this offset (to resume an earlier stream)",
    )
    parser.add_argument(
        "--exit-status", action="store_true", help="exit with the status of the terminal state"
    )
    _add_wait_options(parser, wait_flag=False)


def follow(
    client: TurnwireClient,
    operation_id: str,
    after: int,
    timeout: float | None,
    *,
    as_json: bool,
) -> Operation:
    """Print each transition as it happens; return the operation at the end."""
    latest: Operation | None = None
    arrow = _arrow()
    cursor = after
    try:
        for event in client.watch(operation_id, after, timeout=timeout):
            if as_json:
                payload = render.event_json(event)
                if event.operation is not None:
                    payload["operation"] = render.operation_json(event.operation)
                _emit_json(payload)
            else:
                _emit(render.event_line(event, arrow))
            latest = event.operation or latest
            cursor = event.sequence
    except RetryLater as error:
        resume = error.resume_after if error.resume_after is not None else cursor
        raise Hinted(
            error, f"resume with: turnwire watch {operation_id} --after {resume}"
        ) from None
    except KeyboardInterrupt:
        raise WatchInterrupted(
            f"{operation_id} keeps running; resume with: "
            f"turnwire watch {operation_id} --after {cursor}"
        ) from None
    if latest is None or not latest.is_terminal:
        latest = client.get(operation_id)
    if not as_json:
        _emit("")
        _emit(render.operation_detail(latest))
    return latest


def _streamed(
    client: TurnwireClient, operation_id: str, after_offset: int, args: argparse.Namespace
) -> Operation:
    """``--stream``: the output as it arrives, then the final summary (§12)."""
    try:
        return print_stream(client, operation_id, after_offset, args.timeout, as_json=args.json)
    except StreamResume as error:
        raise Hinted(error.error, error.hint) from None
    except KeyboardInterrupt:
        raise WatchInterrupted(
            f"{operation_id} keeps running; resume with: turnwire watch {operation_id} --stream"
        ) from None


def run_watch(args: argparse.Namespace) -> int:
    with open_client(args) as client:
        if args.stream:
            final = _streamed(client, args.operation_id, args.after_offset, args)
            return for_outcome(final) if args.exit_status else ExitCode.OK
        final = follow(client, args.operation_id, args.after, args.timeout, as_json=args.json)
    return for_outcome(final) if args.exit_status else ExitCode.OK


# --- get -------------------------------------------------------------------


def configure_get(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")
    parser.add_argument(
        "--exit-status",
        action="store_true",
        help="exit with the status of the state: 0 SUCCEEDED, 3 FAILED/CANCELLED/REJECTED, "
        "4 TIMED_OUT/PROTOCOL_ERROR, 12 not terminal yet",
    )
    parser.add_argument(
        "--result",
        action="store_true",
        help="print only the raw result output (exit status as with --exit-status)",
    )


def run_get(args: argparse.Namespace) -> int:
    with open_client(args) as client:
        operation = client.get(args.operation_id)
    if args.result:
        if operation.result is not None:
            sys.stdout.buffer.write(operation.result.output)
            sys.stdout.flush()
        else:
            why = f" ({operation.error.reason})" if operation.error is not None else ""
            sys.stderr.write(f"turnwire: no result: {operation.state.value}{why}\n")
        return for_outcome(operation)
    if args.json:
        _emit_json(render.operation_json(operation))
    else:
        _emit(render.operation_detail(operation))
    return for_outcome(operation) if args.exit_status else ExitCode.OK


# --- cancel ----------------------------------------------------------------


def configure_cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="stay and show each transition until the turn is terminal; exit 0 if the "
        "cancel took effect (CANCELLED), 13 if the turn ended first (SUCCEEDED, FAILED, "
        "REJECTED), 4 if it ended ambiguous (TIMED_OUT, PROTOCOL_ERROR)",
    )
    _add_wait_options(parser, wait_flag=False)


def cancel_headline(operation: Operation) -> str:
    if operation.cancel_lost_race:
        return f"too late: {operation.operation_id} finished first and stays SUCCEEDED"
    if operation.is_terminal and operation.state is not OperationState.CANCELLED:
        return f"too late: {operation.operation_id} had already ended {operation.state.value}"
    if operation.is_terminal:
        return f"{operation.operation_id} is {operation.state.value}"
    return (
        f"cancel requested: {operation.operation_id} is {operation.state.value}; "
        "the runner settles the final state"
    )


def run_cancel(args: argparse.Namespace) -> int:
    """Exit 0 while the cancel is pending or once it took effect, 13 when the turn
    had ended otherwise first (exit_codes.for_cancel)."""
    with open_client(args) as client:
        operation = client.cancel(args.operation_id)
        if args.json:
            _emit_json(render.operation_json(operation))
        else:
            _emit(cancel_headline(operation))
        if not args.wait or operation.is_terminal:
            if not args.json:
                _emit(render.operation_detail(operation))
            return for_cancel(operation)
        after = operation.last_event_sequence
        final = follow(client, args.operation_id, after, args.timeout, as_json=args.json)
        if not args.json:
            _emit(cancel_outcome(final))
        return for_cancel(final) if final.is_terminal else ExitCode.NOT_TERMINAL


def cancel_outcome(operation: Operation) -> str:
    """The last line of `cancel --wait`: whether the cancel took effect."""
    if operation.state is OperationState.CANCELLED:
        return f"cancelled: {operation.operation_id} ended CANCELLED"
    return (
        f"too late: {operation.operation_id} ended {operation.state.value} before the "
        "cancel took effect"
    )


# --- list ------------------------------------------------------------------


def configure_list(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        action="append",
        choices=STATES,
        metavar="STATE",
        help="only this state (repeatable; any case): " + ", ".join(STATES),
    )
    parser.add_argument(
        "--limit", type=non_negative_int, default=50, metavar="N", help="at most N (0: all)"
    )
    parser.add_argument("--page-size", type=non_negative_int, default=0, metavar="N")


def limited(pages: Iterator[Any], limit: int) -> tuple[list[Operation], bool]:
    """The first ``limit`` operations across pages (0: all), and whether more exist."""
    taken: list[Operation] = []
    for page in pages:
        for operation in page.operations:
            if limit and len(taken) == limit:
                return taken, True
            taken.append(operation)
        if limit and len(taken) == limit and page.next_page_token:
            return taken, True
    return taken, False


def run_list(args: argparse.Namespace) -> int:
    with open_client(args) as client:
        pages = client.list(args.state or (), page_size=args.page_size)
        operations, more = limited(pages, args.limit)
    if args.json:
        for operation in operations:
            _emit_json(render.operation_json(operation))
        return ExitCode.OK
    if not operations:
        _emit("no operations")
        return ExitCode.OK
    _emit(render.operations_table(operations))
    if more:
        _emit(f"(first {len(operations)} shown; --limit 0 shows all)")
    return ExitCode.OK


BUILTIN: tuple[Command, ...] = (
    Command(
        "submit",
        "submit a turn",
        "examples:\n"
        "  turnwire submit -i 'hello' --model builtin/echo\n"
        "  echo 'hello' | turnwire submit --param sleep_ms=500 --wait\n"
        "  turnwire submit -i 'x' --kind read-only --policy never-automatic --json\n"
        "  turnwire submit -i 'x' --idempotency-key order-42   # safe to repeat",
        configure_submit,
        run_submit,
    ),
    Command(
        "get",
        "show one operation",
        "examples:\n"
        "  turnwire get op_0123\n"
        "  turnwire get op_0123 --json | jq .execution\n"
        "  turnwire get op_0123 --result > out.txt",
        configure_get,
        run_get,
    ),
    Command(
        "watch",
        "show each transition live until the turn is terminal",
        "examples:\n"
        "  turnwire watch op_0123\n"
        "  turnwire watch op_0123 --after 4 --json\n"
        "  turnwire watch op_0123 --exit-status --timeout 60 && echo succeeded",
        configure_watch,
        run_watch,
    ),
    Command(
        "cancel",
        "ask a turn to stop (a turn that finished first stays SUCCEEDED)",
        "examples:\n"
        "  turnwire cancel op_0123\n"
        "  turnwire cancel op_0123 --wait && echo cancelled   # 13: it ended first",
        configure_cancel,
        run_cancel,
    ),
    Command(
        "list",
        "list your operations",
        "examples:\n"
        "  turnwire list\n"
        "  turnwire list --state running --state queued --limit 0 --json",
        configure_list,
        run_list,
    ),
)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    add_connection_options(parser)
    add_json_option(parser)
