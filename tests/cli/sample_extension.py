"""A minimal extension subcommand, registered by tests through turnwire.cli.EXTENSIONS."""

from __future__ import annotations

import argparse

SUMMARY = "say hello (test extension)"
EXAMPLES = "examples:\n  turnwire hello --name you"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="world")


def run(args: argparse.Namespace) -> int:
    print(f"hello {args.name}")
    return 0
