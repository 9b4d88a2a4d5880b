"""What is installed: Turnwire's version, its `server` extra, its packaged data.

One wheel, two install shapes: ``pip install turnwire`` is the client (the
SDK and the CLI's client commands); ``pip install 'turnwire[server]'`` adds
what the coordinator, the runner and the CLI's local tools need. The lists
live in pyproject.toml alone: this module reads them back from the installed
distribution's metadata (importlib.metadata), and never imports the extra's
modules to find out, so a client command stays light (importlib.metadata
itself is imported only when asked: it costs ~25 ms).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

DISTRIBUTION = "turnwire"
SERVER_EXTRA = "server"
INSTALL_SERVER = "pip install 'turnwire[server]'"
REINSTALL = (
    "reinstall Turnwire: pip install --force-reinstall 'turnwire[server]' "
    "(in a checkout: pip install -e '.[dev]')"
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class MissingPackageData(RuntimeError):
    """A data directory the services need is not installed (an incomplete install)."""


def version() -> str:
    """The installed distribution's version (pyproject.toml's, the one source of truth)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


def missing_for_extra(extra: str) -> list[str]:
    """The distributions ``turnwire[extra]`` requires that are not installed.

    A requirement with an environment marker besides the extra's own (uvloop:
    not on Windows) is optional by nature and not counted. Nothing is missing
    when Turnwire itself is not installed: there is no metadata to compare.
    """
    from importlib import metadata

    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    wanted = f'extra == "{extra}"'
    missing = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        found = _NAME.match(spec.strip())
        if found is None or marker.strip() != wanted:
            continue
        try:
            metadata.distribution(found.group())
        except metadata.PackageNotFoundError:
            missing.append(found.group())
    return missing


def server_extra_problem(command: str) -> str | None:
    """Why ``command`` cannot run in this install (one line naming the fix), or None."""
    missing = missing_for_extra(SERVER_EXTRA)
    if not missing:
        return None
    named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"{command} needs the server extra (not installed: {named}): {INSTALL_SERVER}"


def invoked_as(script: str, module: str) -> str:
    """How this process was started, for usage and error lines: the console script
    ``script`` (pyproject.toml) or ``python -m module`` (the same program)."""
    return script if Path(sys.argv[0]).name == script else f"python -m {module}"


def exit_unless_server_installed(command: str, status: int) -> None:
    """For a service's entry point: exit with ``status`` and one line on stderr when the
    server extra is missing (a client-only install), before any import needs it."""
    problem = server_extra_problem(command)
    if problem is not None:
        sys.stderr.write(f"{problem}\n")
        raise SystemExit(status)


def alembic_environment(package: str) -> Path:
    """The folder of the Alembic environment installed as ``package``.

    Found through importlib.resources, so it is wherever the package is
    installed (site-packages, or the checkout for ``pip install -e``), never a
    path relative to the source tree. Alembic reads it from the file system, so
    a zipped install is refused. MissingPackageData names what is absent.
    """
    try:
        folder = resources.files(package)
    except ModuleNotFoundError:
        raise MissingPackageData(
            f"Turnwire's install is incomplete: no package {package} (an Alembic "
            f"environment); {REINSTALL}"
        ) from None
    if not isinstance(folder, Path):
        raise MissingPackageData(
            f"{package} is not a folder on disk ({folder!r}): Alembic needs Turnwire "
            "installed unzipped"
        )
    absent = [name for name in ("env.py", "versions") if not (folder / name).exists()]
    if absent:
        raise MissingPackageData(
            f"Turnwire's install is incomplete: {folder} lacks {', '.join(absent)}; {REINSTALL}"
        )
    return folder


class _VersionAction(argparse.Action):
    """``--version``: the label and the distribution version, read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, label: str = "") -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )
        self.label = label

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        sys.stdout.write(f"{self.label} {version()}\n")
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser, label: str) -> None:
    """``--version`` on ``parser``: prints ``LABEL VERSION`` and exits 0."""
    parser.add_argument("--version", action=_VersionAction, label=label)
