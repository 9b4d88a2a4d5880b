"""Fixtures shared by the live SDK tests (a module defines its own ``stack``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turnwire.client import TurnwireClient

from .live_stack import FAST_RETRY, TOKEN, LiveStack


@pytest.fixture
def proxied(stack: LiveStack) -> Iterator[TurnwireClient]:
    """A client through the fault proxy, with no fault rules before or after it."""
    stack.clear_faults()
    with TurnwireClient(stack.proxy_address, TOKEN, retries=FAST_RETRY) as client:
        yield client
    stack.clear_faults()
