"""A local Turnwire deployment: one coordinator, N runners, optional fault proxies.

Everything lives under one data directory (printed by ``turnwire up``)::

    DATA/journal.db            the coordinator's SQLite journal
    DATA/runner-1/store.db     each runner's dedupe store
    DATA/ledger.jsonl          the metered executor's execution ledger
    DATA/tokens                token digests -> principals (``coordinator_svc tokens add``)
    DATA/runner-secret         plaintext mode: the secret runners demand of the coordinator
    DATA/certs/                TLS mode: the deployment CA and every process's certificate
                               (``turnwire certs``; keys mode 600)
    DATA/logs/*.log            every process's output

With ``with_proxies`` a fault proxy (``python -m turnwire.faults proxy``) sits
on each coordinator -> runner path, so transport loss can be injected there.

Ports are free ones (``127.0.0.1:0``) unless pinned: ``coordinator_port``,
``runner_base_port`` (runner-N listens on base + N - 1), ``metrics_base_port``
(the coordinator's /metrics on it, runner-N's on base + N); ``console_listen``
serves the operator's console too.

With ``tls`` (what ``turnwire up`` and the demo run) the public API is
served over TLS and every coordinator -> runner hop is mutual TLS: each runner
serves only the certificate named ``coordinator`` (and ``fault-proxy``, the
proxies' own, when they sit in between). Without it everything is plaintext
on loopback and runners demand the shared secret in ``DATA/runner-secret``.
A runner restarts on its remembered port, so the coordinator (and its proxy)
keep reaching it at the same address with a new incarnation.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from turnwire.certs import CA_CERT, issue_deployment
from turnwire.launcher import LaunchError, ManagedProcess, python_module
from turnwire.secure_channels import channel_credentials, runner_sync_channel
from turnwire.transport_security import (
    RunnerCredentials,
    TlsMaterial,
    read_secret_file,
    write_secret_file,
)

# The certificate the fault proxies present to runners (TLS mode with proxies).
PROXY_IDENTITY = "fault-proxy"


@dataclass
class RunnerSlot:
    """One runner, its store, and (optionally) the proxy in front of it."""

    name: str
    process: ManagedProcess
    store: Path
    proxy: ManagedProcess | None = None
    port: int = 0

    @property
    def control_file(self) -> Path:
        return self.store.parent / "proxy-control.addr"

    @property
    def control_address(self) -> str:
        """The fault proxy's control API address (turnwire.faults.FaultControlClient)."""
        if self.proxy is None:
            raise LaunchError(f"{self.name} has no fault proxy")
        return self.control_file.read_text().strip()

    @property
    def dispatch_address(self) -> str:
        """Where the coordinator sends: the proxy if there is one."""
        return self.proxy.address if self.proxy else self.process.address


@dataclass
class LocalDeployment:
    data_dir: Path
    runner_count: int = 2
    executor: str = "metered"
    # More executors every runner serves, as --executor NAME=SPEC (PROTOCOL.md R14).
    named_executors: tuple[str, ...] = ()
    writable_slots: int = 8
    read_only_slots: int = 8
    with_proxies: bool = False
    journal_url: str | None = None
    coordinator_args: tuple[str, ...] = ()
    # Extra flags for every runner process (e.g. ("--otel-endpoint", URL)).
    runner_args: tuple[str, ...] = ()
    runners: list[RunnerSlot] = field(default_factory=list)
    coordinator: ManagedProcess | None = None
    coordinator_port: int = 0
    proxy_seed: int = 0
    tls: bool = False
    token: str = ""
    # Extra environment for every coordinator / runner process this deployment
    # starts (e.g. TURNWIRE_CRASH_AT, turnwire.crashpoints); a restart may add more.
    coordinator_env: Mapping[str, str] = field(default_factory=dict)
    runner_env: Mapping[str, str] = field(default_factory=dict)
    # Extra ``--runner`` spec options per runner name, e.g.
    # {"runner-2": "kinds=read_only"} (coordinator_svc.config.parse_runner_spec).
    runner_options: Mapping[str, str] = field(default_factory=dict)
    # How many of the runners (the first ones) the coordinator gets a --runner
    # flag for (None: all); the others join with `turnwire admin runners add`.
    flagged_runners: int | None = None
    # Every coordinator and runner serves /metrics on 127.0.0.1 (port 0, or from
    # metrics_base_port) and writes where to DATA/<name>.metrics.addr (HTTPS with
    # the deployment CA under tls).
    metrics: bool = False
    metrics_base_port: int = 0
    # runner-N listens on 127.0.0.1:(runner_base_port + N - 1); 0: free ports.
    runner_base_port: int = 0
    # The operator's console (coordinator --console-listen), e.g. "127.0.0.1:0".
    console_listen: str | None = None
    # Also issue a token with the admin scope (principal "admin": AdminService, console).
    with_admin_token: bool = False
    admin_token: str = ""

    @property
    def ledger(self) -> Path:
        return self.data_dir / "ledger.jsonl"

    @property
    def tokens_file(self) -> Path:
        """Lines of principal, token digest, scopes (not JSON; coordinator_svc tokens add)."""
        return self.data_dir / "tokens"

    @property
    def runner_secret_file(self) -> Path:
        return self.data_dir / "runner-secret"

    @property
    def certs_dir(self) -> Path:
        return self.data_dir / "certs"

    @property
    def ca_file(self) -> Path | None:
        """The CA a client must trust to reach the coordinator (None: plaintext)."""
        return self.certs_dir / CA_CERT if self.tls else None

    def _tls_flags(self, name: str) -> list[str]:
        return [
            "--tls-cert", str(self.certs_dir / f"{name}.pem"),
            "--tls-key", str(self.certs_dir / f"{name}.key"),
            "--tls-ca", str(self.certs_dir / CA_CERT),
        ]  # fmt: skip

    def _tls(self, name: str) -> TlsMaterial:
        return TlsMaterial.from_files(
            self.certs_dir / f"{name}.pem", self.certs_dir / f"{name}.key", self.certs_dir / CA_CERT
        )

    def _open_runner_channel(self, address: str) -> Any:
        return runner_sync_channel(self.runner_credentials, address)

    def _open_coordinator_channel(self, address: str) -> Any:
        if not self.tls:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, self.client_credentials())

    def client_credentials(self) -> Any:
        """gRPC channel credentials for a client of the coordinator (None: plaintext)."""
        if not self.tls:
            return None
        return channel_credentials(self._tls("coordinator"), present_certificate=False)

    @property
    def runner_credentials(self) -> RunnerCredentials:
        """What this deployment's runners demand (tests and tools that call a runner)."""
        if self.tls:
            return RunnerCredentials(tls=self._tls("coordinator"))
        return RunnerCredentials(secret=read_secret_file(self.runner_secret_file))

    def _make_credentials(self) -> None:
        if not self.tls:
            if not self.runner_secret_file.exists():
                write_secret_file(self.runner_secret_file)
            return
        if (self.certs_dir / CA_CERT).exists():
            return  # a restarted deployment keeps its CA and certificates
        runners = tuple(f"runner-{index}" for index in range(1, self.runner_count + 1))
        coordinators = ("coordinator", PROXY_IDENTITY) if self.with_proxies else ("coordinator",)
        issue_deployment(self.certs_dir, coordinators=coordinators, runners=runners)

    def _runner_security_flags(self, name: str) -> list[str]:
        if not self.tls:
            return ["--plaintext", "--coordinator-secret-file", str(self.runner_secret_file)]
        identities = ["--coordinator-identity", "coordinator"]
        if self.with_proxies:
            identities += ["--coordinator-identity", PROXY_IDENTITY]
        return [*self._tls_flags(name), *identities]

    @property
    def journal(self) -> str:
        return self.journal_url or f"sqlite:///{self.data_dir / 'journal.db'}"

    @property
    def address(self) -> str:
        if self.coordinator is None:
            raise LaunchError("the coordinator is not started")
        return self.coordinator.address

    def _log(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"

    def _metrics_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.metrics.addr"

    def _metrics_port(self, name: str) -> int:
        """The pinned /metrics port of ``name`` (coordinator: the base; runner-N: base + N)."""
        if not self.metrics_base_port:
            return 0
        if name.startswith("runner-"):
            return self.metrics_base_port + int(name.removeprefix("runner-"))
        return self.metrics_base_port

    def _metrics_flags(self, name: str) -> list[str]:
        """--metrics-listen on a loopback port, its address in a file (none if off)."""
        if not self.metrics:
            return []
        self._metrics_file(name).unlink(missing_ok=True)  # a restart writes its own
        file = str(self._metrics_file(name))
        listen = f"127.0.0.1:{self._metrics_port(name)}"
        return ["--metrics-listen", listen, "--metrics-address-file", file]

    def console_url(self, timeout: float = 10.0) -> str:
        """The console's URL as the coordinator printed it ("console on URL"), bounded."""
        if self.coordinator is None or not self.console_listen:
            raise LaunchError("no console: the coordinator was not given --console-listen")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.coordinator.log_path.read_text(errors="replace")
            found = re.search(r"^console on (\S+)$", text, re.MULTILINE)
            if found:
                return found.group(1)
            time.sleep(0.05)
        raise LaunchError(f"the coordinator did not print its console URL within {timeout:.0f}s")

    def leftovers(self) -> list[tuple[str, str]]:
        """What the deployment leaves in ``data_dir`` once stopped: (path, what it is)."""
        kinds = [
            ("journal.db", "journal.db*", "the coordinator's journal (SQLite)"),
            ("runner-N/store.db", "runner-*/store.db*", "each runner's dedupe store"),
            ("ledger.jsonl", "ledger.jsonl", "the metered executor's record of every start"),
            ("tokens", "tokens", "the tokens file (digests of the tokens printed at start)"),
            ("runner-secret", "runner-secret", "the secret runners demand (plaintext mode)"),
            ("certs/", "certs", "the deployment CA and every certificate and key"),
            ("logs/", "logs", "every process's log"),
            ("*.addr", "*.addr", "the addresses the processes announced"),
        ]
        return [(shown, what) for shown, pattern, what in kinds if any(self.data_dir.glob(pattern))]

    def metrics_address(self, name: str) -> str:
        """Where the process ``name`` serves /metrics (its file, written before it listens)."""
        return self._metrics_file(name).read_text().strip()

    def _runner_process(
        self, name: str, store: Path, listen: str, env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        argv = python_module(
            "runner_svc", "serve",
            "--listen", listen,
            "--store", str(store),
            "--executor", self.executor,
            *(arg for named in self.named_executors for arg in ("--executor", named)),
            "--ledger", str(self.ledger),
            "--writable-slots", str(self.writable_slots),
            "--read-only-slots", str(self.read_only_slots),
            "--name", name,  # on every line of its log (JSON: not a terminal)
            *self._runner_security_flags(name),
            *self._metrics_flags(name),
            *self.runner_args,
        )  # fmt: skip
        return ManagedProcess(
            name,
            argv,
            self._log(name),
            self.data_dir / f"{name}.addr",
            env={**self.runner_env, **(env or {})},
        )

    def _listen_as_before(self, name: str) -> str:
        """The port ``name`` listened on the last time this data directory ran (its
        address file), else a free one: the journal keeps the runner set (PROTOCOL.md
        §11 M8), so a runner started again must be where the journal says it is."""
        previous = self.data_dir / f"{name}.addr"
        try:
            port = int(previous.read_text().strip().rsplit(":", 1)[1])
        except (OSError, IndexError, ValueError):
            return "127.0.0.1:0"
        return f"127.0.0.1:{port}"

    def _proxy_process(
        self, name: str, upstream: str, control_file: Path, listen: str = "127.0.0.1:0"
    ) -> ManagedProcess:
        # The control address file is written before the proxy address file,
        # so once start() returns, both are there.
        argv = python_module(
            "turnwire.faults", "proxy",
            "--listen", listen,
            "--upstream", upstream,
            "--control", "127.0.0.1:0",
            "--control-address-file", str(control_file),
            "--seed", str(self.proxy_seed),
            *(self._tls_flags(PROXY_IDENTITY) if self.tls else ()),
        )  # fmt: skip
        return ManagedProcess(name, argv, self._log(name), self.data_dir / f"{name}.addr")

    def issue_token(self, principal: str, *, scopes: tuple[str, ...] = ()) -> str:
        """Add a principal to the tokens file; return its fresh bearer token."""
        scope_flags = [flag for scope in scopes for flag in ("--scope", scope)]
        done = subprocess.run(
            python_module(
                "coordinator_svc", "tokens", "add",
                "--file", str(self.tokens_file), "--principal", principal, *scope_flags,
            ),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not done.stdout.strip():
            raise LaunchError(f"could not issue a token: {done.stderr.strip()}")
        return done.stdout.strip().splitlines()[-1].split()[-1]

    def start(self, timeout: float = 60.0) -> None:
        """Every runner, then the coordinator. If any of them fails to start, what
        did start is stopped, by PID, before the error goes on: a caller that
        never got a deployment has nothing to stop, and no runner is left behind."""
        try:
            self.start_runners(timeout)
            self.coordinator = self._coordinator_process(f"127.0.0.1:{self.coordinator_port}")
            address = self.coordinator.start(timeout)
            self.coordinator_port = int(address.rsplit(":", 1)[1])
            self.coordinator.wait_healthy(timeout, self._open_coordinator_channel)
        except BaseException:
            self.stop()
            raise

    def start_runners(self, timeout: float = 60.0) -> None:
        """The data directory, a token, credentials and every runner (and proxy)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The ledger exists, empty, before any runner could write it: `turnwire
        # check` then reads "nothing ran yet", not "no ledger given".
        self.ledger.touch(exist_ok=True)
        self.token = self.issue_token("demo")
        if self.with_admin_token:
            self.admin_token = self.issue_token("admin", scopes=("admin",))
        self._make_credentials()
        for index in range(1, self.runner_count + 1):
            name = f"runner-{index}"
            store_dir = self.data_dir / name
            store_dir.mkdir(exist_ok=True)
            store = store_dir / "store.db"
            if self.runner_base_port:
                listen = f"127.0.0.1:{self.runner_base_port + index - 1}"
            else:
                listen = self._listen_as_before(name)
            process = self._runner_process(name, store, listen)
            slot = RunnerSlot(name, process, store)
            self.runners.append(slot)
            address = process.start(timeout)
            slot.port = int(address.rsplit(":", 1)[1])
            process.wait_healthy(timeout, self._open_runner_channel)
            if self.with_proxies:
                proxy = f"proxy-{index}"
                slot.proxy = self._proxy_process(
                    proxy, address, slot.control_file, self._listen_as_before(proxy)
                )
                slot.proxy.start(timeout)

    def _coordinator_process(
        self,
        listen: str,
        env: Mapping[str, str] | None = None,
        *,
        name: str = "coordinator",
        journal: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> ManagedProcess:
        """A coordinator process (``name`` names its log and address file;
        ``journal`` overrides the deployment's journal URL for this one)."""
        runner_flags: list[str] = []
        for slot in self.runners[: self.flagged_runners]:
            options = self.runner_options.get(slot.name)
            spec = f"{slot.name}={slot.dispatch_address}" + (f";{options}" if options else "")
            runner_flags += ["--runner", spec]
        argv = python_module(
            "coordinator_svc", "serve",
            "--listen", listen,
            "--journal-url", journal or self.journal,
            "--tokens-file", str(self.tokens_file),
            *(
                self._tls_flags("coordinator")
                if self.tls
                else ["--plaintext", "--runner-secret-file", str(self.runner_secret_file)]
            ),
            "--migrate",
            *self._metrics_flags(name),
            *(["--console-listen", self.console_listen] if self.console_listen else []),
            *runner_flags,
            *self.coordinator_args,
            *extra_args,
        )  # fmt: skip
        return ManagedProcess(
            name,
            argv,
            self._log(name),
            self.data_dir / f"{name}.addr",
            env={**self.coordinator_env, **(env or {})},
        )

    def restart_coordinator(
        self, *, hard: bool, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> None:
        """SIGKILL (or SIGTERM) the coordinator and start it again on its port.

        ``env`` is added to ``coordinator_env`` for the new process only. A
        coordinator that already exited (a crash point fired) is just reaped."""
        if self.coordinator is None:
            raise LaunchError("the coordinator is not started")
        if hard:
            self.coordinator.kill()
        else:
            self.coordinator.terminate()
        self.coordinator = self._coordinator_process(f"127.0.0.1:{self.coordinator_port}", env)
        self.coordinator.start(timeout)
        self.coordinator.wait_healthy(timeout, self._open_coordinator_channel)

    def restart_runner(
        self,
        name: str,
        *,
        hard: bool,
        wipe_store: bool = False,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        replace_store: Callable[[Path], Path] | None = None,
    ) -> None:
        """Stop a runner (SIGKILL if ``hard``, else SIGTERM) and start it again
        on the same port: same address, new incarnation. ``wipe_store`` deletes
        its dedupe store first (a new store, a new store_id: what a lost disk
        looks like). ``env`` is added to ``runner_env`` for the new process
        only. ``replace_store`` runs while the runner is down and returns the
        store path to start on (what restoring a backup looks like). A runner
        that already exited (a crash point fired) is just reaped."""
        slot = next(s for s in self.runners if s.name == name)
        if hard:
            slot.process.kill()
        else:
            slot.process.terminate()
        if wipe_store:
            for path in slot.store.parent.glob(slot.store.name + "*"):
                path.unlink()
        if replace_store is not None:
            slot.store = replace_store(slot.store)
        slot.process = self._runner_process(name, slot.store, f"127.0.0.1:{slot.port}", env)
        slot.process.start(timeout)
        slot.process.wait_healthy(timeout, self._open_runner_channel)

    def processes(self) -> list[ManagedProcess]:
        found: list[ManagedProcess] = []
        if self.coordinator is not None:
            found.append(self.coordinator)
        for slot in self.runners:
            if slot.proxy is not None:
                found.append(slot.proxy)
            found.append(slot.process)
        return found

    def stop(self) -> None:
        """SIGTERM everything (coordinator first, so it stops sending), by PID."""
        for process in self.processes():
            try:
                process.terminate()
            except Exception as exc:  # keep stopping the others
                print(f"stopping {process.name}: {exc}", file=sys.stderr)
