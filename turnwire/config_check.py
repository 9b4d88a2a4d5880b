"""``serve --check-config`` on both services: every problem at once, each with its fix.

A check is one of the services' own start-up checks (the same function
start-up calls, which stops at the first problem); ``--check-config`` runs
them all, prints one line per check, and exits 0 when all passed or 2 when any
found a problem. It changes nothing: no file is created, no schema migrated,
no port bound, no journal or store locked.

A check raises when something is wrong (any exception: its message says what,
and usually how to fix it) and returns a short description of what it found
when all is well. :class:`Warned` passes with a warning (the service would
start, but the operator should know); :class:`ConfigProblem` names a fix of
its own.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

EXIT_OK = 0
EXIT_PROBLEMS = 2
_ENV_NAME = re.compile(r"\bTURNWIRE_[A-Z0-9_]*[A-Z0-9]\b")


class ConfigProblem(ValueError):
    """A problem whose fix is not in its message: ``fix`` says what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Warned:
    """A check's result: it passed, but with this warning."""

    text: str


@dataclass(frozen=True)
class Finding:
    subject: str
    verdict: str  # "ok", "warning" or "PROBLEM"
    detail: str
    fix: str = ""


@dataclass
class ConfigReport:
    """The findings of one ``--check-config`` run, in the order checked."""

    program: str
    findings: list[Finding] = field(default_factory=list)

    def check(
        self,
        subject: str,
        run: Callable[[], T],
        *,
        fix: str = "",
        show: Callable[[T], str | Warned] | None = None,
    ) -> T | None:
        """Run one check: its result, or None after recording the problem it raised.
        ``show`` turns the result into the line printed (default: the result itself)."""
        try:
            result = run()
        except Exception as exc:  # every failure is a finding; the report goes on
            message = " ".join(str(exc).split()) or type(exc).__name__
            own_fix = exc.fix if isinstance(exc, ConfigProblem) else fix
            self.findings.append(Finding(subject, "PROBLEM", message, own_fix))
            return None
        shown = show(result) if show is not None else result
        if isinstance(shown, Warned):
            self.findings.append(Finding(subject, "warning", shown.text))
        else:
            self.findings.append(Finding(subject, "ok", _describe(shown)))
        return result

    def skipped(self, subject: str, why: str) -> None:
        """A check that cannot run until an earlier problem is fixed (no verdict of its own)."""
        self.findings.append(Finding(subject, "skipped", why))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "PROBLEM"]

    def print(self, out: IO[str] | None = None) -> int:
        """Print every finding, then the verdict; the exit status (0 all good, 2 problems)."""
        out = out or sys.stdout
        for finding in self.findings:
            print(f"{finding.verdict:<8} {finding.subject}: {finding.detail}", file=out)
            if finding.fix:
                print(f"{'':<8} fix: {finding.fix}", file=out)
        problems = len(self.problems)
        if problems:
            noun = "problem" if problems == 1 else "problems"
            print(f"{self.program}: {problems} {noun} found; fix them and run again", file=out)
            return EXIT_PROBLEMS
        print(f"{self.program}: configuration ok ({len(self.findings)} checks)", file=out)
        return EXIT_OK


def _describe(result: object) -> str:
    if isinstance(result, str) and result:
        return result
    return "ok"


def environment_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every ``TURNWIRE_*`` variable the parser's help names (``(env NAME...)``), its
    subcommands' included: the variables the program reads, as ``--help`` lists them."""
    names: set[str] = set()
    stack = [parser]
    while stack:
        current = stack.pop()
        texts: list[str] = [current.description or ""]
        for action in current._actions:
            texts.append(action.help or "")
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
        for group in current._action_groups:
            texts.append(group.description or "")
        for text in texts:
            names.update(_ENV_NAME.findall(text))
    return names


def check_environment(
    environ: Iterable[str],
    own: set[str],
    client: set[str],
    in_own_namespace: Callable[[str], bool],
) -> str | Warned:
    """The ``TURNWIRE_*`` variables set here. One in this program's namespace that it does
    not read is a problem (misspelt, it would leave its flag at the default without a
    word); one outside it (the other service's, say) is a warning; the `turnwire`
    command's (``client``) pass."""
    present = sorted(name for name in environ if name.startswith("TURNWIRE_"))
    unknown = [name for name in present if name not in own and name not in client]
    misspelt = [name for name in unknown if in_own_namespace(name)]
    if misspelt:
        hints = []
        for name in misspelt:
            close = difflib.get_close_matches(name, sorted(own), n=1)
            hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
        raise ConfigProblem(
            f"this program reads no {', '.join(hints)}",
            "rename or remove it (`--help` names the variable each flag reads)",
        )
    used = [name for name in present if name in own]
    if unknown:
        return Warned(f"not read by this program (another's?): {', '.join(unknown)}")
    return f"{len(used)} TURNWIRE_* variable(s) set, each one this program reads"


def writable_directory_for(path: Path, what: str) -> str:
    """The file ``path`` can be created or replaced by this user: its directory exists
    (or can be made: its nearest existing parent is writable) and is writable."""
    directory = path.parent if str(path.parent) else Path(".")
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{what} {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigProblem(
            f"{what} {path}: this user (uid {os.getuid()}) cannot write in {existing}",
            f"make {existing} writable by the service's user, or choose another path",
        )
    if existing != directory:
        return f"{what} {path}: {directory} will be created"
    return f"{what} {path}: directory writable"
