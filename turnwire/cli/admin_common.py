"""What every ``turnwire admin`` action shares: output, the reason option, the help's epilog."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

EPILOG = """\
exit status:
  0    ok (a replay, e.g. the same verdict again, is ok too: the output says so)
  1    unexpected error (an answer outside the contract: please report it)
  2    usage error: bad arguments, or the coordinator refused them
       (ARGUMENT_INVALID, PAGE_TOKEN_INVALID)
  5    credentials missing, unknown or expired, or the token lacks the admin
       scope (SCOPE_MISSING)
  6    no such operation (OPERATION_NOT_FOUND) or runner (RUNNER_NOT_FOUND)
  7    coordinator unavailable after retries: try again later
  8    requeue: no runner serves the turn's pool and kind
  10   the operation's or the runner's state does not allow it, nothing changed:
       OPERATION_NOT_TERMINAL, OPERATION_NOT_AMBIGUOUS, VERDICT_CONFLICT,
       REQUEUE_NOT_ALLOWED, RUNNER_CONFLICT, RUNNER_NOT_DRAINED, RUNNER_HAS_TURNS,
       RUNNER_CREDENTIALS_MISSING
  130  interrupted (Ctrl-C)
"""


def emit(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def emit_json(payload: Mapping[str, Any]) -> None:
    emit(json.dumps(payload, sort_keys=True))


def reason_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--reason",
        required=True,
        metavar="TEXT",
        help=f"why (required, 1..2000 characters; {what})",
    )


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)
