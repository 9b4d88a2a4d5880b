"""buf keeps the .proto files linted, formatted and free of breaking changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract.repo_copy import REPO_ROOT, copy_proto_and_stubs, require_buf, run

BASELINE = "proto/buf-baseline.binpb"


@pytest.fixture
def buf() -> str:
    return str(require_buf())


def test_buf_lint_passes(buf: str) -> None:
    """The .proto files pass buf lint with the STANDARD rules of proto/buf.yaml."""
    result = run([buf, "lint", "proto"], cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_format_has_nothing_to_change(buf: str) -> None:
    """The .proto files are already in buf's canonical format."""
    result = run([buf, "format", "--diff", "--exit-code", "proto"], cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_breaking_change_against_committed_baseline(buf: str) -> None:
    """The contract is wire- and source-compatible with the committed baseline image."""
    result = run([buf, "breaking", "proto", "--against", BASELINE], cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_breaking_check_catches_a_renamed_field(tmp_path: Path, buf: str) -> None:
    """Renaming a field is reported as breaking, so the baseline check is not vacuous."""
    root = copy_proto_and_stubs(tmp_path)
    proto = root / "proto/turnwire/runner/v1/runner.proto"
    text = proto.read_text()
    old = "  bool released = 2;\n"
    assert old in text, "the test's anchor field moved; update the test"
    proto.write_text(text.replace(old, "  bool was_released = 2;\n", 1))
    result = run([buf, "breaking", "proto", "--against", BASELINE], cwd=root)
    assert result.returncode != 0
    assert "released" in result.stdout + result.stderr
