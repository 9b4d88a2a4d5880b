#!/usr/bin/env python3
"""Generate the checked-in Python stubs for Turnwire's wire contract.

The one script that writes ``turnwire/{common,runner,coordinator}/v1/*_pb2*``:
protoc from grpcio-tools, with mypy-protobuf for typed ``.pyi`` stubs.

    python proto/generate.py          # regenerate in place
    python proto/generate.py --check  # exit 1 if the checked-in stubs are stale

The Python package path equals the proto package (``turnwire.runner.v1``), so
the generated imports work without rewriting and buf's directory rule holds.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("turnwire/**/*.proto"))


def run_protoc(out_dir: Path) -> None:
    import grpc_tools  # type: ignore[import-untyped]  # ships no type information

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *files,
    ]
    # mypy-protobuf's plugins are found on PATH next to this interpreter.
    env_path = str(Path(sys.executable).parent)
    import os

    env = dict(os.environ, PATH=env_path + os.pathsep + os.environ.get("PATH", ""))
    # protoc's plugins chatter on stderr ("Writing mypy to ..."): show it only on failure.
    result = subprocess.run(command, cwd=PROTO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"protoc failed (exit {result.returncode})")
    # Every generated directory must be a package.
    for directory in {p.parent for p in out_dir.rglob("*_pb2.py")}:
        current = directory
        while current != out_dir:
            init = current / "__init__.py"
            if not init.exists():
                init.write_text("")
            current = current.parent


def generated_files(base: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for suffix in GENERATED_SUFFIXES:
        for path in base.glob(f"turnwire/**/*{suffix}"):
            found[str(path.relative_to(base))] = path
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs are stale")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        run_protoc(out_dir)
        fresh = generated_files(out_dir)
        current = generated_files(ROOT)
        stale = sorted(
            name
            for name in fresh.keys() | current.keys()
            if name not in fresh
            or name not in current
            or not filecmp.cmp(fresh[name], current[name], shallow=False)
        )
        if args.check:
            if stale:
                print("stale generated stubs (run: python proto/generate.py):", file=sys.stderr)
                for name in stale:
                    print(f"  {name}", file=sys.stderr)
                return 1
            print(f"generated stubs are fresh ({len(fresh)} files)")
            return 0
        for name in current.keys() - fresh.keys():
            current[name].unlink()
        for name, path in fresh.items():
            target = ROOT / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            init = target.parent / "__init__.py"
            if not init.exists():
                init.write_text("")
        print(f"wrote {len(fresh)} files ({len(stale)} changed)")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
