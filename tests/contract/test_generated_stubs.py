"""proto/generate.py --check: passes on the checked-in stubs, fails on stale ones."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.contract.repo_copy import copy_proto_and_stubs, run

RUNNER_PROTO = Path("proto/turnwire/runner/v1/runner.proto")


def _check(root: Path) -> tuple[int, str]:
    result = run([sys.executable, "proto/generate.py", "--check"], cwd=root)
    return result.returncode, result.stdout + result.stderr


def _add_field(root: Path) -> None:
    """An additive edit: a new field on the runner's ReleaseResponse."""
    path = root / RUNNER_PROTO
    text = path.read_text()
    anchor = "message ReleaseResponse {\n"
    assert anchor in text, "the test's anchor message moved; update the test"
    path.write_text(text.replace(anchor, anchor + "  string added_by_test = 99;\n", 1))


def test_check_passes_on_checked_in_stubs(tmp_path: Path) -> None:
    """The checked-in stubs are exactly what the pinned generator writes from proto/."""
    code, output = _check(copy_proto_and_stubs(tmp_path))
    assert code == 0, output
    assert "fresh" in output


def test_check_fails_and_names_stale_stubs_after_proto_edit(tmp_path: Path) -> None:
    """A .proto edit without regenerating makes --check exit 1 naming the stale files."""
    root = copy_proto_and_stubs(tmp_path)
    _add_field(root)
    code, output = _check(root)
    assert code == 1, output
    assert "turnwire/runner/v1/runner_pb2.py" in output
    assert "turnwire/runner/v1/runner_pb2.pyi" in output


def test_regenerating_makes_check_pass_again(tmp_path: Path) -> None:
    """Running the generator after a .proto edit rewrites the stubs so --check passes."""
    root = copy_proto_and_stubs(tmp_path)
    _add_field(root)
    generated = run([sys.executable, "proto/generate.py"], cwd=root)
    assert generated.returncode == 0, generated.stderr
    code, output = _check(root)
    assert code == 0, output
    assert "added_by_test" in (root / "turnwire/runner/v1/runner_pb2.pyi").read_text()


def test_check_fails_with_protocs_error_when_a_proto_does_not_compile(tmp_path: Path) -> None:
    """A .proto that does not compile makes --check fail and shows protoc's complaint."""
    root = copy_proto_and_stubs(tmp_path)
    path = root / RUNNER_PROTO
    path.write_text(path.read_text() + "\nmessage Broken { string = 1; }\n")
    code, output = _check(root)
    assert code != 0, output
    assert "runner.proto" in output
    assert "protoc failed" in output
