"""proto/buf.gen.yaml generates working Python, TypeScript and Java clients, offline.

`buf generate` runs once into a temporary directory (its `-o`), with the pinned
local generators only: grpc_tools' protoc (Python), @bufbuild/protoc-gen-es
(TypeScript), and Debian's protoc 3.21.12 and grpc-java plugin (Java). The
generated Python is imported and used in a clean interpreter; the TypeScript is
type-checked with the pinned tsc; the Java messages are compiled with javac
against Debian's protobuf-java and run against a real error trailer made by the
coordinator's own code (tests/clients runs the full Java, Go and Node clients).
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

from tests.clients.debian import require_packages
from tests.contract.repo_copy import REPO_ROOT, buf_generate, in_ci, run
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import status_with_details

TEMPLATE = "proto/buf.gen.yaml"
JAVA_EXAMPLE = REPO_ROOT / "clients" / "java" / "ContractExample.java"
# Debian's libprotobuf-java, the runtime of protoc 3.21.12's Java code.
PROTOBUF_JAVA = Path("/usr/share/java/protobuf.jar")
TSC = REPO_ROOT / "node_modules" / ".bin" / "tsc"
COMMAND_SECONDS = 150

pytestmark = pytest.mark.timeout(300)


def turnwire_protos() -> list[Path]:
    return sorted((REPO_ROOT / "proto").glob("turnwire/**/*.proto"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # The Java generators (protoc 3.21.12, grpc_java_plugin) and the runtime the
    # Java is compiled against are Debian's.
    require_packages("java")
    out = tmp_path_factory.mktemp("buf-generate")
    buf_generate(TEMPLATE, out)
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
        # grpc-java's service stubs, one class per service.
        services = re.findall(r"^service (\w+) \{$", proto.read_text(), re.MULTILINE)
        expected += [generated / "java" / "dev" / package_dir / f"{s}Grpc.java" for s in services]
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
    assert (generated / "java/dev/turnwire/coordinator/v1/TurnServiceGrpc.java").is_file()


# docs/CLIENTS.md's type-check: strict, Node's ESM resolution (nodenext).
TSC_FLAGS = ["--noEmit", "--strict", "--target", "es2022", "--module", "nodenext"]


def test_generated_typescript_type_checks(generated: Path, tmp_path: Path) -> None:
    """Every gen/ts file compiles under the pinned TypeScript, as docs/CLIENTS.md runs it."""
    if not TSC.exists():
        if in_ci():
            pytest.fail("tsc is missing from node_modules: scripts/test runs npm ci first")
        pytest.skip("typescript is not installed (run scripts/test once: it runs npm ci)")
    project = tmp_path / "ts-project"
    shutil.copytree(generated / "ts", project / "gen" / "ts")
    # @bufbuild/protobuf, which the generated code imports, resolves from the repository's.
    (project / "node_modules").symlink_to(REPO_ROOT / "node_modules", target_is_directory=True)
    files = sorted(str(p.relative_to(project)) for p in (project / "gen" / "ts").rglob("*.ts"))
    assert len(files) >= len(turnwire_protos()) + 3  # and google/rpc's three
    checked = run([str(TSC), *TSC_FLAGS, *files], cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr


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


def test_generated_java_compiles_and_decodes_a_coordinator_error_trailer(
    generated: Path, tmp_path: Path
) -> None:
    """javac compiles clients/java/ContractExample.java against gen/java and Debian's
    protobuf-java, and it reads ErrorInfo and RetryInfo from a trailer built by the
    coordinator's own error code."""
    javac, java, jar = shutil.which("javac"), shutil.which("java"), PROTOBUF_JAVA
    # The fixture required openjdk-17-jdk-headless and libprotobuf-java.
    assert javac is not None and java is not None and jar.is_file()
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
