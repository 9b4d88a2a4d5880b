"""The Go client (clients/go, module turnwire.dev/clients/go) against a live coordinator.

Built as docs/CLIENTS.md says: offline, in GOPATH mode, with Debian's Go 1.19
and its grpc-go, protobuf-go and genproto sources under /usr/share/gocode, the
module linked into a GOPATH of its own. Its generated stubs (clients/go/gen)
are checked in, so the test also regenerates them with
proto/buf.gen.go.yaml and compares.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import ClientStack
from tests.clients.debian import require_packages
from tests.clients.walkthrough import check_walkthrough, run_walkthrough
from tests.contract.repo_copy import REPO_ROOT, buf_generate

GO_MODULE = REPO_ROOT / "clients" / "go"
IMPORT_PATH = "turnwire.dev/clients/go"
WALKTHROUGH = f"{IMPORT_PATH}/cmd/turnwire-walkthrough"
DEBIAN_GOPATH = "/usr/share/gocode"
BUILD_SECONDS = 300

pytestmark = pytest.mark.timeout(420)


def go_environment(gopath: Path) -> dict[str, str]:
    """GOPATH mode, offline: this GOPATH first, then Debian's Go sources."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GO111MODULE": "off",
        "GOPATH": f"{gopath}{os.pathsep}{DEBIAN_GOPATH}",
        "GOFLAGS": "",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
    }
    # The build cache: the user's (kept between runs), or beside the GOPATH without a HOME.
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    else:
        env["GOCACHE"] = str(gopath / "cache")
    return env


@pytest.fixture(scope="module")
def go_walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example, built with `go build` from a GOPATH that links in clients/go."""
    require_packages("go")
    gopath = tmp_path_factory.mktemp("gopath")
    link = gopath / "src" / IMPORT_PATH
    link.parent.mkdir(parents=True)
    link.symlink_to(GO_MODULE, target_is_directory=True)
    binary = gopath / "bin" / "turnwire-walkthrough"
    built = subprocess.run(
        ["go", "build", "-o", str(binary), WALKTHROUGH],
        cwd=gopath,
        env=go_environment(gopath),
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    yield binary


def test_go_walkthrough_submits_watches_resumes_cancels_and_decodes_three_reasons(
    go_walkthrough: Path, client_stack: ClientStack, tmp_path: Path
) -> None:
    """grpc-go over TLS: idempotent submit, watch, resume by cursor, cancel, three ErrorInfos."""
    code, summary, err = run_walkthrough(
        [str(go_walkthrough), *client_stack.walkthrough_flags()],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    check_walkthrough(code, summary, err, output_text="hello from go")


def test_go_walkthrough_refuses_a_missing_other_token(go_walkthrough: Path, tmp_path: Path) -> None:
    """Usage errors exit 2 and name the missing flag, before any call."""
    ran = subprocess.run(
        [str(go_walkthrough), "--address", "127.0.0.1:1", "--token", "x"],
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert "--other-token (or TURNWIRE_OTHER_TOKEN) is required" in ran.stderr


def test_checked_in_go_stubs_are_what_buf_generate_writes(tmp_path: Path) -> None:
    """clients/go/gen equals a fresh `buf generate --template proto/buf.gen.go.yaml`."""
    require_packages("go")
    buf_generate("proto/buf.gen.go.yaml", tmp_path)
    fresh_root, checked_in_root = tmp_path / "clients/go/gen", GO_MODULE / "gen"
    fresh = {p.relative_to(fresh_root) for p in fresh_root.rglob("*.go")}
    checked_in = {p.relative_to(checked_in_root) for p in checked_in_root.rglob("*.go")}
    assert fresh == checked_in
    stale = [
        str(name)
        for name in sorted(fresh)
        if not filecmp.cmp(fresh_root / name, checked_in_root / name, shallow=False)
    ]
    assert stale == [], "run: node_modules/.bin/buf generate --template proto/buf.gen.go.yaml"
    # The hand-written code is gofmt'd, as the generated code is.
    unformatted = subprocess.run(
        ["gofmt", "-l", str(GO_MODULE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (unformatted.returncode, unformatted.stdout) == (0, "")
