#!/usr/bin/env python3
"""Copy the google.rpc .proto files Turnwire's errors use into proto/vendor/.

Every typed Turnwire error is a gRPC status whose `grpc-status-details-bin`
trailer is a google.rpc.Status carrying a google.rpc.ErrorInfo (and sometimes
a google.rpc.RetryInfo). A client in another language needs those two files
to decode it; they are not Turnwire's to edit, so they are copied byte for
byte from the googleapis-common-protos wheel (pinned exactly in pyproject.toml's
dev extras) with its LICENSE, and `--check` (run by scripts/test) fails when the
copies drift from that package.

    python proto/vendor.py          # (re)write proto/vendor/
    python proto/vendor.py --check  # exit 1 if proto/vendor/ differs from the package

Their own imports (google/protobuf/any.proto, duration.proto) are well-known
types that protoc, buf and @grpc/proto-loader already carry.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

VENDOR_ROOT = Path(__file__).resolve().parent / "vendor"
DISTRIBUTION = "googleapis-common-protos"
# The files a client needs to decode a Turnwire error: the Status envelope,
# its details (ErrorInfo, RetryInfo, ...), and the status code enum.
VENDORED = ("google/rpc/status.proto", "google/rpc/error_details.proto", "google/rpc/code.proto")
# proto/vendor is a buf workspace of its own, so `buf lint proto` (which
# excludes it) never lints Google's files, while `buf generate` and
# `buf build proto/vendor` can still compile them.
BUF_YAML = """\
# Written by proto/vendor.py: Google's google.rpc protos, vendored unchanged.
# A workspace of its own so that proto/buf.yaml (which excludes this
# directory) never lints or breaking-checks files Turnwire does not own.
version: v2
"""
README = """\
# Vendored google.rpc protos

Written by `proto/vendor.py`; do not edit by hand (`python proto/vendor.py
--check`, run by `scripts/test --lint`, fails if these files differ from the
package below).

| | |
| --- | --- |
| files | {files} |
| copied from | the `{distribution}` {version} wheel on PyPI (`google/rpc/*.proto` inside it) |
| upstream | googleapis (https://github.com/googleapis/googleapis), Google LLC |
| license | Apache License 2.0: `LICENSE` beside this file, copied from the same wheel |

Why they are here: every typed Turnwire error is a gRPC status whose
`grpc-status-details-bin` trailer is a `google.rpc.Status` holding a
`google.rpc.ErrorInfo` (see `docs/CLIENTS.md`). A client that loads `proto/`
with protoc or `@grpc/proto-loader` adds this directory to its include path
(`-I proto -I proto/vendor`) to decode it offline. Their imports
(`google/protobuf/any.proto`, `duration.proto`) are well-known types every
protobuf toolchain ships. Python keeps importing `google.rpc` from the
`googleapis-common-protos` package itself.
"""


def _distribution_files() -> tuple[str, dict[str, bytes]]:
    """The pinned package's version and the bytes of every file to vendor, by target path."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise SystemExit(
            f"{DISTRIBUTION} is not installed: run `.venv/bin/pip install -e '.[dev]'`"
        ) from None
    by_name = {str(f): f for f in distribution.files or ()}
    wanted: dict[str, bytes] = {}
    for name in VENDORED:
        entry = by_name.get(name)
        if entry is None:
            raise SystemExit(f"{DISTRIBUTION} {distribution.version} does not ship {name}")
        wanted[name] = Path(str(distribution.locate_file(entry))).read_bytes()
    licenses = [f for name, f in by_name.items() if name.endswith(".dist-info/licenses/LICENSE")]
    if len(licenses) != 1:
        raise SystemExit(f"{DISTRIBUTION} {distribution.version}: expected one LICENSE file")
    wanted["LICENSE"] = Path(str(distribution.locate_file(licenses[0]))).read_bytes()
    wanted["buf.yaml"] = BUF_YAML.encode()
    files = ", ".join(f"`{name}`" for name in VENDORED)
    readme = README.format(files=files, distribution=DISTRIBUTION, version=distribution.version)
    wanted["README.md"] = readme.encode()
    return distribution.version, wanted


def _present() -> set[str]:
    if not VENDOR_ROOT.is_dir():
        return set()
    return {str(p.relative_to(VENDOR_ROOT)) for p in VENDOR_ROOT.rglob("*") if p.is_file()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if proto/vendor/ differs from the package"
    )
    args = parser.parse_args()

    version, wanted = _distribution_files()
    present = _present()
    differing = sorted(
        name
        for name in wanted.keys() | present
        if name not in wanted
        or name not in present
        or (VENDOR_ROOT / name).read_bytes() != wanted[name]
    )
    if args.check:
        if differing:
            print(
                f"proto/vendor/ differs from {DISTRIBUTION} {version} "
                "(run: python proto/vendor.py):",
                file=sys.stderr,
            )
            for name in differing:
                print(f"  {name}", file=sys.stderr)
            return 1
        print(f"proto/vendor/ matches {DISTRIBUTION} {version} ({len(wanted)} files)")
        return 0
    for name in present - wanted.keys():
        (VENDOR_ROOT / name).unlink()
    for name, content in wanted.items():
        target = VENDOR_ROOT / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    print(f"wrote proto/vendor/ from {DISTRIBUTION} {version} ({len(differing)} changed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
