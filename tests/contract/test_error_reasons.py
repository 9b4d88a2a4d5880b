"""The ErrorReason enum as the contract's error vocabulary (errors.proto, turnwire.errors)."""

from __future__ import annotations

import re

from turnwire import errors
from turnwire.common.v1 import errors_pb2

_REASON_SHAPE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")


def test_error_reason_enum_declares_a_non_empty_domain() -> None:
    """Every ErrorInfo we send names a domain: the enum's error_domain option is set."""
    domain = errors_pb2.ErrorReason.DESCRIPTOR.GetOptions().Extensions[errors_pb2.error_domain]
    assert domain.strip()
    assert domain == errors.DOMAIN


def test_every_reason_value_maps_to_its_own_reason_string() -> None:
    """Each non-zero ErrorReason value yields a distinct, non-empty UPPER_SNAKE reason string."""
    unspecified = errors_pb2.ERROR_REASON_UNSPECIFIED
    values = [v for v in errors_pb2.ErrorReason.values() if v != unspecified]
    strings = [errors.reason(v) for v in values]
    assert len(strings) == len(set(strings))
    assert all(_REASON_SHAPE.match(s) for s in strings), strings
    assert set(strings) == errors.REASONS


def test_reason_numbers_are_unique() -> None:
    """No two reason names share a number (no allow_alias), so a number names one reason."""
    numbers = list(errors_pb2.ErrorReason.values())
    assert len(numbers) == len(set(numbers))
