"""The Node.js client (clients/node, grpc-js + proto-loader) against a live coordinator.

The contract is consumed exactly as a Node user would: the .proto files loaded
from proto/ (with the google/rpc protos shipped in proto/vendor), no generated
code. One real coordinator and runner (in-process, 127.0.0.1:0); `node` is a
real process the test ends itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.contract.repo_copy import REPO_ROOT, in_ci
from tests.sdk.live_stack import TOKEN, LiveStack

WALKTHROUGH = REPO_ROOT / "clients" / "node" / "walkthrough.mjs"
# npm ci installs the clients/node workspace's packages into the root node_modules.
GRPC_JS = REPO_ROOT / "node_modules" / "@grpc" / "grpc-js" / "package.json"
NODE_SECONDS = 60

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    problem = None
    if path is None:
        problem = "node is not installed"
    elif not GRPC_JS.exists():
        problem = "@grpc/grpc-js is not in node_modules (scripts/test runs npm ci)"
    if problem is not None:
        if in_ci():
            pytest.fail(f"{problem}: CI runs the Node client")
        pytest.skip(problem)
    assert path is not None
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("node-client")) as live:
        yield live


def run_walkthrough(node: str, *argv: str) -> tuple[int, dict[str, Any], str]:
    """Run the client to completion (bounded); its exit code, JSON summary and stderr."""
    process = subprocess.Popen(
        [node, str(WALKTHROUGH), *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        out, err = process.communicate(timeout=NODE_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    try:
        summary = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"the client printed no JSON (exit {process.returncode}):\n{out}\n{err}")
    return process.returncode, summary, err


def test_node_client_submits_watches_cancels_and_decodes_error_info(
    node: str, stack: LiveStack
) -> None:
    """grpc-js: a turn SUCCEEDED, a running turn CANCELLED, a refusal's ErrorInfo decoded."""
    code, summary, err = run_walkthrough(
        node, "--address", stack.address, "--token", TOKEN, "--timeout", "30"
    )
    assert code == 0, json.dumps(summary, indent=2) + err
    assert summary["problems"] == []

    submitted = summary["submitted"]
    assert submitted["operation"]["state"] == "OPERATION_STATE_SUCCEEDED"
    assert submitted["operation"]["execution"] == "EXECUTION_STARTED"
    assert submitted["operation"]["output_text"] == "hello from node"
    # uint64 arrives as a decimal string (longs: String) and the events are in order.
    sequences = [event["sequence"] for event in submitted["events"]]
    assert all(isinstance(sequence, str) for sequence in sequences)
    assert [int(s) for s in sequences] == list(range(1, len(sequences) + 1))
    assert submitted["events"][-1]["to_state"] == "OPERATION_STATE_SUCCEEDED"
    assert submitted["operation"]["last_event_sequence"] == sequences[-1]

    cancelled = summary["cancelled"]
    assert cancelled["state_before_cancel"] == "OPERATION_STATE_RUNNING"
    assert cancelled["operation"]["state"] == "OPERATION_STATE_CANCELLED"
    assert cancelled["operation"]["stop_reason"] == "STOP_REASON_CANCEL"
    assert cancelled["operation"]["execution"] == "EXECUTION_STARTED"
    assert cancelled["events_after_cancel"][-1].endswith(":OPERATION_STATE_CANCELLED")
    # Resumed from the cursor: every event after it, none before or at it.
    first_after = int(cancelled["events_after_cancel"][0].split(":")[0])
    assert first_after == int(cancelled["resumed_after_sequence"]) + 1

    refused = summary["refused"]
    assert refused["refused"] is True
    assert refused["codeName"] == "INVALID_ARGUMENT"
    assert refused["errorInfo"]["reason"] == "TURN_INVALID"
    assert refused["errorInfo"]["domain"] == "turnwire.dev"
    assert refused["errorInfo"]["metadata"]["field"] == "turn.kind"


def test_node_client_decodes_the_reason_of_a_refused_token(node: str, stack: LiveStack) -> None:
    """An unknown token: the client exits 1 and names CREDENTIALS_UNKNOWN from the trailer."""
    code, summary, _ = run_walkthrough(node, "--address", stack.address, "--token", "not-a-token")
    assert code == 1
    assert summary["failed"]["codeName"] == "UNAUTHENTICATED"
    assert summary["failed"]["errorInfo"]["reason"] == "CREDENTIALS_UNKNOWN"


def test_node_client_refuses_a_missing_address(node: str) -> None:
    """Usage errors exit 2 with the usage text, before any call."""
    process = subprocess.run(
        [node, str(WALKTHROUGH), "--token", "x"],
        capture_output=True,
        text=True,
        timeout=NODE_SECONDS,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        check=False,
    )
    assert process.returncode == 2
    assert "--address (or TURNWIRE_ADDRESS) is required" in process.stderr
