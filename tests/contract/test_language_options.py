"""Every Turnwire .proto names its code in other languages by one rule, and the
vendored google/rpc protos stay exactly what googleapis-common-protos ships."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.contract.repo_copy import REPO_ROOT, copy_proto_and_stubs, run

OPTION = re.compile(r'^option (\w+) = ("(?:[^"\\]|\\.)*"|\w+);$', re.MULTILINE)


def expected_options(proto: Path, text: str) -> dict[str, str]:
    """The rule, for package turnwire.<name>.v1 in <file>.proto (docs/CLIENTS.md)."""
    match = re.search(r"^package turnwire\.([a-z_]+)\.v1;$", text, re.MULTILINE)
    assert match, f"{proto}: no turnwire.<name>.v1 package"
    name = match.group(1)
    title = name.capitalize()
    outer = "".join(part.capitalize() for part in proto.stem.split("_")) + "Proto"
    return {
        "csharp_namespace": f'"Turnwire.{title}.V1"',
        "go_package": f'"turnwire.dev/clients/go/gen/turnwire/{name}/v1;{name}v1"',
        "java_multiple_files": "true",
        "java_outer_classname": f'"{outer}"',
        "java_package": f'"dev.turnwire.{name}.v1"',
        "php_namespace": f'"Turnwire\\\\{title}\\\\V1"',
        "ruby_package": f'"Turnwire::{title}::V1"',
    }


def test_every_turnwire_proto_has_the_language_options_of_the_rule() -> None:
    """go_package, java_*, csharp, php and ruby options, on every file, derived one way."""
    protos = sorted((REPO_ROOT / "proto").glob("turnwire/**/*.proto"))
    assert len(protos) >= 5
    wrong = {}
    for proto in protos:
        text = proto.read_text()
        found = dict(OPTION.findall(text))
        if found != expected_options(proto, text):
            wrong[str(proto.relative_to(REPO_ROOT))] = found
    assert wrong == {}


def test_vendor_check_catches_an_edited_google_rpc_proto(tmp_path: Path) -> None:
    """proto/vendor.py --check passes on the tree and fails once a vendored file is edited."""
    root = copy_proto_and_stubs(tmp_path)
    check = [sys.executable, "proto/vendor.py", "--check"]
    clean = run(check, cwd=root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    vendored = root / "proto/vendor/google/rpc/error_details.proto"
    vendored.write_text(vendored.read_text().replace("string reason = 1;", "string why = 1;"))
    drifted = run(check, cwd=root)
    assert drifted.returncode == 1
    assert "google/rpc/error_details.proto" in drifted.stderr
