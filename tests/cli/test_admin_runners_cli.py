"""`turnwire admin runners add|drain|remove` against a real coordinator on SQLite and
real runners (in-process main(), real gRPC; PROTOCOL.md §11 M2, M3, M6).

Its own stack: these tests change the runner set, which the other admin CLI
tests rely on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import turnwire.cli as cli
from tests.sdk.admin_stack import ADMIN_TOKEN, AdminStack
from tests.sdk.live_stack import TOKEN
from turnwire.client import TurnwireClient

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def stack(tmp_path: Any) -> Iterator[AdminStack]:
    with AdminStack(tmp_path) as live:
        yield live


def admin(stack: AdminStack, *argv: str) -> int:
    return cli.main(["admin", *argv, "--address", stack.address, "--token", ADMIN_TOKEN])


def listed(stack: AdminStack, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert admin(stack, "runners", "--json") == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.rule("M2", "M3")
def test_add_drain_and_remove_a_runner_from_the_command_line(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """M2/M3: `runners add` makes r2 a member (a second add is a replay), turns go to
    it once r1 is drained, `remove` refuses r1 while it is not drained (exit 10,
    the hint names the fix) and removes it once drained; `runners` then lists r2 only."""
    address = stack.extra_runner("r2")
    assert admin(stack, "runners", "add", "r2", address, "--reason", "capacity") == 0
    assert capsys.readouterr().out.startswith("added r2 (generation 1)")
    assert admin(stack, "runners", "add", "r2", address) == 0
    assert "already a member" in capsys.readouterr().out

    assert admin(stack, "runners", "remove", "r1", "--reason", "retire") == 10
    err = capsys.readouterr().err
    assert "RUNNER_NOT_DRAINED" in err and "turnwire admin runners drain r1" in err
    assert admin(stack, "runners", "drain", "r1", "--reason", "retire") == 0
    assert capsys.readouterr().out.startswith("drained r1")
    with TurnwireClient(stack.address, TOKEN) as client:
        done = client.submit_and_wait(items=["to r2"], model="builtin/echo", timeout=30)
    assert (done.state.value, done.runner) == ("SUCCEEDED", "r2")

    assert admin(stack, "runners", "remove", "r1", "--reason", "retired", "--json") == 0
    removal = json.loads(capsys.readouterr().out)["removal"]
    assert (removal["action"], removal["sequence"], removal["forced"]) == ("REMOVED", 2, False)
    rows = listed(stack, capsys)
    assert [(r["name"], r["generation"], r["added_by"]) for r in rows] == [("r2", 1, "ops")]
    assert admin(stack, "runners") == 0
    table = capsys.readouterr().out
    assert "GEN" in table and "BOUND" in table and "r1" not in table


@pytest.mark.rule("M2")
def test_bad_runner_arguments_exit_with_the_contract_code(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """M2: a bad address exits 2 (ARGUMENT_INVALID), an unknown runner 6
    (RUNNER_NOT_FOUND), r1 at another address 10 (RUNNER_CONFLICT); the old
    `drain`/`undrain` spellings still work."""
    assert admin(stack, "runners", "add", "r2", "not-an-address") == 2
    assert "ARGUMENT_INVALID" in capsys.readouterr().err
    assert admin(stack, "runners", "remove", "r9", "--reason", "x") == 6
    assert "RUNNER_NOT_FOUND" in capsys.readouterr().err
    assert admin(stack, "runners", "add", "r1", "127.0.0.1:9") == 10
    assert "RUNNER_CONFLICT" in capsys.readouterr().err
    assert admin(stack, "drain", "r1", "--reason", "old spelling") == 0
    assert admin(stack, "undrain", "r1") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("undrained r1")
    assert [r["name"] for r in listed(stack, capsys) if not r["drained"]] == ["r1"]
