"""``python -m turnwire.faults``: see turnwire/faults/cli.py."""

from turnwire.faults.cli import main

raise SystemExit(main())
