"""The ``turnwire`` command: submit, get, watch, cancel and list turns.

Subcommands are registered in one place. The built-in ones live in
``turnwire.cli.commands``; others live in their own modules listed in
``EXTENSIONS`` and are imported only when the parser is built. A listed module
that is not installed is skipped, so the command works without it.

An extension module defines::

    SUMMARY = "one line for `turnwire --help`"
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
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

# First: gRPC's own stderr verbosity is read when grpc loads (see the module).
from turnwire.cli import _grpc_logs  # noqa: F401
from turnwire.cli.commands import BUILTIN, Hinted, add_common_options
from turnwire.cli.exit_codes import EPILOG, ExitCode, for_error
from turnwire.cli.options import UsageError, fold_choices
from turnwire.client import TurnwireError

# (subcommand name, module): added by other parts of the project.
EXTENSIONS: tuple[tuple[str, str], ...] = (
    ("up", "turnwire.cli.up"),
    ("demo", "turnwire.cli.demo"),
    ("chaos", "turnwire.cli.chaos"),
    ("check", "turnwire.harness.oracle_cli"),
    ("certs", "turnwire.cli.certs"),
    ("admin", "turnwire.cli.admin"),
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


def _load_extension(module_name: str) -> ModuleType | None:
    """The extension module, or None when it is not installed (then it is skipped)."""
    try:
        if importlib.util.find_spec(module_name) is None:
            return None
    except ModuleNotFoundError:
        return None
    module = importlib.import_module(module_name)
    missing = [name for name in ("configure", "run") if not callable(getattr(module, name, None))]
    if missing:
        # A broken extension is a bug to see at once, not a subcommand to hide.
        raise TypeError(f"{module_name} must define {' and '.join(missing)} (see turnwire.cli)")
    return module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnwire",
        description=_DESCRIPTION,
        epilog=_EXAMPLES + "\n" + EPILOG,
        formatter_class=_formatter,
    )
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
    for name, module_name in EXTENSIONS:
        module = _load_extension(module_name)
        if module is None:
            continue
        summary = str(getattr(module, "SUMMARY", name))
        examples = str(getattr(module, "EXAMPLES", ""))
        # An extension with exit codes of its own says so in EPILOG; the
        # generic one would contradict it.
        epilog = str(getattr(module, "EPILOG", EPILOG))
        sub = subparsers.add_parser(
            name,
            help=summary,
            description=summary,
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
    ExitCode.NO_RUNNER: "no runner serves this pool and kind",
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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
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
