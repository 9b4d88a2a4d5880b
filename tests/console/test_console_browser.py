"""The console in a real browser against a live deployment: the screenshot test.

A coordinator (console on 127.0.0.1:0) and a runner run in-process; three
turns end SUCCEEDED, FAILED and TIMED_OUT with execution UNKNOWN (a lost
Dispatch reply, then an unreachable runner: stack.make_ambiguous). Then
tests/console/console_check.mjs drives Debian's headless Chromium through
playwright-core as an operator would: sign in with the admin token, filter
the operations by state, open the UNKNOWN one's timeline, look at the
runners' capacity, record a NOT_EXECUTED verdict in the ambiguous queue, see
it on the operation, sign out. It reports what the page showed as JSON;
this test checks those DOM facts (not pixels alone), that the verdict is on
GetOperation too with the recorded history untouched, and that the
screenshot is a real PNG of the expected size (kept under the test's tmp dir).

Chromium comes from scripts/test (Debian's ``chromium`` package); without it,
or without node_modules/playwright-core, the test is skipped with that
reason outside CI and fails under CI=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.console.stack import ADMIN_TOKEN, TENANT_TOKEN, ConsoleStack
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("console_check.mjs")
CHROMIUM = os.environ.get("TURNWIRE_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = (1280, 860)  # console_check.mjs's viewport: the screenshot's size
SCRIPT_SECONDS = 90


def _missing_or_skip(what: str) -> None:
    if os.environ.get("CI", "") in ("true", "1", "yes"):
        pytest.fail(f"{what}: CI must run the console's browser test (scripts/test sets it up)")
    pytest.skip(f"{what} (scripts/test installs it as root; CI runs this test)")


@pytest.fixture(scope="module")
def browser_ready() -> str:
    """The node binary, once Chromium and playwright-core are there."""
    if not os.access(CHROMIUM, os.X_OK):
        _missing_or_skip(f"no Chromium at {CHROMIUM} (Debian package 'chromium')")
    node = shutil.which("node")
    if node is None:
        _missing_or_skip("node is not installed")
    assert node is not None
    if not (REPO / "node_modules" / "playwright-core" / "package.json").is_file():
        _missing_or_skip("node_modules/playwright-core is missing (run `npm ci`)")
    return node


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (after checking the signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def drive_console(node: str, stack: ConsoleStack, ambiguous_id: str, tmp_path: Path) -> Any:
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CONSOLE_URL": stack.console_url,
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "AMBIGUOUS_ID": ambiguous_id,
        "SCREENSHOTS": str(tmp_path / "screenshots"),
        "USER_DATA_DIR": str(profile),
        "CHROMIUM": CHROMIUM,
    }
    process = subprocess.Popen(
        [node, str(SCRIPT)],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Chromium's helpers too can be ended as one group
    )
    try:
        out, err = process.communicate(timeout=SCRIPT_SECONDS)
    finally:
        # The script's group (node and any Chromium process it left): ended by its id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    lines = out.decode().strip().splitlines()
    assert lines, f"console_check.mjs printed nothing (exit {process.returncode}): {err.decode()}"
    facts = json.loads(lines[-1])
    (tmp_path / "facts.json").write_text(json.dumps(facts, indent=1))  # kept for a failure
    assert facts.get("ok"), (
        f"the console broke at step {facts.get('failed_step')!r}: {facts.get('error')} "
        f"(page {facts.get('failed_url')}; screenshot {facts.get('screenshots')}; "
        f"stderr {err.decode()[-2000:]})"
    )
    assert process.returncode == 0
    return facts


def test_an_operator_works_the_console_in_chromium(
    browser_ready: str, stack: ConsoleStack, tmp_path: Path
) -> None:
    ambiguous_id = stack.ambiguous_id
    succeeded_id, failed_id = stack.run_turns({}, {"fail": "1"})

    facts = drive_console(browser_ready, stack, ambiguous_id, tmp_path)

    # Signing in: a wrong token is refused on the page; the token never lands in the URL.
    assert facts["login_shown"] and "CREDENTIALS_UNKNOWN" in facts["wrong_token_error"]
    assert facts["principal"] == "ops" and facts["token_in_url"] is False
    # The list shows every principal's operations (these are alice's, the admin is ops).
    assert {ambiguous_id, succeeded_id, failed_id} <= set(facts["all_operation_ids"])
    assert {"SUCCEEDED", "FAILED", "TIMED_OUT"} <= set(facts["all_states"])
    # Filtered by state: only TIMED_OUT rows, the ambiguous one among them.
    assert facts["filtered_hash"] == "#/operations?state=TIMED_OUT"
    assert facts["filtered_states"] and set(facts["filtered_states"]) == {"TIMED_OUT"}
    assert ambiguous_id in facts["filtered_ids"] and succeeded_id not in facts["filtered_ids"]
    # The timeline: events in order from QUEUED to the honest end, the attempt, the form.
    timeline = facts["timeline"]
    assert timeline["id"] == ambiguous_id and timeline["principal"] == "alice"
    assert (timeline["state"], timeline["execution"]) == ("TIMED_OUT", "UNKNOWN")
    events = timeline["events"]
    assert len(events) >= 2 and events[0].startswith("#1") and "QUEUED" in events[0]
    assert "TIMED_OUT" in events[-1] and "UNKNOWN" in events[-1]
    assert timeline["attempts"] == 1 and timeline["verdict_form"] == 1
    # Runners with capacity: r1, answering again, its writable slots known.
    (runner,) = facts["runners"]
    assert runner["name"] == "r1"
    used, _, total = runner["writable"].partition(" / ")
    assert used.isdigit() and total.isdigit() and int(total) > 0, runner
    assert runner["executors"] == "default", runner  # as its GetRunnerInfo said (C6b)
    # The ambiguous queue held the turn; the verdict was recorded and is shown.
    assert ambiguous_id in facts["ambiguous_ids"] and facts["ambiguous_card_attempts"] == 1
    assert facts["verdict_result"] == "Recorded: NOT_EXECUTED"
    assert "NOT EXECUTED" in facts["verdict_shown"] and "by ops" in facts["verdict_shown"]
    assert facts["verdict_form_after"] == 0
    # Signing out forgets the token; nothing on the page logged an error.
    assert facts["token_after_sign_out"] is None
    assert facts["console_errors"] == []

    # The same verdict on the public API, the recorded history untouched (§10).
    with grpc.insecure_channel(stack.address) as channel:
        operation = (
            coordinator_pb2_grpc.TurnServiceStub(channel)
            .GetOperation(
                coordinator_pb2.GetOperationRequest(operation_id=ambiguous_id),
                metadata=(("authorization", f"Bearer {TENANT_TOKEN}"),),
                timeout=10,
            )
            .operation
        )
    assert operation.verdict.verdict == coordinator_pb2.VERDICT_NOT_EXECUTED
    assert operation.verdict.by == "ops"
    assert operation.state == coordinator_pb2.OPERATION_STATE_TIMED_OUT
    assert operation.execution == turn_pb2.EXECUTION_UNKNOWN

    # The screenshot: a real PNG of the viewport, with something drawn in it.
    screenshot = Path(facts["screenshots"]["verdict"])
    assert screenshot.parent == tmp_path / "screenshots"
    assert png_size(screenshot) == VIEWPORT
    assert screenshot.stat().st_size > 20_000, "a near-empty PNG: the page drew (almost) nothing"
