"""Building an executor from a spec string (the runner's --executor option).

Valid specs:

    echo | sleep | fail            built-in test executors (runner_svc.executors.builtin)
    metered                        echo/sleep/fail by parameters, plus one ledger line
                                   per start (needs ledger_path; turnwire.ledger)
    python:<module>:<name>         a turnwire.executor function or class
                                   (runner_svc.executors.python_api; docs/EXECUTORS.md)
    subprocess+framed:<command>    the framed protocol (runner_svc.executors.frames)
    subprocess:<shell command>     stdout is the result (runner_svc.executors.process)
    callable:<module>:<function>   deprecated for python: (runner_svc.executors.python_callable)

A bad spec raises ValueError naming the valid forms.
"""

from __future__ import annotations

from pathlib import Path

from runner_svc.executors import builtin
from runner_svc.executors.base import Executor
from runner_svc.executors.metered import MeteredExecutor
from runner_svc.executors.process import SubprocessExecutor
from runner_svc.executors.python_api import PythonExecutor, load_python_target
from runner_svc.executors.python_callable import CallableExecutor, import_function

VALID_SPECS = (
    "echo",
    "sleep",
    "fail",
    "metered",
    "python:<module>:<name>",
    "subprocess+framed:<shell command>",
    "subprocess:<shell command>",
    "callable:<module>:<function>",
)
_BUILTINS = {"echo": builtin.echo, "sleep": builtin.sleep, "fail": builtin.fail}


def _invalid(spec: str, why: str) -> ValueError:
    forms = " | ".join(VALID_SPECS)
    return ValueError(f"invalid executor spec {spec!r}: {why}; valid specs: {forms}")


def load_executor(spec: str, *, ledger_path: Path | None = None) -> Executor:
    """The executor a spec names; ValueError with the valid forms when it is bad."""
    kind, sep, argument = spec.partition(":")
    if not sep and kind in _BUILTINS:
        return _BUILTINS[kind]()
    if not sep and kind == "metered":
        if ledger_path is None:
            raise _invalid(spec, "metered needs a ledger path (ledger_path=...)")
        return MeteredExecutor(ledger_path)
    if sep and kind in ("subprocess", "subprocess+framed"):
        if not argument.strip():
            raise _invalid(spec, f"{kind} needs a shell command after '{kind}:'")
        return SubprocessExecutor(argument, framed=kind == "subprocess+framed")
    if sep and kind == "python":
        try:
            return PythonExecutor(load_python_target(argument), target=argument)
        except ValueError as error:
            raise _invalid(spec, str(error)) from error
    if sep and kind == "callable":
        try:
            return CallableExecutor(import_function(argument), target=argument)
        except ValueError as error:
            raise _invalid(spec, str(error)) from error
    raise _invalid(spec, "unknown executor")
