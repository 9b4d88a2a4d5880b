"""Every Turnwire command the README and docs/ show is one its parser accepts.

Docs drift: a flag renamed, a value the CLI takes only in lower case
(``--state RUNNING``), a subcommand that moved. This test reads every ``sh``
code block of README.md and docs/*.md, finds each command line that runs one
of Turnwire's own programs, and parses it with that program's real argparse
parser (``--help`` included), without running it. It proves the commands are
well formed, not that their output is what the page shows: the pages say
where that was run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_FENCE = re.compile(r"^```(\w*)\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&"}
ELISIONS = {"...", "\u2026"}  # "more flags here"


def _turnwire_parser() -> argparse.ArgumentParser:
    from turnwire.cli import build_parser

    return build_parser()


def _coordinator_parser() -> argparse.ArgumentParser:
    from coordinator_svc.__main__ import build_parser

    return build_parser()


def _runner_parser() -> argparse.ArgumentParser:
    from runner_svc.__main__ import _parser

    return _parser()


def _faults_parser() -> argparse.ArgumentParser:
    from turnwire.faults.cli import build_parser

    return build_parser()


# How a page may spell each program (after any VAR=value prefix), and its parser.
PROGRAMS: dict[tuple[str, ...], Callable[[], argparse.ArgumentParser]] = {
    ("turnwire",): _turnwire_parser,
    ("python", "-m", "turnwire.cli"): _turnwire_parser,
    ("turnwire-coordinator",): _coordinator_parser,
    ("python", "-m", "coordinator_svc"): _coordinator_parser,
    ("turnwire-runner",): _runner_parser,
    ("python", "-m", "runner_svc"): _runner_parser,
    ("python", "-m", "turnwire.faults"): _faults_parser,
}


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    argv: tuple[str, ...]  # the program's arguments, the program itself left out
    program: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {' '.join((*self.program, *self.argv))}"


def _shell_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, joined line) for each logical line of sh/bash blocks."""
    in_block, lang, pending, start = False, "", "", 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line.strip())
        if fence:
            in_block, lang = (not in_block), fence.group(1)
            continue
        if not in_block or lang not in {"sh", "bash", "shell", "console"}:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def _normalise(word: str) -> str:
    """``.venv/bin/turnwire`` and ``/opt/tw/bin/python`` are the same programs."""
    name = word.rsplit("/", 1)[-1]
    return "python" if re.fullmatch(r"python3?(\.\d+)?", name) else name


def _simple_commands(words: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for word in words:
        if word in _SEPARATORS:
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def doc_commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        for number, line in _shell_blocks(page.read_text()):
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            try:
                words = list(lexer)
            except ValueError:  # an unbalanced quote: not a command line
                continue
            for command in _simple_commands(words):
                while command and _ASSIGNMENT.match(command[0]):
                    command = command[1:]
                if command and command[0] in {"exec", "sudo", "time"}:
                    command = command[1:]
                normalised = tuple(_normalise(w) if i == 0 else w for i, w in enumerate(command))
                for program in PROGRAMS:
                    if normalised[: len(program)] == program:
                        found.append(
                            DocCommand(
                                page.relative_to(ROOT).as_posix(),
                                number,
                                tuple(command[len(program) :]),
                                program,
                            )
                        )
                        break
    return found


COMMANDS = doc_commands()


def test_the_pages_show_commands_of_every_program():
    """The scan finds what the pages hold (a broken scan would pass every page vacuously)."""
    programs = {command.program[-1] for command in COMMANDS}
    assert {"turnwire", "coordinator_svc", "runner_svc"} <= programs
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_a_command_the_docs_show_is_accepted_by_its_parser(command: DocCommand):
    """Each documented command parses (exit 0 for --help), as written on the page.

    A page may elide flags with ``...``: then a required flag it left out is
    no error, but every flag it does show must still be right.
    """
    parser = PROGRAMS[command.program]()
    argv = [word for word in command.argv if word not in ELISIONS]
    elided = len(argv) < len(command.argv)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exit_:
            if elided and "the following arguments are required" in err.getvalue():
                return
            assert exit_.code in (0, None), f"{command}\n{err.getvalue()}"


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    """README's quick start: one command runs the main job, one the tests; .ci/run is the latter."""
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]
    assert [words[0] for words in commands] == ["scripts/demo", "scripts/test"]
    assert "exec bash scripts/test" in (ROOT / ".ci" / "run").read_text()
