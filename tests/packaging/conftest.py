"""Session fixtures: Turnwire built and installed as a user gets it (tests/packaging/venvs.py).

- ``distributions``: the sdist and the wheel, built once with ``python -m build``.
- ``server_venv``: a fresh venv with ``turnwire[server]`` from that wheel (the services).
- ``client_venv``: a fresh venv with plain ``turnwire`` from that wheel (SDK and CLI).
- ``floor_venv``: ``turnwire[server]`` with every requirement at its floor (pyproject's
  ``>=`` bounds), so those floors are what runs, not a guess.

Any test may use them; scripts/test runs tests/packaging in a step of its own.
A test must not change a venv (other tests share it): to see an install with a
file missing, copy what you need elsewhere (test_missing_data.py does).
``venvs.report_figure(config, line)`` prints a measured figure in pytest's summary.
"""

from __future__ import annotations

import pytest

from tests.packaging.venvs import (
    FIGURES,
    Distributions,
    PackagingError,
    Venv,
    build_distributions,
    floors,
    make_venv,
)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    figures = config.stash.get(FIGURES, [])
    if figures:
        terminalreporter.section("packaging figures")
        for line in figures:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    try:
        return build_distributions(tmp_path_factory.mktemp("build"))
    except PackagingError as error:
        pytest.fail(f"building the sdist and the wheel failed: {error}")


def _venv(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    requirement: str,
    constraints: list[str] | None = None,
) -> Venv:
    try:
        return make_venv(tmp_path_factory.mktemp(name) / "venv", requirement, constraints or [])
    except PackagingError as error:
        pytest.fail(f"installing {requirement} into a fresh venv failed: {error}")


@pytest.fixture(scope="session")
def server_venv(distributions: Distributions, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return _venv(tmp_path_factory, "server", f"{distributions.wheel}[server]")


@pytest.fixture(scope="session")
def client_venv(distributions: Distributions, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return _venv(tmp_path_factory, "client", str(distributions.wheel))


@pytest.fixture(scope="session")
def floor_venv(distributions: Distributions, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    pins = floors(distributions.wheel, "server")
    return _venv(tmp_path_factory, "floors", f"{distributions.wheel}[server]", pins)
