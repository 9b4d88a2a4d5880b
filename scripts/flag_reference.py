"""Writes the flag tables of docs/CONFIGURATION.md from the services' own parsers.

    .venv/bin/python scripts/flag_reference.py          # rewrite the generated tables
    .venv/bin/python scripts/flag_reference.py --check  # exit 1 if a table is stale

Each table sits between ``<!-- flags: PROGRAM SUBCOMMAND -->`` and
``<!-- end flags -->`` in the page; everything else on the page is written by
hand. The tables come from the argparse parsers the services run, with every
``TURNWIRE_*`` variable removed from the environment first (the parsers show
a default "as it applies now", the variable's value included), so the page
never drifts from ``--help``: tests/docs/test_flag_reference.py runs --check.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "CONFIGURATION.md"
_BLOCK = re.compile(r"(<!-- flags: (?P<key>[^>]+?) -->\n)(?P<body>.*?)(<!-- end flags -->)", re.S)


def _coordinator() -> argparse.ArgumentParser:
    from coordinator_svc.__main__ import build_parser

    return build_parser()


def _runner() -> argparse.ArgumentParser:
    from runner_svc.__main__ import _parser

    return _parser()


PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "coordinator": _coordinator,
    "runner": _runner,
}


def _subparser(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for name in path:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                parser = action.choices[name]
                break
        else:
            raise SystemExit(f"no subcommand {name!r} (docs/CONFIGURATION.md names it)")
    return parser


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(key: str) -> str:
    """The markdown table for ``PROGRAM [SUBCOMMAND...]``, one row per flag."""
    program, *path = key.split()
    parser = _subparser(PARSERS[program](), path)
    rows = ["| flag | what it does (environment variable; default) |", "| --- | --- |"]
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        if action.nargs != 0 and action.metavar is not None:
            flags += f" `{action.metavar}`"
        elif action.nargs != 0:
            flags += f" `{action.dest.upper()}`"
        help_text = (action.help or "") % {**vars(action), "prog": parser.prog}
        rows.append(f"| {flags} | {_cell(help_text)} |")
    return "\n".join(rows) + "\n"


def render(page: str) -> str:
    return _BLOCK.sub(lambda m: m.group(1) + table(m.group("key")) + m.group(4), page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    args = parser.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("TURNWIRE_")]:
        del os.environ[name]
    sys.path.insert(0, str(ROOT))
    current = PAGE.read_text()
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(
                f"{PAGE.relative_to(ROOT)} is stale: run .venv/bin/python scripts/flag_reference.py"
            )
            return 1
        print(f"{PAGE.relative_to(ROOT)}: every flag table matches the parsers")
        return 0
    PAGE.write_text(wanted)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
