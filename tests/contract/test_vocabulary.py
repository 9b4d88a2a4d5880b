"""turnwire.vocabulary and every service-side mirror hold exactly their proto enum's names.

The generated descriptors are the truth (proto/ is the contract): a value
added to a .proto without its Python member, or a member no .proto declares,
fails here instead of surfacing as a ValueError on the first message that
carries it. The runner's own copies (runner_svc/core/model.py) and the SDK's
(which keep UNSPECIFIED, to read values from a newer server) are held too.
"""

from __future__ import annotations

import enum
import re

import pytest
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool

from coordinator_svc.core import model as coordinator_model
from coordinator_svc.core import runner_view
from runner_svc.core import model as runner_model
from turnwire import errors, vocabulary
from turnwire.client import values as sdk
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.runner.v1 import runner_pb2

_ERROR = errors_pb2.ErrorReason.DESCRIPTOR
_EXECUTION = turn_pb2.Execution.DESCRIPTOR
_STOP = turn_pb2.StopReason.DESCRIPTOR
_EFFECT = turn_pb2.DeclaredEffect.DESCRIPTOR
_KIND = turn_pb2.TurnKind.DESCRIPTOR
_POLICY = turn_pb2.ReplayPolicy.DESCRIPTOR
_OP_STATE = coordinator_pb2.OperationState.DESCRIPTOR
_RUNNER_STATE = runner_pb2.RunnerOperationState.DESCRIPTOR


def _prefix(wire: descriptor.EnumDescriptor) -> str:
    """buf's ENUM_VALUE_PREFIX: ``RunnerOperationState`` -> ``RUNNER_OPERATION_STATE_``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", wire.name).upper() + "_"


def wire_names(wire: descriptor.EnumDescriptor, *, unspecified: bool = False) -> set[str]:
    """The enum's value names without the prefix; the zero value only if asked for."""
    prefix = _prefix(wire)
    assert all(v.name.startswith(prefix) for v in wire.values), (prefix, wire.values)
    return {v.name.removeprefix(prefix) for v in wire.values if unspecified or v.number != 0}


def python_names(python: type[enum.StrEnum]) -> set[str]:
    """Member names, after checking each value is its own name (what storage keeps)."""
    assert all(member.value == member.name for member in python), list(python)
    return {member.name for member in python}


# (Python enum, proto enum): the shared vocabulary, then each service's mirror.
MIRRORS: list[tuple[type[enum.StrEnum], descriptor.EnumDescriptor]] = [
    (vocabulary.ErrorReason, _ERROR),
    (vocabulary.Execution, _EXECUTION),
    (vocabulary.StopReason, _STOP),
    (vocabulary.DeclaredEffect, _EFFECT),
    (vocabulary.TurnKind, _KIND),
    (vocabulary.RunnerOperationState, _RUNNER_STATE),
    (vocabulary.OperationState, _OP_STATE),
    (coordinator_model.ReplayPolicy, _POLICY),
    (runner_model.Execution, _EXECUTION),
    (runner_model.StopReason, _STOP),
    (runner_model.SlotKind, _KIND),
    (runner_model.RowState, _RUNNER_STATE),
]
SDK_MIRRORS: list[tuple[type[enum.StrEnum], descriptor.EnumDescriptor]] = [
    (sdk.OperationState, _OP_STATE),
    (sdk.Execution, _EXECUTION),
    (sdk.StopReason, _STOP),
    (sdk.TurnKind, _KIND),
    (sdk.ReplayPolicy, _POLICY),
]


def _id(case: object) -> str:
    if isinstance(case, descriptor.EnumDescriptor):
        return case.full_name
    assert isinstance(case, type)
    return f"{case.__module__}.{case.__qualname__}"


@pytest.mark.parametrize(("python", "wire"), MIRRORS, ids=_id)
def test_each_enum_has_exactly_its_proto_values_but_unspecified(
    python: type[enum.StrEnum], wire: descriptor.EnumDescriptor
) -> None:
    assert python_names(python) == wire_names(wire)


@pytest.mark.parametrize(("python", "wire"), SDK_MIRRORS, ids=_id)
def test_each_sdk_enum_has_exactly_its_proto_values_with_unspecified(
    python: type[enum.StrEnum], wire: descriptor.EnumDescriptor
) -> None:
    assert python_names(python) == wire_names(wire, unspecified=True)


def test_error_reason_is_the_reason_strings_the_wire_helpers_send() -> None:
    assert set(vocabulary.ErrorReason) == errors.REASONS
    assert {errors.reason(v.number) for v in _ERROR.values if v.number} == set(
        vocabulary.ErrorReason
    )


def test_runner_refusals_are_error_reasons() -> None:
    """Every reason the runner refuses with is one the contract declares."""
    assert set(runner_model.Refusal) <= set(vocabulary.ErrorReason)


def test_the_coordinator_uses_the_shared_enums_not_copies() -> None:
    """One definition: the coordinator model re-exports the vocabulary's classes."""
    assert coordinator_model.Execution is vocabulary.Execution
    assert coordinator_model.StopReason is vocabulary.StopReason
    assert coordinator_model.TurnKind is vocabulary.TurnKind
    assert runner_view.RunnerOpState is vocabulary.RunnerOperationState
    assert coordinator_model.OpState is vocabulary.OperationState
    assert coordinator_model.TERMINAL_STATES is vocabulary.TERMINAL_STATES


def test_the_terminal_set_is_declared_once_and_read_the_same_everywhere() -> None:
    """The SDK and the oracle hold the vocabulary's terminal set, and it is
    exactly the states with no outgoing edge in the coordinator's edge table."""
    from coordinator_svc.core import edges
    from turnwire.harness import oracle_schema

    terminal = {state.value for state in vocabulary.TERMINAL_STATES}
    assert {state.value for state in sdk.OperationState if state.is_terminal} == terminal
    assert terminal == oracle_schema.TERMINAL_STATES
    assert {state.value for state, onward in edges.LEGAL_EDGES.items() if not onward} == terminal


def test_members_equal_their_stored_strings() -> None:
    """StrEnum members compare and hash as their strings: a reason read back from
    the journal as a plain str matches the member that wrote it."""
    assert vocabulary.ErrorReason.CANCELLED == "CANCELLED"
    assert {"DEADLINE_EXCEEDED": 1}[vocabulary.ErrorReason.DEADLINE_EXCEEDED] == 1
    assert f"{vocabulary.ErrorReason.NO_FREE_SLOT}" == "NO_FREE_SLOT"


def test_a_proto_value_without_its_member_is_caught() -> None:
    """The check's own teeth: ErrorReason plus one value the Python enum lacks differs."""
    file = descriptor_pb2.FileDescriptorProto(name="vocabulary_probe.proto", package="probe")
    _ERROR.CopyToProto(file.enum_type.add())
    file.enum_type[0].ClearField("options")
    file.enum_type[0].value.add(name="ERROR_REASON_ADDED_BY_TEST", number=999)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file.SerializeToString())
    grown = pool.FindEnumTypeByName("probe.ErrorReason")
    assert wire_names(grown) - python_names(vocabulary.ErrorReason) == {"ADDED_BY_TEST"}
