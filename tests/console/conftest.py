"""One live deployment for every console test (starting one costs seconds of CI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.stack import ConsoleStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    """A coordinator with its console and one runner, shared by tests/console. The
    browser test makes the only ambiguous turn and records the only verdict; the
    HTTP tests only read or are refused before anything changes."""
    with ConsoleStack(tmp_path_factory.mktemp("console")) as live:
        yield live
