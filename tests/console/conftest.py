"""One live deployment for every console test (starting one costs seconds of CI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.stack import ConsoleStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    """A coordinator with its console and one runner, shared by tests/console.

    The stack's one ambiguous turn is made here, before any test runs: its fault
    fires on the first Dispatch, so whichever test ran first (pytest-xdist may
    give a worker only the HTTP tests) would otherwise have its own turn made
    UNKNOWN. The browser test records the only verdict on it; the HTTP tests
    only read or are refused before anything changes."""
    with ConsoleStack(tmp_path_factory.mktemp("console")) as live:
        live.ambiguous_id = live.make_ambiguous()
        yield live
