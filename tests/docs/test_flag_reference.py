"""docs/CONFIGURATION.md's flag tables are what the services' parsers say today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_flag_tables_match_the_parsers():
    """Stale tables fail with the command that rewrites them (scripts/flag_reference.py)."""
    done = subprocess.run(
        [sys.executable, "scripts/flag_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_generated_block_has_rows():
    """Each marker pair holds a table: a misspelt subcommand fails the generator, not silently."""
    page = (ROOT / "docs" / "CONFIGURATION.md").read_text()
    blocks = page.split("<!-- flags: ")[1:]
    assert len(blocks) >= 6
    for block in blocks:
        assert block.count("\n| `--") >= 1, block[:80]
