"""Running a client's walkthrough example and checking its JSON summary.

Every example (Go, Java blocking and async, Node) does the same steps against a
live coordinator and prints the same summary: a turn submitted with an
idempotency key (and replayed with it) and watched to SUCCEEDED; a running turn
cancelled and its watch resumed from the cursor; and three refusals' ErrorInfo.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

WALKTHROUGH_SECONDS = 90

# (gRPC code, ErrorInfo.reason) of each refusal the examples provoke (PROTOCOL.md §7).
EXPECTED_REFUSALS = {
    "idempotency_key_reused": ("FAILED_PRECONDITION", "IDEMPOTENCY_KEY_REUSED"),
    "missing_token": ("UNAUTHENTICATED", "CREDENTIALS_MISSING"),
    "cross_tenant_read": ("NOT_FOUND", "OPERATION_NOT_FOUND"),
}


def run_walkthrough(
    command: list[str], *, cwd: Path, env: dict[str, str]
) -> tuple[int, dict[str, Any], str]:
    """Run an example to completion (bounded; killed by PID if it overruns): its exit code,
    JSON summary and stderr."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=WALKTHROUGH_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    try:
        summary = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"the example printed no JSON (exit {process.returncode}):\n{out}\n{err}")
    return process.returncode, summary, err


def sequences(events: list[str]) -> list[int]:
    """The sequences of "sequence:state" events (uint64 printed in full, as decimal)."""
    return [int(event.split(":", 1)[0]) for event in events]


def check_walkthrough(code: int, summary: dict[str, Any], err: str, output_text: str) -> None:
    """What every example must have seen, over TLS (see the module docstring)."""
    assert code == 0, json.dumps(summary, indent=2) + err
    assert summary["problems"] == []
    assert summary["tls"] is True

    submitted = summary["submitted"]
    assert submitted["state"] == "OPERATION_STATE_SUCCEEDED"
    assert submitted["output_text"] == output_text
    # The same key and request again: a replay of the same operation, never a second one.
    assert submitted["replayed"] is True
    assert submitted["replay_operation_id"] == submitted["operation_id"]
    # Watched from cursor 0: every event from sequence 1, in order, to the terminal one.
    seen = sequences(submitted["events"])
    assert seen == list(range(1, len(seen) + 1))
    assert submitted["events"][0] == "1:OPERATION_STATE_QUEUED"
    assert submitted["events"][-1].endswith(":OPERATION_STATE_SUCCEEDED")
    assert submitted["last_event_sequence"] == str(seen[-1])

    cancelled = summary["cancelled"]
    assert cancelled["state_before_cancel"] == "OPERATION_STATE_RUNNING"
    assert cancelled["state"] == "OPERATION_STATE_CANCELLED"
    assert cancelled["stop_reason"] == "STOP_REASON_CANCEL"
    # Resumed from the cursor: every later event exactly once, none at or before it.
    resumed = sequences(cancelled["events_after_cancel"])
    cursor = int(cancelled["resumed_after_sequence"])
    assert resumed == list(range(cursor + 1, cursor + 1 + len(resumed)))
    assert cancelled["events_after_cancel"][-1].endswith(":OPERATION_STATE_CANCELLED")

    refusals = summary["refusals"]
    for name, (grpc_code, reason) in EXPECTED_REFUSALS.items():
        refusal = refusals[name]
        assert refusal["refused"] is True, name
        assert (refusal["code"], refusal["reason"], refusal["domain"]) == (
            grpc_code,
            reason,
            "turnwire.dev",
        ), name
    # The reused key's refusal names the operation the key already belongs to.
    assert refusals["idempotency_key_reused"]["metadata"] == {
        "operation_id": submitted["operation_id"]
    }
