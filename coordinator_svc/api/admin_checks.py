"""AdminService's argument checks and refusals, each a typed ApiError (docs/ADMIN_API.md).

A refused call changes nothing: every check here runs before any write.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator_svc.api.admin_convert import executions_from_proto, verdict_from_proto
from coordinator_svc.api.convert import op_state_from_proto, turn_kind_from_proto
from coordinator_svc.api.errors import ApiError
from coordinator_svc.config import ALL_KINDS, RunnerEndpoint, RunnerSpecError, runner_endpoint
from coordinator_svc.core.membership import MemberRefusal, kinds_text
from coordinator_svc.core.model import Execution, OperationRecord, OpState
from coordinator_svc.core.operator import Refusal, Verdict, VerdictRecord
from coordinator_svc.ports import MembershipRefused
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2

_R = errors_pb2.ErrorReason
MAX_ID_CHARS = 255
MAX_REASON_CHARS = 2000
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# Line breaks and tabs are fine in a reason; other control characters are not.
_ALLOWED_CONTROL = frozenset("\n\t")


def invalid(field: str, message: str) -> ApiError:
    return ApiError(_R.ERROR_REASON_ARGUMENT_INVALID, message, field=field)


def operation_id(value: str) -> str:
    if not value or len(value) > MAX_ID_CHARS:
        raise invalid("operation_id", f"operation_id is required (1..{MAX_ID_CHARS} chars)")
    return value


def reason(value: str) -> str:
    """Why the operator acts: required, 1..2000 characters, not blank, no control
    characters but line breaks and tabs."""
    if not value.strip() or len(value) > MAX_REASON_CHARS:
        raise invalid("reason", f"reason is required: 1..{MAX_REASON_CHARS} characters, not blank")
    if any(not c.isprintable() and c not in _ALLOWED_CONTROL for c in value):
        raise invalid(
            "reason", "reason may not hold control characters (line breaks and tabs are fine)"
        )
    return value


def verdict(value: coordinator_pb2.Verdict.ValueType) -> Verdict:
    try:
        return verdict_from_proto(value)
    except ValueError:
        raise invalid(
            "verdict", "verdict must be VERDICT_EXECUTED or VERDICT_NOT_EXECUTED"
        ) from None


def optional_name(field: str, value: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise invalid(field, f"{field} is at most {MAX_ID_CHARS} characters")
    return value


def states(values: Iterable[coordinator_pb2.OperationState.ValueType]) -> tuple[OpState, ...]:
    try:
        return tuple(op_state_from_proto(value) for value in values)
    except ValueError:
        raise invalid(
            "states", "states must name known operation states (not UNSPECIFIED)"
        ) from None


def executions(values: Iterable[turn_pb2.Execution.ValueType]) -> tuple[Execution, ...]:
    try:
        return executions_from_proto(values)
    except ValueError:
        raise invalid("executions", "executions must name known values (not UNSPECIFIED)") from None


def page_size(requested: int) -> int:
    return DEFAULT_PAGE_SIZE if requested == 0 else min(requested, MAX_PAGE_SIZE)


def runner(value: str, configured: Iterable[str]) -> str:
    if not value or len(value) > MAX_ID_CHARS:
        raise invalid("runner", f"runner is required (1..{MAX_ID_CHARS} chars)")
    if value not in set(configured):
        raise runner_not_found(value)
    return value


def runner_not_found(name: str) -> ApiError:
    return ApiError(
        _R.ERROR_REASON_RUNNER_NOT_FOUND,
        f"no member of the runner set is named {name!r}",
        runner=name,
    )


def optional_reason(value: str) -> str:
    """An optional why: empty, or as ``reason`` requires."""
    return reason(value) if value else ""


def runner_fields(
    name: str, address: str, pool: str, kinds: Iterable[turn_pb2.TurnKind.ValueType]
) -> RunnerEndpoint:
    """AddRunner's fields, checked as a --runner flag's are (§11 M2)."""
    try:
        wanted = frozenset(turn_kind_from_proto(kind) for kind in kinds) or ALL_KINDS
    except ValueError:
        raise invalid(
            "kinds", "kinds must be TURN_KIND_WRITABLE and/or TURN_KIND_READ_ONLY"
        ) from None
    try:
        return runner_endpoint(name, address, pool or "default", wanted)
    except RunnerSpecError as exc:
        raise invalid("runner" if exc.field == "name" else exc.field, str(exc)) from None


def plaintext_address(address: str, message: str) -> ApiError:
    """An address plaintext may not reach (the transport rule, M2)."""
    return invalid("address", message)


def no_runner_credentials() -> ApiError:
    return ApiError(
        _R.ERROR_REASON_RUNNER_CREDENTIALS_MISSING,
        "this coordinator has no credentials runners accept (mutual TLS: --tls-cert, "
        "--tls-key, --tls-ca; or --plaintext with --runner-secret-file): it cannot call a "
        "runner it would add",
    )


def member_refused(refused: MembershipRefused) -> ApiError:
    """The typed error for a membership act the rules refuse (M2, M3)."""
    name, member = refused.runner, refused.member
    if refused.refusal is MemberRefusal.RUNNER_CONFLICT and member is not None:
        return ApiError(
            _R.ERROR_REASON_RUNNER_CONFLICT,
            f"runner {name} is a member at {member.address} (pool {member.pool}, kinds "
            f"{kinds_text(member.kinds)}, generation {member.sequence}); a member's fields "
            "never change: drain it, remove it, then add it again",
            runner=name,
            address=member.address,
            pool=member.pool,
            kinds=kinds_text(member.kinds),
            generation=str(member.sequence),
        )
    if refused.refusal is MemberRefusal.RUNNER_NOT_DRAINED:
        return ApiError(
            _R.ERROR_REASON_RUNNER_NOT_DRAINED,
            f"runner {name} is not drained: drain it first, or remove it with force",
            runner=name,
        )
    if refused.refusal is MemberRefusal.RUNNER_HAS_TURNS:
        return ApiError(
            _R.ERROR_REASON_RUNNER_HAS_TURNS,
            f"runner {name} still has {refused.turns} turn(s) bound to it: wait for them to "
            "end, or remove it with force (they end TIMED_OUT, RUNNER_REMOVED)",
            runner=name,
            turns=str(refused.turns),
        )
    return runner_not_found(name)


def no_runner_for(pool: str, kind: str) -> ApiError:
    return ApiError(
        _R.ERROR_REASON_NO_RUNNER_FOR_TURN,
        f"no configured runner serves pool {pool!r} for {kind} turns",
        pool=pool,
        kind=kind,
    )


def not_found() -> ApiError:
    return ApiError(_R.ERROR_REASON_OPERATION_NOT_FOUND, "operation not found")


def refused(refusal: Refusal, record: OperationRecord, kept: VerdictRecord | None) -> ApiError:
    """The typed FAILED_PRECONDITION for an operator's act the rules refuse."""
    op_id = record.operation_id
    if refusal is Refusal.OPERATION_NOT_TERMINAL:
        return ApiError(
            _R.ERROR_REASON_OPERATION_NOT_TERMINAL,
            f"operation {op_id} is {record.state.value}, not terminal yet: wait for it to end",
            state=record.state.value,
        )
    if refusal is Refusal.OPERATION_NOT_AMBIGUOUS:
        return ApiError(
            _R.ERROR_REASON_OPERATION_NOT_AMBIGUOUS,
            f"operation {op_id} has execution {record.execution.value}: "
            "a verdict is only for UNKNOWN",
            execution=record.execution.value,
        )
    if refusal is Refusal.VERDICT_CONFLICT and kept is not None:
        return ApiError(
            _R.ERROR_REASON_VERDICT_CONFLICT,
            f"operation {op_id} already has the verdict {kept.verdict.value} "
            f"(by {kept.recorded_by}); a verdict is final",
            recorded=kept.verdict.value,
            by=kept.recorded_by,
        )
    return ApiError(
        _R.ERROR_REASON_REQUEUE_NOT_ALLOWED,
        f"operation {op_id} has execution {record.execution.value}"
        + (f" and the verdict {kept.verdict.value}" if kept is not None else " and no verdict")
        + ": only NOT_STARTED, or UNKNOWN with a NOT_EXECUTED verdict, may be requeued",
        execution=record.execution.value,
        verdict=kept.verdict.value if kept is not None else "",
    )
