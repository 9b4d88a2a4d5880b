"""``turnwire check``: judge a finished run against PROTOCOL.md §8 invariants 1-6.

:func:`main_check` takes the arguments after ``check`` and returns the exit
status instead of exiting. The module is also a ``turnwire.cli`` extension
(``SUMMARY``, ``EXAMPLES``, ``configure``, ``run``): listing
``Extension("check", "turnwire.harness.oracle_cli", ...)`` in ``turnwire.cli.EXTENSIONS``
makes it ``turnwire check``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from turnwire.harness.oracle import DEFAULT_CLOCK_SKEW, Status, check_run
from turnwire.harness.oracle_load import OracleInputError
from turnwire.harness.oracle_render import render, verdict_json

EXIT_PASS = 0
EXIT_VIOLATIONS = 1
EXIT_USAGE = 2  # bad arguments, or an input the oracle cannot read
EXIT_PROVES_NOTHING = 3

# The exit status is in EXAMPLES; the client commands' generic epilog would contradict it.
EPILOG = ""
SUMMARY = "judge a finished run: PROTOCOL.md §8 invariants 1-6 (the invariant oracle)"
EXAMPLES = """\
examples:
  turnwire check --journal-url sqlite:///data/journal.db \\
      --runner-store data/r1.db --runner-store data/r2.db --ledger data/ledger.jsonl
  turnwire check --journal-url postgresql://turnwire@db/turnwire \\
      --runner-store r1.db --ledger ledger.jsonl --json --not-healed

`turnwire check` exit status:
  0  pass: invariants 1-6 hold and the run exercised a replay, a reconcile
     without resend or an ambiguity
  1  at least one violation (each shown with its operation's full history)
  2  usage error, or a journal/store/ledger that cannot be read
  3  proves nothing: no violation, but nothing hard was exercised

Assumes every turn of the run executed through the `metered` executor, so the
ledger holds one line per executor start.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of `turnwire check` (also the turnwire CLI extension hook)."""
    parser.add_argument(
        "--journal-url",
        required=True,
        metavar="URL",
        help="the coordinator journal: sqlite:///PATH or postgresql+psycopg://...",
    )
    parser.add_argument(
        "--runner-store",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="a runner store SQLite file (repeat for every runner of the run)",
    )
    parser.add_argument(
        "--ledger", required=True, type=Path, metavar="PATH", help="the metered ledger"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument(
        "--not-healed",
        action="store_true",
        help="the network never healed: a non-terminal operation passes if it is "
        "visible with a reason",
    )
    parser.add_argument(
        "--clock-skew",
        type=float,
        default=DEFAULT_CLOCK_SKEW,
        metavar="SECONDS",
        help=f"tolerated clock difference between processes (default {DEFAULT_CLOCK_SKEW})",
    )


def build_parser(prog: str = "turnwire check") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=SUMMARY,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)
    return parser


def main_check(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run ``turnwire check`` with ``argv`` (without the program name); the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help and on usage errors
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    return execute(args, out if out is not None else sys.stdout)


def run(args: argparse.Namespace) -> int:
    """The turnwire CLI extension hook: judge the run the parsed options name."""
    return execute(args, sys.stdout)


def execute(args: argparse.Namespace, out: TextIO) -> int:
    if args.clock_skew < 0:
        print("turnwire check: --clock-skew cannot be negative", file=sys.stderr)
        return EXIT_USAGE
    try:
        verdict = check_run(
            args.journal_url,
            args.runner_store,
            args.ledger,
            healed=not args.not_healed,
            clock_skew=args.clock_skew,
        )
    except OracleInputError as error:
        print(f"turnwire check: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        out.write(json.dumps(verdict_json(verdict), sort_keys=True) + "\n")
    else:
        out.write(render(verdict))
    return {
        Status.PASS: EXIT_PASS,
        Status.FAIL: EXIT_VIOLATIONS,
        Status.VACUOUS: EXIT_PROVES_NOTHING,
    }[verdict.status]
