"""Turnwire: a replay-safe dispatcher for billable agent turns.

``turnwire.client`` is the Python SDK; ``turnwire.__version__`` is the
installed distribution's version (read on first use, so importing the SDK
does not pay for importlib.metadata).
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    if name == "__version__":
        from turnwire.distribution import version

        return version()
    raise AttributeError(f"module 'turnwire' has no attribute {name!r}")
