"""A RunBuilder per test, on a fresh SQLite journal in tmp_path; its stores closed after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.run_builder import RunBuilder


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunBuilder]:
    builder = RunBuilder(tmp_path)
    try:
        yield builder
    finally:
        builder.close()
