"""The command line -> arguments and Turn (pure: no coordinator needed)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

import turnwire.cli as cli
from turnwire.cli.commands import turn_from_args
from turnwire.cli.options import (
    DEFAULT_ADDRESS,
    UsageError,
    resolve_address,
    resolve_token,
)
from turnwire.client import CheckConnectionSettings, ReplayPolicy, TurnKind


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def test_submit_flags_build_the_turn() -> None:
    """submit: -i items, --model, --param, --kind, --pool, --policy reach the Turn."""
    args = parse(
        "submit", "-i", "one", "-i", "two", "--model", "builtin/sleep", "--param", "sleep_ms=500",
        "--param", "output=a=b", "--kind", "read-only", "--pool", "gpu",
        "--policy", "never-automatic", "--max-attempts", "3", "--budget-ms", "900",
    )  # fmt: skip
    turn = turn_from_args(args, stdin=None)
    assert [item.content for item in turn.items] == [b"one", b"two"]
    assert (turn.model.provider, turn.model.name) == ("builtin", "sleep")
    assert dict(turn.model.parameters) == {"sleep_ms": "500", "output": "a=b"}
    assert turn.kind is TurnKind.READ_ONLY and turn.pool == "gpu"
    assert turn.replay_policy is ReplayPolicy.NEVER_AUTOMATIC
    assert (turn.max_attempts, turn.budget_ms) == (3, 900)


def test_submit_reads_stdin_when_no_input_flag() -> None:
    """submit without -i takes the piped stdin as one item; binary stays octet-stream."""
    args = parse("submit")
    text = turn_from_args(args, stdin=io.BytesIO(b"hello\n"))
    assert [(i.content, i.content_type) for i in text.items] == [(b"hello\n", "text/plain")]
    binary = turn_from_args(args, stdin=io.BytesIO(b"\xff\xfe"))
    assert binary.items[0].content_type == "application/octet-stream"


def test_submit_without_any_input_is_a_usage_error() -> None:
    """submit at a terminal without -i has nothing to send: a UsageError, no call."""
    with pytest.raises(UsageError, match="nothing to submit"):
        turn_from_args(parse("submit"), stdin=None)


def test_a_param_without_equals_is_a_usage_error() -> None:
    """--param must be KEY=VALUE."""
    with pytest.raises(UsageError, match="--param takes KEY=VALUE"):
        turn_from_args(parse("submit", "-i", "x", "--param", "sleep_ms"), stdin=None)


def test_submit_deadline_is_in_the_future_and_utc() -> None:
    """--deadline SECONDS becomes an aware UTC deadline on the wire."""
    turn = turn_from_args(parse("submit", "-i", "x", "--deadline", "30"), stdin=None)
    assert turn.deadline is not None and turn.deadline.utcoffset() is not None
    assert turn.to_proto().limits.deadline.seconds > 0


@pytest.mark.parametrize(
    "argv",
    [
        ("submit", "--kind", "sideways"),
        ("submit", "--policy", "yolo"),
        ("get",),
        ("watch", "op_1", "--after", "-1"),
        ("list", "--state", "bogus"),
        ("nonsense",),
        (),
    ],
)
def test_bad_command_lines_exit_with_usage_status(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit status 2 for a command line argparse refuses, with the reason on stderr."""
    assert cli.main(list(argv)) == 2
    assert "error" in capsys.readouterr().err


def test_help_answers_with_examples_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """--help shows examples and the documented exit statuses, and exits 0."""
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "exit status:" in out and "TIMED_OUT" in out
    for command in ("submit", "get", "watch", "cancel", "list"):
        assert cli.main([command, "--help"]) == 0
        assert "examples:" in capsys.readouterr().out


def test_address_and_token_come_from_flags_then_environment() -> None:
    """Flags win over TURNWIRE_ADDRESS / TURNWIRE_TOKEN; the address has a default."""
    env = {"TURNWIRE_ADDRESS": "10.0.0.1:7", "TURNWIRE_TOKEN": "from-env"}
    flags = parse("get", "op_1", "--address", "127.0.0.1:9", "--token", "from-flag")
    bare = parse("get", "op_1")
    assert resolve_address(flags, env) == "127.0.0.1:9"
    assert resolve_token(flags, env) == "from-flag"
    assert resolve_address(bare, env) == "10.0.0.1:7"
    assert resolve_token(bare, env) == "from-env"
    assert resolve_address(bare, {}) == DEFAULT_ADDRESS
    assert resolve_token(bare, {}) is None


def test_token_file_is_read_and_stripped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--token-file reads the token (trailing newline dropped)."""
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    assert resolve_token(parse("get", "op_1", "--token-file", str(path)), {}) == "s3cret"
    missing = parse("get", "op_1", "--token-file", str(tmp_path / "absent"))
    with pytest.raises(CheckConnectionSettings, match=r"cannot read the token file .*--token-file"):
        resolve_token(missing, {})


def test_token_file_variable_is_read_when_no_token_is_given(tmp_path: Path) -> None:
    """TURNWIRE_TOKEN_FILE is the last resort: --token, --token-file and TURNWIRE_TOKEN win."""
    path = tmp_path / "token"
    path.write_text("from-file\n")
    bare = parse("get", "op_1")
    assert resolve_token(bare, {"TURNWIRE_TOKEN_FILE": str(path)}) == "from-file"
    both = {"TURNWIRE_TOKEN_FILE": str(path), "TURNWIRE_TOKEN": "from-env"}
    assert resolve_token(bare, both) == "from-env"
    assert resolve_token(parse("get", "op_1", "--token", "flag"), both) == "flag"


def test_a_listed_extension_is_imported_only_when_it_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Registry: `turnwire --help` lists an extension by its line without importing it;
    running it imports its module and builds its options."""
    monkeypatch.setattr(
        cli,
        "EXTENSIONS",
        (
            cli.Extension("hello", "tests.cli.sample_extension", "say hello"),
            cli.Extension("ghost", "turnwire.cli.no_such_module", "never imported"),
        ),
    )
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "say hello" in out and "never imported" in out
    assert cli.main(["hello", "--name", "turnwire"]) == 0
    assert capsys.readouterr().out == "hello turnwire\n"


@pytest.mark.parametrize(
    ("argv", "dest", "expected"),
    [
        (("list", "--state", "RUNNING"), "state", ["running"]),
        (("list", "--state", "running", "--state", "Dispatch_Unknown"), "state",
         ["running", "dispatch-unknown"]),
        (("submit", "-i", "x", "--kind", "READ_ONLY"), "kind", "read-only"),
        (("submit", "-i", "x", "--policy", "Never-Automatic"), "policy", "never-automatic"),
        (("admin", "operations", "--state", "TIMED_OUT"), "state", ["timed-out"]),
        (("admin", "operations", "--execution", "UNKNOWN"), "execution", ["unknown"]),
        (("admin", "verdict", "op_1", "NOT_EXECUTED", "--reason", "r"), "verdict",
         "not-executed"),
    ],
)  # fmt: skip
def test_enum_values_are_accepted_in_any_case(
    argv: tuple[str, ...], dest: str, expected: object
) -> None:
    """Every enum-valued option takes its values in any case, with _ or - (README writes
    `--state RUNNING`); the command sees the canonical spelling."""
    assert getattr(parse(*argv), dest) == expected


def test_a_bad_enum_value_is_refused_listing_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unknown state is still a usage error (exit 2) naming every choice."""
    assert cli.main(["list", "--state", "SLEEPING"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'SLEEPING'" in err
    assert "'queued'" in err and "'dispatch-unknown'" in err and "'rejected'" in err


def test_every_listed_extension_module_exists() -> None:
    """Every module in turnwire.cli.EXTENSIONS imports and defines configure and run."""
    for extension in cli.EXTENSIONS:
        module = cli._load_extension(extension.module)  # TypeError without configure/run
        assert module.__name__ == extension.module
