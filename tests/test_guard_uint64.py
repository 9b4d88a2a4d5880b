"""turnwire.guard.uint64_overflow skips what cannot hold a uint64 (issue 10), and
still finds one at any depth, in lists and map values (PROTOCOL §7, bad input: a
uint64 at or above 2^63 is ARGUMENT_INVALID naming the field; issue 8.3)."""

from __future__ import annotations

from google.protobuf import struct_pb2

from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.faults.v1 import faults_pb2
from turnwire.guard import _holds_uint64, uint64_overflow

TOO_BIG = 2**63


def test_a_recursive_message_with_no_uint64_is_known_to_hold_none() -> None:
    """§7: Struct -> Value -> ListValue -> Value ... ends; nothing there can overflow."""
    assert _holds_uint64(struct_pb2.Struct.DESCRIPTOR) is False
    deep = struct_pb2.Struct()
    deep.fields["a"].list_value.values.add().struct_value.fields["b"].number_value = 1.0
    assert uint64_overflow(deep) is None


def test_a_uint64_is_found_at_depth_in_a_list() -> None:
    """§7: the path names the list element that holds the value."""
    request = coordinator_pb2.SubmitTurnRequest(idempotency_key="k")
    request.turn.files.add(size_bytes=1)
    request.turn.files.add(size_bytes=TOO_BIG)
    assert _holds_uint64(coordinator_pb2.SubmitTurnRequest.DESCRIPTOR) is True
    assert uint64_overflow(request) == "turn.files[1].size_bytes"


def test_a_uint64_map_value_is_found() -> None:
    """§7: the path names the map key whose value it is."""
    stats = faults_pb2.GetStatsResponse()
    stats.calls_by_method["Dispatch"] = TOO_BIG
    assert uint64_overflow(stats) == "calls_by_method['Dispatch']"


def test_values_below_the_limit_pass() -> None:
    """§7: 2^63 - 1 has a stored form, so it passes."""
    request = coordinator_pb2.SubmitAndWatchRequest(after_sequence=TOO_BIG - 1)
    request.submit.turn.limits.budget_ms = TOO_BIG - 1
    assert uint64_overflow(request) is None
    assert uint64_overflow(coordinator_pb2.Turn()) is None
