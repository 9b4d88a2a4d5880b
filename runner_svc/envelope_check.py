"""What a Dispatch must be before anything is decided from it (R2, ENVELOPE_INVALID)."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from runner_svc.core.model import Refusal, RunnerRefusal, SlotKind
from runner_svc.service_types import DispatchCall
from turnwire.common.v1 import turn_pb2
from turnwire.ids import sha256_hex
from turnwire.runner.v1 import runner_pb2

KINDS = {
    turn_pb2.TURN_KIND_WRITABLE: SlotKind.WRITABLE,
    turn_pb2.TURN_KIND_READ_ONLY: SlotKind.READ_ONLY,
}


def require_id(operation_id: str) -> None:
    if not operation_id or len(operation_id) > 255:
        raise RunnerRefusal(Refusal.ARGUMENT_INVALID, "operation_id must be 1..255 characters")


def verified_envelope(call: DispatchCall) -> runner_pb2.TurnEnvelope:
    """The parsed envelope, or ENVELOPE_INVALID: bytes must hash to the digest and parse."""

    def invalid(why: str) -> RunnerRefusal:
        return RunnerRefusal(Refusal.ENVELOPE_INVALID, f"{call.operation_id or '(no id)'}: {why}")

    if not call.operation_id or len(call.operation_id) > 255:
        raise invalid("operation_id must be 1..255 characters")
    if sha256_hex(call.envelope) != call.envelope_digest:
        raise invalid("envelope bytes do not hash to envelope_digest")
    envelope = runner_pb2.TurnEnvelope()
    try:
        envelope.ParseFromString(call.envelope)
    except DecodeError as exc:
        raise invalid("envelope bytes do not parse as a TurnEnvelope") from exc
    if envelope.operation_id != call.operation_id:
        raise invalid(f"envelope names operation {envelope.operation_id!r}")
    if envelope.kind not in KINDS:
        raise invalid("envelope kind must be WRITABLE or READ_ONLY")
    return envelope
