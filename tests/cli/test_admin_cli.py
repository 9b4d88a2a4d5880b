"""`turnwire admin` against a real coordinator and runner (in-process main(), real gRPC).

One module-wide stack (tests/sdk/admin_stack.py: runner r1, tenants alice and
bob, admin "ops"); its ambiguous turns are made the way an outage makes them:
a lost Dispatch and a runner that stays silent past the reconcile deadline.
Rules pinned (PROTOCOL.md §10): V1 (a verdict shows beside the unchanged
state and execution), V2 (only on a terminal UNKNOWN operation), V3 (the same
verdict is a replay, another is refused), V5/V6 (requeue only what is proven
not run, once), V8 (drain and undrain), V9 (the evidence listed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import turnwire.cli as cli
from tests.sdk.admin_stack import ADMIN_TOKEN, AdminStack
from tests.sdk.live_stack import OTHER_TOKEN, TOKEN
from turnwire.client import TurnwireClient

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminStack]:
    with AdminStack(tmp_path_factory.mktemp("admin-cli")) as live:
        yield live


def admin(stack: AdminStack, *argv: str, token: str | None = None) -> int:
    return cli.main(["admin", *argv, "--address", stack.address, "--token", token or ADMIN_TOKEN])


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def succeeded_turn(stack: AdminStack, token: str, text: str) -> str:
    with TurnwireClient(stack.address, token) as client:
        final = client.submit_and_wait(items=[text], model="builtin/echo", timeout=30)
    assert final.state.value == "SUCCEEDED"
    return final.operation_id


@pytest.mark.rule("C6b")
def test_runners_drain_and_undrain(stack: AdminStack, capsys: pytest.CaptureFixture[str]) -> None:
    """runners --json shows r1 with its live identity, capacity and the executors its
    GetRunnerInfo said it serves (C6b: here its one default); drain marks it
    (by ops, with the reason) and a second drain says it is a replay; undrain
    undoes it, and a second undrain changes nothing. Every step exits 0."""
    assert admin(stack, "runners", "--json") == 0
    (runner,) = json_lines(capsys.readouterr().out)
    assert runner["name"] == "r1" and runner["address"]
    assert runner["incarnation_id"] and runner["writable_slots"] > 0
    assert runner["answering"] is True and runner["drained"] is False
    assert runner["executors"] == ["default"]

    assert admin(stack, "drain", "r1", "--reason", "kernel upgrade") == 0
    assert capsys.readouterr().out.startswith("drained r1")
    assert admin(stack, "drain", "r1", "--reason", "again") == 0
    assert "already drained" in capsys.readouterr().out
    assert admin(stack, "runners") == 0
    table = capsys.readouterr().out
    assert "yes by ops: kernel upgrade" in table and "IN USE W/R" in table
    assert "EXECUTORS" in table.splitlines()[0] and " default " in table.splitlines()[1]

    assert admin(stack, "undrain", "r1") == 0
    assert capsys.readouterr().out.startswith("undrained r1")
    assert admin(stack, "undrain", "r1", "--json") == 0
    (change,) = json_lines(capsys.readouterr().out)
    assert change["replayed"] is True and change["runner"]["drained"] is False


def test_operations_span_principals_and_filter(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """operations sees alice's and bob's turns (each with its principal);
    --principal keeps one principal's."""
    alice_op = succeeded_turn(stack, TOKEN, "from alice")
    bob_op = succeeded_turn(stack, OTHER_TOKEN, "from bob")
    assert admin(stack, "operations", "--limit", "0", "--json") == 0
    principals = {
        line["operation_id"]: line["principal"] for line in json_lines(capsys.readouterr().out)
    }
    assert (principals[alice_op], principals[bob_op]) == ("alice", "bob")

    assert admin(stack, "operations", "--principal", "bob", "--state", "succeeded") == 0
    out = capsys.readouterr().out
    assert bob_op in out and alice_op not in out and "PRINCIPAL" in out


def test_verdict_and_requeue_on_a_known_execution_exit_ten_and_change_nothing(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SUCCEEDED (execution STARTED) turn: a verdict is OPERATION_NOT_AMBIGUOUS and
    a requeue REQUEUE_NOT_ALLOWED, each exit 10 with one stderr line; the
    operation has no verdict and no requeue link after."""
    operation_id = succeeded_turn(stack, TOKEN, "ran once")
    assert admin(stack, "verdict", operation_id, "not-executed", "--reason", "sure?") == 10
    err = one_error_line(capsys.readouterr().err)
    assert "OPERATION_NOT_AMBIGUOUS" in err and "nothing changed" in err
    assert admin(stack, "requeue", operation_id, "--reason", "again") == 10
    err = one_error_line(capsys.readouterr().err)
    assert "REQUEUE_NOT_ALLOWED" in err and f"turnwire admin describe {operation_id}" in err

    assert admin(stack, "describe", operation_id, "--json") == 0
    (evidence,) = json_lines(capsys.readouterr().out)
    assert evidence["operation"]["verdict"] is None and evidence["operation"]["requeued_as"] == ""
    assert evidence["verdicts"] == [] and evidence["attempts"]


def test_refusals_exit_with_their_status(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tenant's token: exit 5 naming the admin scope; an unknown runner: exit 6
    (RUNNER_NOT_FOUND); an unknown operation: exit 6; an empty reason: exit 2."""
    assert admin(stack, "runners", token=TOKEN) == 5
    err = one_error_line(capsys.readouterr().err)
    assert "SCOPE_MISSING" in err and "--scope admin" in err
    assert admin(stack, "drain", "no-such-runner", "--reason", "x") == 6
    assert "RUNNER_NOT_FOUND" in one_error_line(capsys.readouterr().err)
    assert admin(stack, "describe", "op_" + "f" * 32) == 6
    assert "OPERATION_NOT_FOUND" in one_error_line(capsys.readouterr().err)
    assert admin(stack, "drain", "r1", "--reason", "") == 2
    assert "ARGUMENT_INVALID" in one_error_line(capsys.readouterr().err)
    assert admin(stack, "runners", "--json") == 0
    assert json_lines(capsys.readouterr().out)[0]["drained"] is False  # nothing changed


def test_an_ambiguous_turn_gets_a_verdict_shown_on_get_and_is_requeued_once(
    stack: AdminStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's path through an outage. Two turns end TIMED_OUT/UNKNOWN: one
    whose Dispatch request was lost (it never ran), one whose reply was (it ran).
    `ambiguous` lists both with their attempts; a NOT_EXECUTED verdict on the
    first shows on the tenant's `get` beside its unchanged state and execution;
    the same verdict again is a replay, another is VERDICT_CONFLICT (exit 10);
    the first is requeued once (asking again returns the same new operation,
    which then succeeds) while the second, without such a verdict, is not."""
    never_ran = stack.unknown_turn("lost on the way", reached_the_runner=False)
    ran = stack.unknown_turn("reply lost", reached_the_runner=True)
    stack.wait_answering()

    assert admin(stack, "ambiguous", "--json", "--limit", "0") == 0
    cases = {
        case["operation"]["operation_id"]: case for case in json_lines(capsys.readouterr().out)
    }
    assert {never_ran, ran} <= set(cases)
    for operation_id in (never_ran, ran):
        case = cases[operation_id]
        assert case["operation"]["principal"] == "alice"
        assert case["operation"]["execution"] == "UNKNOWN" and case["verdicts"] == []
        assert case["attempts"] and case["attempts"][0]["runner"] == "r1"
        assert case["events"][-1]["to_state"] == "TIMED_OUT"
    assert admin(stack, "ambiguous") == 0
    text = capsys.readouterr().out
    assert f"decide: turnwire admin verdict {never_ran}" in text and "INCARNATION" in text

    reason = "runner r1 ledger has no start for it"
    assert admin(stack, "verdict", never_ran, "not-executed", "--reason", reason) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"recorded verdict NOT_EXECUTED on {never_ran}")
    assert f"turnwire admin requeue {never_ran}" in out
    assert cli.main(["get", never_ran, "--json", "--address", stack.address, "--token", TOKEN]) == 0
    seen = json.loads(capsys.readouterr().out)
    assert (seen["state"], seen["execution"]) == ("TIMED_OUT", "UNKNOWN")
    assert seen["verdict"]["verdict"] == "NOT_EXECUTED" and seen["verdict"]["by"] == "ops"
    assert seen["verdict"]["reason"] == reason

    assert admin(stack, "verdict", never_ran, "not-executed", "--reason", "again") == 0
    assert "already recorded" in capsys.readouterr().out
    assert admin(stack, "verdict", never_ran, "executed", "--reason", "changed my mind") == 10
    err = one_error_line(capsys.readouterr().err)
    assert "VERDICT_CONFLICT" in err and "NOT_EXECUTED is on record (by ops)" in err

    assert admin(stack, "requeue", ran, "--reason", "try again") == 10
    assert "REQUEUE_NOT_ALLOWED" in one_error_line(capsys.readouterr().err)
    assert admin(stack, "requeue", never_ran, "--reason", "verdict: never ran", "--json") == 0
    first = json.loads(capsys.readouterr().out)
    requeued_id = first["operation"]["operation_id"]
    assert first["replayed"] is False and requeued_id != never_ran
    assert first["operation"]["requeued_from"] == never_ran
    assert first["original"]["requeued_as"] == requeued_id
    assert admin(stack, "requeue", never_ran, "--reason", "once more") == 0
    assert f"already requeued: {never_ran} was requeued as {requeued_id}" in capsys.readouterr().out
    final = stack.wait_terminal(requeued_id)
    assert final.state.value == "SUCCEEDED" and final.requeued_from == never_ran

    # Decided: out of the default queue, still listed with --include-decided.
    assert admin(stack, "ambiguous", "--json", "--limit", "0") == 0
    waiting = {c["operation"]["operation_id"] for c in json_lines(capsys.readouterr().out)}
    assert never_ran not in waiting and ran in waiting
    assert admin(stack, "ambiguous", "--include-decided", "--json", "--limit", "0") == 0
    decided = {c["operation"]["operation_id"] for c in json_lines(capsys.readouterr().out)}
    assert never_ran in decided


def test_the_admin_token_variable_wins_over_the_tenant_one(
    stack: AdminStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --token, $TURNWIRE_ADMIN_TOKEN is used before $TURNWIRE_TOKEN (an
    operator holding both runs tenant and admin commands from one shell)."""
    monkeypatch.setenv("TURNWIRE_TOKEN", TOKEN)
    monkeypatch.setenv("TURNWIRE_ADDRESS", stack.address)
    assert cli.main(["admin", "runners"]) == 5  # the tenant token has no admin scope
    assert "SCOPE_MISSING" in one_error_line(capsys.readouterr().err)
    monkeypatch.setenv("TURNWIRE_ADMIN_TOKEN", ADMIN_TOKEN)
    assert cli.main(["admin", "runners"]) == 0
    assert "r1" in capsys.readouterr().out
