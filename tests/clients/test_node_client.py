"""The Node.js client (clients/node, grpc-js + proto-loader) against a live coordinator.

Tested as a user gets it: `npm pack` makes the package's tarball (its .proto
files packed in, with the google/rpc protos), and `npm install` puts it into an
empty project outside the repository, from npm's cache (`npm ci` at the root
filled it with the same pinned packages). `node` runs the installed
walkthrough, over TLS, as a real process the test ends itself. The pack runs in
a copy of clients/node and proto/, so the checkout is never written to (its
prepack/postpack copy and remove clients/node/proto).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import ClientStack
from tests.clients.walkthrough import check_walkthrough, run_walkthrough
from tests.contract.repo_copy import REPO_ROOT, in_ci

NODE_CLIENT = REPO_ROOT / "clients" / "node"
PACKAGE = json.loads((NODE_CLIENT / "package.json").read_text())
NPM_SECONDS = 180

pytestmark = pytest.mark.timeout(300)


def node_environment() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]  # npm's cache lives there
    return env


def npm(*argv: str, cwd: Path) -> None:
    ran = subprocess.run(
        ["npm", *argv, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=cwd,
        env=node_environment(),
        capture_output=True,
        text=True,
        timeout=NPM_SECONDS,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.fixture(scope="module")
def installed_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The packed client installed into an empty project; its package directory."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if in_ci():
            pytest.fail("node and npm are not installed: CI runs the Node client")
        pytest.skip("node and npm are not installed")
    tree = tmp_path_factory.mktemp("node-pack")
    source = tree / "clients" / "node"
    shutil.copytree(NODE_CLIENT, source, ignore=shutil.ignore_patterns("node_modules", "proto"))
    for part in ("turnwire", "vendor"):
        shutil.copytree(REPO_ROOT / "proto" / part, tree / "proto" / part)
    npm("pack", "--pack-destination", str(tree), cwd=source)
    (tarball,) = tree.glob("*.tgz")
    # postpack removed the packed copy, so a checkout keeps loading ../../proto.
    assert not (source / "proto").exists()
    project = tmp_path_factory.mktemp("node-project")
    (project / "package.json").write_text('{"private": true}\n')
    npm("install", "--prefer-offline", str(tarball), cwd=project)
    yield project / "node_modules" / PACKAGE["name"]


def test_the_packed_node_client_is_public_and_carries_its_protos(installed_client: Path) -> None:
    """Not private, and the installed package holds Turnwire's and google/rpc's protos."""
    assert "private" not in PACKAGE
    installed_protos = installed_client / "proto"
    for relative in (
        "turnwire/coordinator/v1/coordinator.proto",
        "turnwire/common/v1/errors.proto",
        "vendor/google/rpc/error_details.proto",
        "vendor/google/rpc/status.proto",
        "vendor/LICENSE",
    ):
        assert (installed_protos / relative).is_file(), relative
    source = REPO_ROOT / "proto" / "turnwire/coordinator/v1/coordinator.proto"
    assert (installed_protos / "turnwire/coordinator/v1/coordinator.proto").read_bytes() == (
        source.read_bytes()
    )


def test_node_walkthrough_submits_watches_resumes_cancels_and_decodes_three_reasons(
    installed_client: Path, client_stack: ClientStack, tmp_path: Path
) -> None:
    """grpc-js over TLS: idempotent submit, watch, resume by cursor, cancel, three ErrorInfos."""
    code, summary, err = run_walkthrough(
        ["node", str(installed_client / "walkthrough.mjs"), *client_stack.walkthrough_flags()],
        cwd=tmp_path,
        env=node_environment(),
    )
    check_walkthrough(code, summary, err, output_text="hello from node")
    # uint64 arrives as a decimal string (proto-loader longs: String).
    assert isinstance(summary["submitted"]["last_event_sequence"], str)


def test_node_walkthrough_decodes_the_reason_of_a_refused_token(
    installed_client: Path, client_stack: ClientStack, tmp_path: Path
) -> None:
    """An unknown token: the client exits 1 and names CREDENTIALS_UNKNOWN from the trailer."""
    flags = client_stack.walkthrough_flags()
    flags[flags.index("--token") + 1] = "not-a-token"
    code, summary, _ = run_walkthrough(
        ["node", str(installed_client / "walkthrough.mjs"), *flags],
        cwd=tmp_path,
        env=node_environment(),
    )
    assert code == 1
    assert summary["failed"]["code"] == "UNAUTHENTICATED"
    assert summary["failed"]["reason"] == "CREDENTIALS_UNKNOWN"


def test_node_walkthrough_refuses_a_missing_address(installed_client: Path, tmp_path: Path) -> None:
    """Usage errors exit 2 with the usage text, before any call."""
    ran = subprocess.run(
        ["node", str(installed_client / "walkthrough.mjs"), "--token", "x"],
        cwd=tmp_path,
        env=node_environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert "--address (or TURNWIRE_ADDRESS) is required" in ran.stderr
