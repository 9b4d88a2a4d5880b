"""`python -m turnwire.cli` runs the `turnwire` command."""

import sys

from turnwire.cli import main

sys.exit(main())
