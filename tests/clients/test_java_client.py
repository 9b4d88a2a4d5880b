"""The Java client (clients/java, grpc-java) against a live coordinator, blocking and async.

Built as docs/CLIENTS.md says: `buf generate --template proto/buf.gen.yaml`
writes gen/java (message classes from Debian's protoc 3.21.12, service stubs
from grpc-java 1.41.3's plugin); javac compiles it with clients/java against
Debian's jars only (clients/java/classpath.txt); java runs the walkthrough,
over TLS through netty-tcnative's OpenSSL (Debian's netty has no JDK ALPN).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import ClientStack
from tests.clients.debian import require_packages
from tests.clients.walkthrough import check_walkthrough, run_walkthrough
from tests.contract.repo_copy import REPO_ROOT, buf_generate

JAVA_CLIENT = REPO_ROOT / "clients" / "java"
CLASSPATH_LIST = JAVA_CLIENT / "classpath.txt"
MAIN_CLASS = "dev.turnwire.examples.Walkthrough"
# Debian installs netty-tcnative's JNI library as libnetty-tcnative.so, but netty 4.1.48
# loads "netty_tcnative", and the library refuses to run under a name it does not expect
# (so a symbolic link fails too): java runs with a copy named as netty looks for it.
TCNATIVE = "libnetty-tcnative.so"
TCNATIVE_AS_NETTY_LOADS_IT = "libnetty_tcnative.so"
# C1 only: one-shot compiles and short runs, where the JIT's second tier costs more than it saves.
FAST_JVM = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
COMMAND_SECONDS = 240

pytestmark = pytest.mark.timeout(480)


@dataclass(frozen=True)
class JavaBuild:
    classpath: str
    library_path: Path


def debian_classpath() -> list[str]:
    return [line for line in CLASSPATH_LIST.read_text().splitlines() if line.strip()]


def tcnative_library() -> Path:
    """Where libnetty-tcnative-jni put its library (the directory is per architecture)."""
    listed = subprocess.run(
        ["dpkg", "-L", "libnetty-tcnative-jni"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    found = [Path(line) for line in listed.stdout.splitlines() if line.endswith(f"/{TCNATIVE}")]
    assert len(found) == 1, listed.stdout
    return found[0]


@pytest.fixture(scope="module")
def java_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaBuild]:
    """gen/java from buf generate, compiled with clients/java against Debian's jars."""
    require_packages("java")
    out = tmp_path_factory.mktemp("java-client")
    buf_generate("proto/buf.gen.yaml", out)
    jars = debian_classpath()
    missing = [jar for jar in jars if not Path(jar).is_file()]
    assert missing == [], f"{CLASSPATH_LIST} names jars that are not installed"
    sources = sorted(
        str(path)
        for root in (out / "gen" / "java", JAVA_CLIENT / "dev")
        for path in root.rglob("*.java")
    )
    (out / "sources.txt").write_text("\n".join(sources) + "\n")
    classes = out / "classes"
    compiled = subprocess.run(
        ["javac", *(f"-J{flag}" for flag in FAST_JVM), "-nowarn", "-d", str(classes),
         "-cp", os.pathsep.join(jars), "@sources.txt"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    library_path = out / "jni"
    library_path.mkdir()
    (library_path / TCNATIVE_AS_NETTY_LOADS_IT).write_bytes(tcnative_library().read_bytes())
    yield JavaBuild(os.pathsep.join([str(classes), *jars]), library_path)


def run_java(build: JavaBuild, *argv: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    return run_walkthrough(
        ["java", *FAST_JVM, f"-Djava.library.path={build.library_path}", "-cp",
         build.classpath, MAIN_CLASS, *argv],
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip


@pytest.mark.parametrize("stub", ["blocking", "async"])
def test_java_walkthrough_submits_watches_resumes_cancels_and_decodes_three_reasons(
    java_build: JavaBuild, client_stack: ClientStack, tmp_path: Path, stub: str
) -> None:
    """grpc-java over TLS, with each stub: idempotent submit, watch, resume by cursor,
    cancel, three ErrorInfos."""
    code, summary, err = run_java(
        java_build, *client_stack.walkthrough_flags(), "--stub", stub, cwd=tmp_path
    )
    assert summary.get("stub") == stub
    check_walkthrough(code, summary, err, output_text=f"hello from java {stub}")


def test_java_walkthrough_refuses_an_unknown_stub(java_build: JavaBuild, tmp_path: Path) -> None:
    """Usage errors exit 2 and say what is wrong, before any call."""
    ran = subprocess.run(
        ["java", *FAST_JVM, "-cp", java_build.classpath, MAIN_CLASS, "--address", "127.0.0.1:1",
         "--token", "x", "--other-token", "y", "--stub", "future"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "--stub must be blocking or async" in ran.stderr
