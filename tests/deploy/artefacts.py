"""Reading deploy/: what each artefact runs, with which arguments and environment.

- the Dockerfile with Docker's own parser (the ``dockerfile`` package wraps
  BuildKit's), its ENTRYPOINT/CMD/HEALTHCHECK/ENV;
- compose.yaml with PyYAML, interpolated as compose does (``${VAR}``,
  ``${VAR:?message}``, ``$$`` for a literal ``$``), its anchors resolved;
- the systemd units' Exec* lines and Environment=, and the EnvironmentFile examples.

An :class:`Invocation` is one Turnwire program as an artefact starts it: the
image's entrypoint (deploy/entrypoint.sh) maps ``coordinator``/``runner`` to
``turnwire-<service> serve`` and ``migrate`` to ``turnwire-coordinator migrate``;
a shell script's Turnwire command lines are read with shlex.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dockerfile
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
SYSTEMD = DEPLOY / "systemd"
PROGRAMS = ("turnwire", "turnwire-coordinator", "turnwire-runner")
ENTRYPOINT_SERVICES = {
    "coordinator": ("turnwire-coordinator", "serve"),
    "runner": ("turnwire-runner", "serve"),
    "migrate": ("turnwire-coordinator", "migrate"),
}
_INTERPOLATION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[?-][^}]*)?\}")


@dataclass(frozen=True)
class Invocation:
    source: str  # where: "compose.yaml: coordinator-1", "turnwire-runner@.service: ExecStart"
    program: str  # turnwire, turnwire-coordinator or turnwire-runner
    argv: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.source}: {self.program} {' '.join(self.argv)}"


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of one string (``$$`` is a literal ``$``)."""

    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return variables[match.group(1)]

    return _INTERPOLATION.sub(value, text)


def _interpolated(node: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, variables)
    if isinstance(node, list):
        return [_interpolated(item, variables) for item in node]
    if isinstance(node, dict):
        return {key: _interpolated(item, variables) for key, item in node.items()}
    return node


def compose(variables: Mapping[str, str]) -> dict[str, Any]:
    """deploy/compose.yaml as compose reads it, with ``variables`` as deploy/.env."""
    loaded = yaml.safe_load(COMPOSE.read_text())
    return dict(_interpolated(loaded, variables))


def environment_of(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def turnwire_services(project: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the Turnwire image."""
    return {
        name: service
        for name, service in project["services"].items()
        if str(service.get("image", "")).startswith("turnwire:")
    }


def script_invocations(source: str, script: str, env: Mapping[str, str]) -> Iterator[Invocation]:
    """Each Turnwire command line of a shell script."""
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
        command: list[str] = []
        for word in [*words, ";"]:
            if word in {";", "&&", "||", "|", "(", ")", "&"}:
                if command and Path(command[0]).name in PROGRAMS:
                    yield Invocation(source, Path(command[0]).name, tuple(command[1:]), env)
                command = []
            else:
                command.append(word)


def _entrypoint_invocation(source: str, command: list[str], env: Mapping[str, str]) -> Invocation:
    """What deploy/entrypoint.sh runs for ``command`` (its first word chooses)."""
    head, *rest = command
    if head in ENTRYPOINT_SERVICES:
        program, verb = ENTRYPOINT_SERVICES[head]
        return Invocation(source, program, (verb, *rest), env)
    return Invocation(source, Path(head).name, tuple(rest), env)


def compose_invocations(variables: Mapping[str, str]) -> list[Invocation]:
    found: list[Invocation] = []
    for name, service in turnwire_services(compose(variables)).items():
        env = environment_of(service)
        command = list(service.get("command") or ["coordinator"])
        entrypoint = service.get("entrypoint")
        source = f"compose.yaml: {name}"
        if entrypoint:  # a shell script of its own (the certs job)
            found += script_invocations(source, "\n".join(command), env)
        else:
            found.append(_entrypoint_invocation(source, command, env))
    return found


def dockerfile_commands() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(DEPLOY / "Dockerfile")))


def dockerfile_invocations() -> list[Invocation]:
    commands = dockerfile_commands()
    env: dict[str, str] = {}
    for command in commands:
        if command.cmd == "ENV":
            pairs = command.value
            env.update(dict(zip(pairs[::2], pairs[1::2], strict=True)))
    (cmd,) = [c for c in commands if c.cmd == "CMD"]
    return [_entrypoint_invocation("Dockerfile: CMD", list(cmd.value), env)]


@dataclass(frozen=True)
class Unit:
    path: Path
    entries: tuple[tuple[str, str, str], ...]  # (section, key, value), in order

    def values(self, key: str) -> list[str]:
        return [value for _, k, value in self.entries if k == key]

    def value(self, key: str) -> str:
        (value,) = self.values(key)
        return value


def units() -> list[Unit]:
    """deploy/systemd/*.service, keys repeated as systemd allows."""
    found = []
    for path in sorted(SYSTEMD.glob("*.service")):
        section, entries = "", []
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            entries.append((section, key.strip(), value.strip()))
        found.append(Unit(path, tuple(entries)))
    return found


def env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


# Which example EnvironmentFile goes with which unit (the units name /etc/turnwire/...).
UNIT_ENV_FILES = {
    "turnwire-coordinator.service": SYSTEMD / "coordinator.env",
    "turnwire-runner@.service": SYSTEMD / "runner.env",
}


def systemd_invocations() -> list[Invocation]:
    found = []
    for unit in units():
        env = env_file(UNIT_ENV_FILES[unit.path.name])
        for assignment in unit.values("Environment"):
            key, _, value = assignment.partition("=")
            env[key] = value.replace("%i", "runner-1")
        for key in ("ExecStartPre", "ExecStart"):
            for line in unit.values(key):
                words = shlex.split(line)
                program = Path(words[0]).name
                if program in PROGRAMS:
                    source = f"{unit.path.name}: {key}"
                    found.append(Invocation(source, program, tuple(words[1:]), env))
    return found
