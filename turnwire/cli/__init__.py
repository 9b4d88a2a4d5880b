"""The ``turnwire`` command: submit, get, watch, cancel and list turns.

Subcommands are registered in one place. The built-in ones live in
``turnwire.cli.commands``; others live in their own modules listed in
``EXTENSIONS``, each with the line ``turnwire --help`` shows for it. A module
is imported only when its command is the one run (or all of them, for
``build_parser()`` without arguments), so a client command never loads what
another needs. An extension marked ``server=True`` needs the `server` extra
(``pip install 'turnwire[server]'``); without it the command says so and exits
2 instead of running.

An extension module defines::

    SUMMARY = "the description in its own --help"   # optional (else the listed line)
    EXAMPLES = "examples:\\n  turnwire demo ..."      # optional, shown in its --help
    def configure(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...       # the exit status

``configure`` may call ``turnwire.cli.options.add_connection_options`` and
``add_json_option`` and build its client with ``options.open_client(args)``.
Errors from the client SDK raised by ``run`` are printed and mapped to exit
statuses like the built-in commands' (see ``turnwire.cli.exit_codes``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import ModuleType

# First: gRPC's own stderr verbosity is read when grpc loads (see the module).
from turnwire.cli import _grpc_logs  # noqa: F401
from turnwire.cli.commands import BUILTIN, Hinted, add_common_options
from turnwire.cli.exit_codes import EPILOG, ExitCode, for_error
from turnwire.cli.options import UsageError, fold_choices
from turnwire.client import TurnwireError
from turnwire.distribution import add_version_flag, server_extra_problem


@dataclass(frozen=True)
class Extension:
    """A subcommand in its own module (imported only when it runs)."""

    name: str
    module: str
    summary: str  # its line in `turnwire --help`
    server: bool = False  # needs `pip install 'turnwire[server]'`


EXTENSIONS: tuple[Extension, ...] = (
    Extension("up", "turnwire.cli.up", "run a coordinator and runners here until Ctrl-C", True),
    Extension("demo", "turnwire.cli.demo", "the demo of the promise, on a local deployment", True),
    Extension("chaos", "turnwire.cli.chaos", "seeded chaos on a local deployment, judged", True),
    Extension("check", "turnwire.harness.oracle_cli", "judge a finished run (§8 invariants)", True),
    Extension("certs", "turnwire.cli.certs", "make a CA and mutual-TLS certificates", True),
    Extension("admin", "turnwire.cli.admin", "the operator's commands (admin token)"),
)

_DESCRIPTION = """\
Submit billable turns to a Turnwire coordinator and follow them: no turn runs
twice, none is silently lost, and every final status is true, including
"we cannot know whether it ran" (execution UNKNOWN).

The coordinator address comes from --address or $TURNWIRE_ADDRESS (default
127.0.0.1:50051); the token from --token, --token-file, $TURNWIRE_TOKEN or
$TURNWIRE_TOKEN_FILE; TLS from --ca-file or $TURNWIRE_CA_FILE (the CA that
signed the coordinator's certificate; none: plaintext). The Python SDK reads
the same variables (TurnwireClient.from_env()).
"""

_EXAMPLES = """\
examples:
  export TURNWIRE_TOKEN=s3cret
  turnwire submit -i 'hello' --model builtin/echo --wait
  turnwire list --state running
  turnwire watch op_0123 --exit-status
  turnwire cancel op_0123
  turnwire COMMAND --help      (options and examples of one command)
"""

DEBUG_ENV = "TURNWIRE_DEBUG"
Handler = Callable[[argparse.Namespace], int]


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _load_extension(module_name: str) -> ModuleType:
    module = importlib.import_module(module_name)
    missing = [name for name in ("configure", "run") if not callable(getattr(module, name, None))]
    if missing:
        # A broken extension is a bug to see at once, not a subcommand to hide.
        raise TypeError(f"{module_name} must define {' and '.join(missing)} (see turnwire.cli)")
    return module


def command_named(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the
    top-level options, --help and --version, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(configure: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser. ``configure`` names the extensions whose modules are imported and
    whose options are built (None: every one); the others are listed by summary."""
    parser = argparse.ArgumentParser(
        prog="turnwire",
        description=_DESCRIPTION,
        epilog=_EXAMPLES + "\n" + EPILOG,
        formatter_class=_formatter,
    )
    add_version_flag(parser, "turnwire")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in BUILTIN:
        sub = subparsers.add_parser(
            command.name,
            help=command.summary,
            description=command.summary,
            epilog=command.examples + "\n\n" + EPILOG,
            formatter_class=_formatter,
        )
        command.configure(sub)
        add_common_options(sub)
        sub.set_defaults(handler=command.run)
    # Only the top-level help, or a server command, reads the install's metadata.
    shown = [e for e in EXTENSIONS if configure is None or not configure or e.name in configure]
    server_missing = any(e.server for e in shown) and server_extra_problem("") is not None
    for extension in EXTENSIONS:
        unavailable = extension.server and server_missing
        summary = extension.summary + (" (needs turnwire[server])" if unavailable else "")
        if unavailable or (configure is not None and extension.name not in configure):
            subparsers.add_parser(extension.name, help=summary)
            continue
        module = _load_extension(extension.module)
        # An extension with exit codes of its own says so in EPILOG; the
        # generic one would contradict it.
        epilog = str(getattr(module, "EPILOG", EPILOG))
        examples = str(getattr(module, "EXAMPLES", ""))
        sub = subparsers.add_parser(
            extension.name,
            help=summary,
            description=str(getattr(module, "SUMMARY", summary)),
            epilog=(examples + "\n\n" if examples else "") + epilog,
            formatter_class=_formatter,
        )
        module.configure(sub)
        sub.set_defaults(handler=module.run)
    fold_choices(parser)
    return parser


def _fail(message: str, code: ExitCode) -> int:
    sys.stderr.write(f"turnwire: {message}\n")
    sys.stderr.flush()
    return int(code)


_ADVICE: dict[ExitCode, str] = {
    ExitCode.USAGE: "fix the request",
    ExitCode.CREDENTIALS: "check the token (--token, --token-file, $TURNWIRE_TOKEN)",
    ExitCode.NOT_FOUND: "not found",
    ExitCode.UNAVAILABLE: "coordinator unavailable, try again later",
    ExitCode.NO_RUNNER: "no runner serves this turn (nothing was stored)",
    ExitCode.STILL_RUNNING: "not finished yet (it keeps running)",
    ExitCode.NOT_ALLOWED: "not allowed now (nothing changed)",
    ExitCode.CONFIGURATION: "connection misconfigured (nothing was sent)",
    ExitCode.UNEXPECTED: "unexpected answer, please report it",
}


def describe_error(error: TurnwireError | Hinted) -> tuple[str, ExitCode]:
    """The one stderr line for a client error, and the exit status it means."""
    base = error.error if isinstance(error, Hinted) else error
    code = for_error(base)
    message = f"{_ADVICE.get(code, 'error')}: {base}"
    if isinstance(error, Hinted):
        message += f"; {error.hint}"
    return message, code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (never raises for expected errors)."""
    words = sys.argv[1:] if argv is None else list(argv)
    command = command_named(words)
    if any(e.server and e.name == command for e in EXTENSIONS):
        problem = server_extra_problem(str(command))
        if problem is not None:
            return _fail(problem, ExitCode.USAGE)
    parser = build_parser(configure=() if command is None else (command,))
    try:
        args = parser.parse_args(words)
    except SystemExit as exit_:  # --help, or a usage error already printed by argparse
        return exit_.code if isinstance(exit_.code, int) else int(ExitCode.USAGE)
    handler: Handler = args.handler
    try:
        return int(handler(args))
    except UsageError as error:
        return _fail(f"usage: {error}", ExitCode.USAGE)
    except (TurnwireError, Hinted) as error:
        message, code = describe_error(error)
        return _fail(message, code)
    except KeyboardInterrupt as interrupt:
        detail = str(interrupt) or "the turn itself is not cancelled"
        return _fail(f"interrupted: {detail}", ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (`turnwire watch ... | head`): nothing left to say.
        return int(ExitCode.OK)
    except Exception as error:  # a bug: one line for the person, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        return _fail(
            f"unexpected {type(error).__name__}: {error} (set {DEBUG_ENV}=1 for a traceback)",
            ExitCode.UNEXPECTED,
        )
