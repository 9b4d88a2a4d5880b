"""A generic client (buf curl, from the repository's npm toolchain) reads a refusal's
ErrorInfo with nothing but the server: reflection serves google/rpc/error_details.proto
on both services.

buf curl prints a refusal's details as their type and base64 bytes (it decodes
details only with the types built into the buf binary, which has no
google.rpc.ErrorInfo). What reflection gives is the schema to decode them: buf
curl asks ServerReflectionInfo for the file containing google.rpc.ErrorInfo,
and `buf convert` decodes the detail with that file.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from tests.clients.conftest import ClientStack
from tests.contract.repo_copy import REPO_ROOT, require_buf
from tests.support import runner_access
from turnwire.transport_security import SECRET_HEADER

REFLECTION = "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
BUF_SECONDS = 60

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def buf() -> Path:
    return require_buf()


def buf_curl(buf: Path, url: str, body: dict[str, Any], *flags: str) -> tuple[int, str, str]:
    ran = subprocess.run(
        [str(buf), "curl", "--protocol", "grpc", *flags, "-d", json.dumps(body), url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=BUF_SECONDS,
        check=False,
    )
    return ran.returncode, ran.stdout, ran.stderr


def schema_of(buf: Path, base: str, symbol: str, *flags: str) -> descriptor_pb2.FileDescriptorSet:
    """The files reflection returns for a symbol (its file and that file's imports)."""
    code, out, err = buf_curl(
        buf, f"{base}/{REFLECTION}", {"file_containing_symbol": symbol}, *flags
    )
    assert code == 0, out + err
    reply = json.loads(out)
    files = descriptor_pb2.FileDescriptorSet()
    for encoded in reply["fileDescriptorResponse"]["fileDescriptorProto"]:
        files.file.add().ParseFromString(base64.b64decode(encoded))
    return files


def refusal_detail(stderr: str) -> tuple[str, bytes]:
    """The code and the first detail's bytes of buf curl's printed error (padded base64)."""
    error = json.loads(stderr)
    (detail,) = error["details"]
    assert detail["type"] == "google.rpc.ErrorInfo"
    value = detail["value"]
    return error["code"], base64.b64decode(value + "=" * (-len(value) % 4))


def decoded_refusal(buf: Path, schema: descriptor_pb2.FileDescriptorSet, stderr: str,
                    directory: Path) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """The code of buf curl's printed refusal, and its ErrorInfo as proto3 JSON, decoded by
    `buf convert` with the reflected schema."""
    code, detail = refusal_detail(stderr)
    image, message = directory / "reflected.binpb", directory / "detail.binpb"
    image.write_bytes(schema.SerializeToString())
    message.write_bytes(detail)
    converted = subprocess.run(
        [str(buf), "convert", str(image), "--type", "google.rpc.ErrorInfo",
         "--from", f"{message}#format=binpb", "--to", "-#format=json"],
        capture_output=True,
        text=True,
        timeout=BUF_SECONDS,
        check=False,
    )  # fmt: skip
    assert converted.returncode == 0, converted.stdout + converted.stderr
    decoded: dict[str, Any] = json.loads(converted.stdout)
    return code, decoded


MISSING_CREDENTIALS = (
    "unauthenticated",
    {"reason": "CREDENTIALS_MISSING", "domain": "turnwire.dev"},
)


def test_coordinator_reflection_serves_error_details_and_buf_decodes_a_refusal(
    buf: Path, client_stack: ClientStack, tmp_path: Path
) -> None:
    """Over TLS: buf curl's refusal (no token) decodes to CREDENTIALS_MISSING with the
    google/rpc/error_details.proto that the coordinator's reflection serves."""
    base = f"https://{client_stack.address}"
    tls = ("--cacert", str(client_stack.ca_file))
    schema = schema_of(buf, base, "google.rpc.ErrorInfo", *tls)
    assert schema.file[0].name == "google/rpc/error_details.proto"
    code, out, err = buf_curl(
        buf,
        f"{base}/turnwire.coordinator.v1.TurnService/GetOperation",
        {"operation_id": "op_x"},
        *tls,
    )
    assert code != 0, out
    assert decoded_refusal(buf, schema, err, tmp_path) == MISSING_CREDENTIALS


def test_runner_reflection_serves_error_details_and_buf_decodes_a_refusal(
    buf: Path, client_stack: ClientStack, tmp_path: Path
) -> None:
    """The runner: a RunnerService call without its gate's secret decodes to
    CREDENTIALS_MISSING with the schema its reflection serves (to the secret's holder)."""
    base = f"http://{client_stack.live.runner_address}"
    secret = f"{SECRET_HEADER}: {runner_access.SECRET}"
    # buf curl's own reflection requests carry the secret; the call itself may not.
    reflect = ("--http2-prior-knowledge", "--reflect", "--reflect-header", secret)
    schema = schema_of(buf, base, "google.rpc.ErrorInfo", *reflect, "-H", secret)
    assert schema.file[0].name == "google/rpc/error_details.proto"
    code, out, err = buf_curl(
        buf, f"{base}/turnwire.runner.v1.RunnerService/GetRunnerInfo", {}, *reflect
    )
    assert code != 0, out
    assert decoded_refusal(buf, schema, err, tmp_path) == MISSING_CREDENTIALS
