"""``turnwire admin``: the operator's commands, over the coordinator's AdminService.

    turnwire admin ambiguous                     UNKNOWN turns waiting for a verdict, with evidence
    turnwire admin describe OP                   one operation's whole record (any principal)
    turnwire admin verdict OP executed|not-executed --reason TEXT
    turnwire admin requeue OP --reason TEXT      a new operation from a provably unexecuted one
    turnwire admin runners                       the runner set: capacity, health, drains
    turnwire admin runners add NAME HOST:PORT [--pool P] [--kinds K] [--reason TEXT]
    turnwire admin runners drain|undrain NAME [--reason TEXT]
    turnwire admin runners remove NAME --reason TEXT [--force] [--generation N]
    turnwire admin drain RUNNER --reason TEXT / undrain RUNNER   (the same as runners drain/undrain)
    turnwire admin operations [--state S] [--principal P] [--runner R] ...

Every action needs a token with the ``admin`` scope: --token, --token-file,
$TURNWIRE_ADMIN_TOKEN, then $TURNWIRE_TOKEN. Errors print one line on stderr
and exit with the status in ``turnwire.cli.exit_codes`` (10: the operation's
state does not allow it; nothing changed).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from turnwire.cli import admin_render, admin_runners
from turnwire.cli.admin_common import EPILOG, emit, emit_json, formatter, reason_option
from turnwire.cli.admin_runners import (
    configure_drain,
    configure_runners,
    configure_undrain,
    run_drain,
    run_runners,
    run_undrain,
)
from turnwire.cli.commands import STATES, Hinted
from turnwire.cli.exit_codes import ExitCode
from turnwire.cli.options import (
    TOKEN_ENV,
    add_connection_options,
    add_json_option,
    non_negative_int,
    resolve_address,
    resolve_credentials,
    resolve_token,
)
from turnwire.client import (
    AdminClient,
    AdminOperation,
    CheckCredentials,
    Execution,
    NotAllowed,
    OperationEvidence,
    RetryPolicy,
    TurnwireError,
    Verdict,
)

ADMIN_TOKEN_ENV = "TURNWIRE_ADMIN_TOKEN"
EXECUTIONS = tuple(
    e.value.lower().replace("_", "-") for e in Execution if e is not Execution.UNSPECIFIED
)
VERDICTS = ("executed", "not-executed")
_T = TypeVar("_T")

SUMMARY = (
    "the operator's commands (admin token): ambiguous turns and their evidence, verdicts, "
    "requeue, runners and drains, every principal's operations"
)
EXAMPLES = """\
examples:
  export TURNWIRE_ADMIN_TOKEN=...          # a token with the admin scope
  turnwire admin ambiguous                 # UNKNOWN turns waiting for a verdict
  turnwire admin verdict op_0123 not-executed --reason 'runner log: never started'
  turnwire admin requeue op_0123 --reason 'verdict: never ran'
  turnwire admin runners
  turnwire admin runners add r3 10.0.0.7:50061 --reason 'more capacity'
  turnwire admin runners drain r1 --reason 'retire'
  turnwire admin runners remove r1 --reason 'retired'
  turnwire admin drain r1 --reason 'kernel upgrade'; turnwire admin undrain r1
  turnwire admin operations --state timed-out --principal alice
  turnwire admin ACTION --help             (options and examples of one action)"""


@dataclass(frozen=True)
class Action:
    name: str
    summary: str
    examples: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[AdminClient, argparse.Namespace], int]


def _arrow() -> str:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return "→" if encoding.startswith("utf") else "->"


def _upper(flag: str) -> str:
    return flag.upper().replace("-", "_")


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=non_negative_int, default=50, metavar="N", help="at most N (0: all)"
    )
    parser.add_argument(
        "--page-size", type=non_negative_int, default=0, metavar="N", help="per call (0: 50)"
    )


def _limited(pages: Iterator[Any], limit: int) -> tuple[list[_T], bool]:
    """The first ``limit`` items across pages (0: all), and whether more exist."""
    taken: list[_T] = []
    for page in pages:
        for item in page.operations:
            if limit and len(taken) == limit:
                return taken, True
            taken.append(item)
        if limit and len(taken) == limit and page.next_page_token:
            return taken, True
    return taken, False


# --- operations ------------------------------------------------------------


def configure_operations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        action="append",
        choices=STATES,
        metavar="STATE",
        help="only this state (repeatable): " + ", ".join(STATES),
    )
    parser.add_argument(
        "--execution",
        action="append",
        choices=EXECUTIONS,
        metavar="EXECUTION",
        help="only this execution (repeatable): " + ", ".join(EXECUTIONS),
    )
    parser.add_argument("--principal", default="", help="only this principal's (default: all)")
    parser.add_argument("--runner", default="", help="only operations bound to this runner")
    parser.add_argument("--pool", default="", help="only this pool's")
    _add_limit_options(parser)


def run_operations(client: AdminClient, args: argparse.Namespace) -> int:
    pages = client.list_operations(
        [_upper(state) for state in args.state or ()],
        executions=[_upper(execution) for execution in args.execution or ()],
        principal=args.principal,
        runner=args.runner,
        pool=args.pool,
        page_size=args.page_size,
    )
    operations: list[AdminOperation]
    operations, more = _limited(pages, args.limit)
    if args.json:
        for item in operations:
            emit_json(admin_render.admin_operation_json(item))
    elif not operations:
        emit("no operations")
    else:
        emit(admin_render.operations_table(operations))
        if more:
            emit(f"(first {len(operations)} shown; --limit 0 shows all)")
    return ExitCode.OK


# --- ambiguous / describe --------------------------------------------------


def configure_ambiguous(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--include-decided", action="store_true", help="also those that already have a verdict"
    )
    parser.add_argument(
        "--include-open",
        action="store_true",
        help="also those not terminal yet (still being reconciled; no verdict possible yet)",
    )
    _add_limit_options(parser)


def run_ambiguous(client: AdminClient, args: argparse.Namespace) -> int:
    pages = client.list_ambiguous(
        include_decided=args.include_decided,
        include_open=args.include_open,
        page_size=args.page_size,
    )
    cases: list[OperationEvidence]
    cases, more = _limited(pages, args.limit)
    if args.json:
        for evidence in cases:
            emit_json(admin_render.evidence_json(evidence))
        return ExitCode.OK
    if not cases:
        emit("no ambiguous operations waiting for a verdict")
        return ExitCode.OK
    arrow = _arrow()
    emit(f"{len(cases)} ambiguous operation(s): execution UNKNOWN\n")
    emit("\n\n".join(admin_render.evidence_text(evidence, arrow) for evidence in cases))
    if more:
        emit(f"\n(first {len(cases)} shown; --limit 0 shows all)")
    return ExitCode.OK


def configure_describe(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")


def run_describe(client: AdminClient, args: argparse.Namespace) -> int:
    evidence = client.describe(args.operation_id)
    if args.json:
        emit_json(admin_render.evidence_json(evidence))
    else:
        emit(admin_render.admin_operation_detail(evidence.operation))
        emit("")
        emit(admin_render.evidence_text(evidence, _arrow(), headline=False))
    return ExitCode.OK


# --- verdict / requeue -----------------------------------------------------


def configure_verdict(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")
    parser.add_argument(
        "verdict", choices=VERDICTS, help="what you established: executed or not-executed"
    )
    reason_option(parser, "the evidence you relied on; recorded with your principal")


def run_verdict(client: AdminClient, args: argparse.Namespace) -> int:
    recorded = client.record_verdict(args.operation_id, args.verdict, reason=args.reason)
    if args.json:
        emit_json(admin_render.verdict_json(recorded))
        return ExitCode.OK
    emit(admin_render.verdict_headline(recorded))
    emit(admin_render.admin_operation_detail(recorded.operation))
    verdict = recorded.operation.operation.verdict
    if verdict is not None and verdict.verdict is Verdict.NOT_EXECUTED:
        emit(f"\nrun it again: turnwire admin requeue {args.operation_id} --reason TEXT")
    return ExitCode.OK


def configure_requeue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operation_id", metavar="OPERATION")
    reason_option(parser, "recorded on the new operation's first event")


def run_requeue(client: AdminClient, args: argparse.Namespace) -> int:
    result = client.requeue(args.operation_id, reason=args.reason)
    if args.json:
        emit_json(admin_render.requeue_json(result))
        return ExitCode.OK
    emit(admin_render.requeue_headline(result))
    emit(admin_render.admin_operation_detail(result.operation))
    emit(f"\nfollow it: turnwire watch {result.operation.operation_id} (with the owner's token)")
    return ExitCode.OK


# --- runners / drain -------------------------------------------------------


ACTIONS: tuple[Action, ...] = (
    Action(
        "ambiguous",
        "operations whose execution is UNKNOWN, with their evidence (attempts, incarnations, "
        "store ids, what each runner said); by default the terminal ones with no verdict yet",
        "examples:\n"
        "  turnwire admin ambiguous\n"
        "  turnwire admin ambiguous --include-decided --include-open --limit 0\n"
        "  turnwire admin ambiguous --json | jq -r .operation.operation_id",
        configure_ambiguous,
        run_ambiguous,
    ),
    Action(
        "describe",
        "one operation of any principal with its whole record: attempts, events, verdicts",
        "examples:\n  turnwire admin describe op_0123\n  turnwire admin describe op_0123 --json",
        configure_describe,
        run_describe,
    ),
    Action(
        "verdict",
        "record whether a terminal UNKNOWN operation executed (audited and final; its state, "
        "execution and events are never rewritten)",
        "examples:\n"
        "  turnwire admin verdict op_0123 not-executed --reason 'runner r1 log: never started'\n"
        "  turnwire admin verdict op_0123 executed --reason 'provider invoice 8812 bills it'",
        configure_verdict,
        run_verdict,
    ),
    Action(
        "requeue",
        "submit an operation's turn again as a NEW operation: only one proven NOT_STARTED or "
        "given a not-executed verdict (asking twice returns the same new operation)",
        "examples:\n  turnwire admin requeue op_0123 --reason 'verdict: never ran'",
        configure_requeue,
        run_requeue,
    ),
    Action(
        "runners",
        "the runner set: every member's address, pools, kinds, generation, who added it, "
        "incarnation, store id, slots and use, turns bound, drained, health; and its verbs "
        "add, drain, undrain, remove",
        "examples:\n  turnwire admin runners\n  turnwire admin runners --json | jq .health\n"
        "  turnwire admin runners add r3 10.0.0.7:50061 --pool default --reason 'capacity'\n"
        "  turnwire admin runners drain r1 --reason 'retire'\n"
        "  turnwire admin runners remove r1 --reason 'retired'\n"
        "  turnwire admin runners remove r1 --force --reason 'host lost'",
        configure_runners,
        run_runners,
    ),
    Action(
        "drain",
        "give a runner no new turns (turns bound to it finish there; durable across restarts "
        "and replicas)",
        "examples:\n  turnwire admin drain r1 --reason 'kernel upgrade'",
        configure_drain,
        run_drain,
    ),
    Action(
        "undrain",
        "let a drained runner take new turns again",
        "examples:\n  turnwire admin undrain r1",
        configure_undrain,
        run_undrain,
    ),
    Action(
        "operations",
        "every principal's operations, oldest first, with filters",
        "examples:\n"
        "  turnwire admin operations --principal alice --state running\n"
        "  turnwire admin operations --execution unknown --runner r1 --limit 0 --json",
        configure_operations,
        run_operations,
    ),
)


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="admin_action", metavar="ACTION", required=True)
    for action in ACTIONS:
        sub = actions.add_parser(
            action.name,
            help=action.summary,
            description=action.summary
            + f"\n\nThe token needs the admin scope (--token, --token-file, ${ADMIN_TOKEN_ENV}, "
            f"then ${TOKEN_ENV}).",
            epilog=action.examples + "\n\n" + EPILOG,
            formatter_class=formatter,
        )
        action.configure(sub)
        add_connection_options(sub)
        add_json_option(sub)
        sub.set_defaults(admin_run=action.run)


def open_admin_client(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> AdminClient:
    """The AdminClient the connection options describe; $TURNWIRE_ADMIN_TOKEN wins
    over $TURNWIRE_TOKEN (an operator often holds both a tenant and an admin token)."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get(ADMIN_TOKEN_ENV):
        environ[TOKEN_ENV] = environ[ADMIN_TOKEN_ENV]
    return AdminClient(
        resolve_address(args, environ),
        resolve_token(args, environ),
        timeout=args.rpc_timeout,
        retries=RetryPolicy(attempts=1 + args.retries),
        credentials=resolve_credentials(args, environ),
    )


def hint_for(error: TurnwireError, args: argparse.Namespace) -> str | None:
    """What to do about an AdminService refusal, in terms of this command line."""
    operation = getattr(args, "operation_id", "OPERATION")
    if isinstance(error, CheckCredentials) and error.reason == "SCOPE_MISSING":
        return (
            "admin commands need a token with the admin scope "
            "(python -m coordinator_svc tokens add --file F --principal ops --scope admin)"
        )
    if not isinstance(error, NotAllowed):
        return None
    runner_hint = admin_runners.hint_for(error, args)
    if runner_hint is not None:
        return runner_hint
    if error.reason == "OPERATION_NOT_TERMINAL":
        return f"wait for its end (where it stands: turnwire admin describe {operation})"
    if error.reason == "VERDICT_CONFLICT":
        recorded = error.metadata.get("recorded", "another verdict")
        by = error.metadata.get("by", "")
        return f"{recorded} is on record{' (by ' + by + ')' if by else ''}; a verdict is final"
    if error.reason == "REQUEUE_NOT_ALLOWED":
        return (
            "only a turn proven NOT_STARTED or given a not-executed verdict may run again: "
            f"turnwire admin describe {operation}"
        )
    if error.reason == "OPERATION_NOT_AMBIGUOUS":
        execution = error.metadata.get("execution", "")
        return f"its execution is known{' (' + execution + ')' if execution else ''}: no verdict"
    return None


def run(args: argparse.Namespace) -> int:
    action: Callable[[AdminClient, argparse.Namespace], int] = args.admin_run
    with open_admin_client(args) as client:
        try:
            return int(action(client, args))
        except TurnwireError as error:
            hint = hint_for(error, args)
            if hint is None:
                raise
            raise Hinted(error, hint) from None
