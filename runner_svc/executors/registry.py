"""Several executors per runner, by name (PROTOCOL.md R14; ``--executor NAME=SPEC``).

Each ``--executor`` value is ``NAME=SPEC`` or a bare ``SPEC``; a bare one is the
*default* executor, named ``default``, which runs every turn that names none.
A NAME is 1..63 of ``a-z 0-9 _ . -``, starting with a letter or digit; a spec
never starts with one followed by ``=`` (kinds are plain words, then ``:``), so
``subprocess:env A=1 cmd`` is a bare spec. Each name at most once.

A runner started with named executors only has no default executor: a turn
that names none is refused EXECUTOR_NOT_SERVED, never run on a test executor
by surprise. With no ``--executor`` at all the default is ``echo``, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner_svc.core.model import DEFAULT_EXECUTOR
from runner_svc.executors.base import Executor
from runner_svc.executors.loading import load_executor
from turnwire.vocabulary import split_executor_flag

split_named = split_executor_flag


@dataclass(frozen=True)
class ExecutorSet:
    """The executors one runner serves, by name."""

    by_name: Mapping[str, Executor]

    @classmethod
    def single(cls, executor: Executor) -> ExecutorSet:
        """One executor, the default."""
        return cls({DEFAULT_EXECUTOR: executor})

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.by_name)

    def get(self, name: str) -> Executor | None:
        return self.by_name.get(name or DEFAULT_EXECUTOR)

    def kinds(self) -> Iterator[tuple[str, str]]:
        """(name, kind) per executor, by name (GetRunnerInfo)."""
        for name in sorted(self.by_name):
            yield name, self.by_name[name].name

    def describe(self) -> str:
        return ", ".join(f"{name}={kind}" for name, kind in self.kinds()) or "none"


def load_executors(flags: Sequence[str], *, ledger_path: Path | None = None) -> ExecutorSet:
    """The executors ``--executor`` values name; ValueError says which value is bad."""
    loaded: dict[str, Executor] = {}
    for flag in flags:
        name, spec = split_named(flag.strip())
        if name in loaded:
            raise ValueError(f"--executor {name!r} is given twice; each name serves once")
        if not spec.strip():
            raise ValueError(f"--executor {flag!r} names no spec after '='")
        loaded[name] = load_executor(spec.strip(), ledger_path=ledger_path)
    return ExecutorSet(loaded)
