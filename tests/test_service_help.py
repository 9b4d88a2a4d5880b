"""Every flag of both services' commands has a help text and says its default once.

Reads what an operator reads: the ``--help`` output of ``python -m coordinator_svc``
(serve, migrate, prune, tokens add) and ``python -m runner_svc`` (serve, migrate),
as processes with no TURNWIRE_* variable set. Which flags have a default comes
from the parsers themselves (built under the same empty environment).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    ("coordinator_svc", ("serve",)),
    ("coordinator_svc", ("migrate",)),
    ("coordinator_svc", ("prune",)),
    ("coordinator_svc", ("tokens", "add")),
    ("runner_svc", ("serve",)),
    ("runner_svc", ("migrate",)),
]
# A default as help texts state it: "(default X)", "; default: X", "[... default X", ". Default:".
_DEFAULT = re.compile(r"(?:^|[(;\[,.])\s*default\b", re.IGNORECASE)
# What is not a description: the variable and default annotations.
_ANNOTATIONS = re.compile(r"\((?:env|default)\b[^)]*\)|\[env\b[^\]]*\]", re.IGNORECASE)
_SPARSE_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("TURNWIRE_", "OTEL_")) and k not in ("COLUMNS", "LINES")
}


def _help_text(module: str, command: tuple[str, ...]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, *command, "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**_SPARSE_ENV, "COLUMNS": "100"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def flag_blocks(help_text: str) -> dict[str, str]:
    """Each option's help, keyed by its first long flag, lines joined."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in help_text.splitlines():
        if line.startswith("  -"):
            invocation, _, rest = line.strip().partition("  ")
            flags = [word.strip(",") for word in invocation.split() if word.startswith("--")]
            current = blocks.setdefault(flags[0] if flags else invocation, [])
            current.append(rest)
        elif current is not None and line.startswith("   "):
            current.append(line)
        else:
            current = None  # a heading, a group's description or a blank line
    return {flag: " ".join(" ".join(lines).split()) for flag, lines in blocks.items()}


def _parser(module: str, command: tuple[str, ...]) -> argparse.ArgumentParser:
    if module == "coordinator_svc":
        from coordinator_svc.__main__ import build_parser

        parser = build_parser()
    else:
        from runner_svc.__main__ import _parser as runner_parser

        parser = runner_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def _has_a_default(action: argparse.Action) -> bool:
    return action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0


@pytest.fixture
def sparse_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("TURNWIRE_", "OTEL_")):
            monkeypatch.delenv(name)
    yield


@pytest.mark.parametrize(("module", "command"), COMMANDS, ids=lambda v: str(v))
@pytest.mark.usefixtures("sparse_environment")
def test_every_flag_has_help_and_states_its_default_once(
    module: str, command: tuple[str, ...]
) -> None:
    """--help: each flag has a description (not only its variable), a flag whose default
    is set says it, and no flag says its default twice."""
    blocks = flag_blocks(_help_text(module, command))
    problems: list[str] = []
    for action in _parser(module, command)._actions:
        longs = [option for option in action.option_strings if option.startswith("--")]
        if not longs or longs[0] == "--help":
            continue
        text = blocks.get(longs[0])
        if text is None:
            problems.append(f"{longs[0]}: not in --help")
            continue
        if len(_ANNOTATIONS.sub("", text).split()) < 2:
            problems.append(f"{longs[0]}: no help text: {text!r}")
        stated = len(_DEFAULT.findall(text))
        if stated > 1:
            problems.append(f"{longs[0]}: default stated {stated} times: {text!r}")
        if stated == 0 and _has_a_default(action):
            problems.append(f"{longs[0]}: default {action.default!r} not stated: {text!r}")
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_doubled_default_and_a_missing_help() -> None:
    """The parser of --help output sees what argparse's ArgumentDefaultsHelpFormatter did
    to the runner's flags (a second "(default: X)"), and an option with no text."""
    sample = (
        "options:\n"
        "  --listen LISTEN       HOST:PORT (env TURNWIRE_RUNNER_LISTEN; default 127.0.0.1:1)\n"
        "                        (default: 127.0.0.1:1)\n"
        "  --idle-poll IDLE_POLL\n"
        "                        (env TURNWIRE_IDLE_POLL; default 0.5)\n"
    )
    blocks = flag_blocks(sample)
    assert len(_DEFAULT.findall(blocks["--listen"])) == 2
    assert _ANNOTATIONS.sub("", blocks["--idle-poll"]).split() == []
