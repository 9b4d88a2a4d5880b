"""The .importlinter contracts report forbidden imports (checked in a copy of the tree)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.contract.repo_copy import copy_python_packages, run


def _lint_imports(root: Path) -> tuple[int, str]:
    # Installed with the dev extra, next to the interpreter running the tests.
    executable = str(Path(sys.executable).parent / "lint-imports")
    # cwd first on sys.path: lint-imports analyses the copy, not the editable install.
    result = run([executable, "--no-cache"], cwd=root)
    return result.returncode, result.stdout + result.stderr


def _add_module(root: Path, dotted: str, source: str) -> None:
    path = root.joinpath(*dotted.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        init = root / parent / "__init__.py"
        if parent != Path(".") and not init.exists():
            init.write_text("")
    path.write_text(source)


def test_coordinator_core_importing_grpc_is_reported(tmp_path: Path) -> None:
    """coordinator_svc.core stays pure: an import of grpc there breaks a contract."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "coordinator_svc.core.leak_by_test", "import grpc\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "coordinator_svc.core.leak_by_test -> grpc" in output


def test_runner_importing_coordinator_is_reported(tmp_path: Path) -> None:
    """The two services stay independent: the runner importing the coordinator is reported."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "runner_svc.leak_by_test", "import coordinator_svc.core\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "runner_svc.leak_by_test -> coordinator_svc.core" in output


def test_core_importing_its_storage_adapter_is_reported(tmp_path: Path) -> None:
    """core/ sits below the adapters: coordinator core importing storage is reported."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "coordinator_svc.storage.adapter_by_test", "VALUE = 1\n")
    leak = "import coordinator_svc.storage.adapter_by_test\n"
    _add_module(root, "coordinator_svc.core.leak_by_test", leak)
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "coordinator_svc.core.leak_by_test -> coordinator_svc.storage" in output


def test_runner_core_importing_generated_wire_types_is_reported(tmp_path: Path) -> None:
    """core/ never sees protobuf types: runner core importing a generated module is reported."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "runner_svc.core.leak_by_test", "from turnwire.faults.v1 import faults_pb2\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "runner_svc.core.leak_by_test -> turnwire.faults.v1.faults_pb2" in output


def test_shared_package_importing_a_service_outside_testing_is_reported(tmp_path: Path) -> None:
    """Only turnwire.testing (the test kit) may import the services; any other shared
    module importing the coordinator or the runner is reported."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "turnwire.leak_by_test", "import coordinator_svc.ports\n")
    _add_module(root, "turnwire.runner_leak_by_test", "import runner_svc\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "turnwire.leak_by_test -> coordinator_svc.ports" in output
    assert "turnwire.runner_leak_by_test -> runner_svc" in output


def test_importing_the_conformance_suite_outside_it_is_reported(tmp_path: Path) -> None:
    """turnwire.testing is a leaf: a service or another shared module importing it is reported
    (else the shared package would reach the coordinator through it)."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "turnwire.leak_by_test", "import turnwire.testing.records\n")
    _add_module(root, "runner_svc.leak_by_test", "from turnwire import testing\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "turnwire.leak_by_test -> turnwire.testing.records" in output
    assert "runner_svc.leak_by_test -> turnwire.testing" in output


def test_a_shipped_module_importing_a_bench_is_reported(tmp_path: Path) -> None:
    """bench/ is not in the wheel: a service or shared module importing it is reported (it
    would import in this tree and fail where Turnwire is installed)."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "coordinator_svc.leak_by_test", "from bench.e2e_report import RPC_METHODS\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "coordinator_svc.leak_by_test -> bench.e2e_report" in output


def test_the_executor_api_importing_protobuf_is_reported(tmp_path: Path) -> None:
    """turnwire.executor stays light (a user's executor imports it with the client
    install only): an import of the generated stubs there breaks a contract."""
    root = copy_python_packages(tmp_path)
    _add_module(root, "turnwire.executor.leak_by_test", "import turnwire.common.v1.turn_pb2\n")
    code, output = _lint_imports(root)
    assert code != 0, output
    assert "turnwire.executor.leak_by_test -> turnwire.common.v1.turn_pb2" in output
