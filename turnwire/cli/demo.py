"""``turnwire demo``: the same as ``turnwire up --demo``."""

from __future__ import annotations

import argparse

from turnwire.cli import up

SUMMARY = (
    "the demo of the promise: a local deployment, turns under injected transport loss "
    "and a runner restart, then a table of what happened (exit 1 on any duplicate or loss)"
)
EXAMPLES = """examples:
  turnwire demo
  turnwire demo --turns 200 --seed 3 --data-dir ./demo-data"""
EPILOG = up.EPILOG


def configure(parser: argparse.ArgumentParser) -> None:
    up.configure(parser, demo_flag=False)


def run(args: argparse.Namespace) -> int:
    args.demo = True
    return up.run(args)
