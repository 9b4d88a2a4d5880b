"""Accepting a turn (C1): validate, derive digests, build the envelope once,
persist operation + envelope + first event in one journal transaction.

Decisions recorded here:

- ``turn.kind`` UNSPECIFIED is refused (INVALID_ARGUMENT / TURN_INVALID,
  field ``turn.kind``) rather than defaulted: the kind picks the runner's slot
  pool (R4), and guessing "writable" for a read-only turn, or the reverse,
  would silently change admission. The client must say.
- ``turn.replay_policy`` UNSPECIFIED means PROBE_FIRST (turn.proto says so).
- ``turn.max_attempts`` 0 means the configured default; above 100 is refused.
- ``turn.pool`` empty means ``"default"``.
- ``turn.retry_policy`` (R15): unset or ``max_retries`` 0 is no retry;
  ``max_retries`` 0..10, backoffs valid Durations 0..1 h with max at least
  initial, multiplier 0 (default 2) or 1..10. Out of bounds is
  INVALID_ARGUMENT / TURN_INVALID naming the field
  (``turn.retry_policy.max_backoff``), nothing stored. Copied into the
  envelope as submitted: the runner applies it (``turnwire.retry_policy``).
- ``turn.limits.queue_timeout``: a valid Duration, 0 .. 10 years (0: none).
- ``turn.executor`` names the executor (empty: ``default``). When every
  runner of the turn's pool and kind has said which executors it serves
  (GetRunnerInfo) and none serves it, the turn is refused FAILED_PRECONDITION
  / NO_RUNNER_FOR_EXECUTOR (metadata ``executor``, ``served``), nothing
  stored, before quotas are charged; a retry of a turn already accepted under
  the same key is answered as a replay (C1). While one of them has not said
  yet, nothing is proven and the turn is accepted (C6b).
- Quotas (``core.quotas``) are checked after validation, before anything is
  stored: over a limit is RESOURCE_EXHAUSTED / QUOTA_EXCEEDED with a
  google.rpc.RetryInfo, except for a retry of a turn already accepted under
  the same key, which is answered as a replay as always (C1).
- ``request_digest`` hashes the Turn exactly as submitted (deterministic
  serialization), before any defaulting, so a retry is recognised even if the
  coordinator's defaults changed in between.
- The idempotency key must be 1..255 characters, every one printable in the
  sense of ``str.isprintable`` (no control characters, tabs or line breaks;
  spaces and non-ASCII letters are fine). The raw key is never stored: only
  sha256(principal NUL key).
- Size bounds (turnwire.limits, README "Message limits"): the envelope at
  most ``max_envelope_bytes`` (the runners' receive limit minus the Dispatch
  framing), so every attempt's Dispatch can reach a runner; a request that
  cannot make such an envelope is refused before it is built. At most 1000
  input items, 1000 files and 1000 item_metadata entries. Too big is
  INVALID_ARGUMENT / TURN_INVALID (field ``turn``): the same bytes never fit,
  so retrying later cannot help (not RESOURCE_EXHAUSTED), and nothing is stored.

Everything up to :func:`accept` is pure; ``accept`` is the I/O edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.api.control import DispatchControl
from coordinator_svc.api.convert import (
    replay_policy_from_proto,
    replay_policy_to_proto,
    turn_kind_from_proto,
)
from coordinator_svc.api.errors import ApiError
from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.model import (
    EventRecord,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.quotas import QuotaRefusal
from coordinator_svc.core.routing import NoRunnerForExecutor, executor_name
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import IdempotencyKeyReused, Journal
from turnwire import retry_policy
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.ids import new_operation_id, sha256_hex
from turnwire.limits import MessageLimits
from turnwire.observability import tracing
from turnwire.runner.v1 import runner_pb2
from turnwire.vocabulary import EXECUTOR_NAME

DEFAULT_LIMITS = MessageLimits()
MAX_ITEMS = 1000
MAX_KEY_CHARS = 255
MAX_POOL_CHARS = 128
MAX_ATTEMPTS_LIMIT = 100
DEFAULT_POOL = "default"
_R = errors_pb2.ErrorReason


@dataclass(frozen=True)
class ValidTurn:
    """A submission that passed validation, with defaults resolved."""

    turn: coordinator_pb2.Turn
    pool: str
    kind: TurnKind
    replay_policy: ReplayPolicy
    max_attempts: int


@dataclass(frozen=True)
class Accepted:
    operation: OperationRecord
    replayed: bool
    # The operation's first event (QUEUED, sequence 1) when this call stored it;
    # None for a replay. SubmitAndWatch streams it without reading it back.
    first_event: EventRecord | None = None


def _turn_invalid(field: str, message: str) -> ApiError:
    return ApiError(_R.ERROR_REASON_TURN_INVALID, message, field=field)


def check_idempotency_key(key: str) -> None:
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
        raise ApiError(
            _R.ERROR_REASON_IDEMPOTENCY_KEY_INVALID,
            f"idempotency_key is required: 1..{MAX_KEY_CHARS} printable characters",
            field="idempotency_key",
        )


def _check_sizes(request: coordinator_pb2.SubmitTurnRequest, limits: MessageLimits) -> None:
    size = request.ByteSize()
    if size > limits.max_submit_request_bytes:
        raise _turn_invalid(
            "turn",
            f"request is {size} bytes; its envelope could not fit a runner's "
            f"{limits.runner_max_receive_bytes}-byte Dispatch (envelope at most "
            f"{limits.max_envelope_bytes} bytes)",
        )
    turn = request.turn
    for field, count in (
        ("turn.input_items", len(turn.input_items)),
        ("turn.files", len(turn.files)),
        ("turn.item_metadata", len(turn.item_metadata)),
    ):
        if count > MAX_ITEMS:
            raise _turn_invalid(field, f"{field} has {count} entries; at most {MAX_ITEMS}")


def _pool(turn: coordinator_pb2.Turn) -> str:
    pool = turn.pool or DEFAULT_POOL
    if len(pool) > MAX_POOL_CHARS or not pool.isprintable() or pool != pool.strip():
        raise _turn_invalid("turn.pool", f"turn.pool must be 1..{MAX_POOL_CHARS} printable chars")
    return pool


def _check_executor(turn: coordinator_pb2.Turn) -> None:
    """R14: empty (the runners' default executor) or a name a runner can serve."""
    if turn.executor and not EXECUTOR_NAME.fullmatch(turn.executor):
        raise _turn_invalid(
            "turn.executor",
            "turn.executor must be empty or 1..63 of a-z 0-9 _ . - starting with a letter or digit",
        )


def _check_retry_policy(turn: coordinator_pb2.Turn) -> None:
    """R15: a policy the runner can apply as written, or a refusal naming the field."""
    if not turn.HasField("retry_policy"):
        return
    policy = turn.retry_policy
    seconds: dict[str, float | None] = {}
    for name in ("initial_backoff", "max_backoff"):
        if not policy.HasField(name):
            seconds[name] = None
            continue
        value = getattr(policy, name)
        if not (0 <= value.seconds <= MAX_QUEUE_TIMEOUT_SECONDS and 0 <= value.nanos < 10**9):
            field = f"turn.retry_policy.{name}"
            raise _turn_invalid(field, f"{field} must be a duration from 0 to 1 hour")
        seconds[name] = value.seconds + value.nanos / 1e9
    multiplier = policy.backoff_multiplier
    if multiplier != multiplier:  # NaN: no bound holds for it
        multiplier = -1.0
    found = retry_policy.problems(
        policy.max_retries, seconds["initial_backoff"], seconds["max_backoff"], multiplier
    )
    if found:
        name, why = found[0]
        field = f"turn.retry_policy.{name}"
        raise _turn_invalid(field, f"{field} {why}")


def _kind(turn: coordinator_pb2.Turn) -> TurnKind:
    try:
        return turn_kind_from_proto(turn.kind)
    except ValueError:
        raise _turn_invalid(
            "turn.kind", "turn.kind is required: TURN_KIND_WRITABLE or TURN_KIND_READ_ONLY"
        ) from None


def _replay_policy(turn: coordinator_pb2.Turn) -> ReplayPolicy:
    try:
        return replay_policy_from_proto(turn.replay_policy)
    except ValueError:
        raise _turn_invalid("turn.replay_policy", "turn.replay_policy is not known") from None


MAX_QUEUE_TIMEOUT_SECONDS = 10 * 365 * 24 * 3600


def _check_limits(turn: coordinator_pb2.Turn) -> None:
    for name in ("queue_timeout", "heartbeat_timeout"):
        if not turn.limits.HasField(name):
            continue
        timeout = getattr(turn.limits, name)
        if not (0 <= timeout.seconds <= MAX_QUEUE_TIMEOUT_SECONDS and 0 <= timeout.nanos < 10**9):
            raise _turn_invalid(
                f"turn.limits.{name}", f"turn.limits.{name} must be a duration from 0 to 10 years"
            )
    if not turn.limits.HasField("deadline"):
        return
    deadline = turn.limits.deadline
    # Seconds within 0001..9999 and nanos within a second, as Timestamp requires;
    # a runner must be able to read what every attempt sends.
    if not (-62135596800 <= deadline.seconds <= 253402300799 and 0 <= deadline.nanos < 10**9):
        raise _turn_invalid("turn.limits.deadline", "turn.limits.deadline is not a valid time")


def _max_attempts(turn: coordinator_pb2.Turn, default: int) -> int:
    if turn.max_attempts > MAX_ATTEMPTS_LIMIT:
        raise _turn_invalid(
            "turn.max_attempts", f"turn.max_attempts must be 0..{MAX_ATTEMPTS_LIMIT}"
        )
    return turn.max_attempts or default


def validate(
    request: coordinator_pb2.SubmitTurnRequest,
    default_max_attempts: int,
    limits: MessageLimits = DEFAULT_LIMITS,
) -> ValidTurn:
    """Check a SubmitTurnRequest; raise ApiError (INVALID_ARGUMENT) naming the field."""
    check_idempotency_key(request.idempotency_key)
    if not request.HasField("turn"):
        raise _turn_invalid("turn", "turn is required")
    _check_sizes(request, limits)
    _check_limits(request.turn)
    _check_executor(request.turn)
    _check_retry_policy(request.turn)
    return ValidTurn(
        turn=request.turn,
        pool=_pool(request.turn),
        kind=_kind(request.turn),
        replay_policy=_replay_policy(request.turn),
        max_attempts=_max_attempts(request.turn, default_max_attempts),
    )


def request_digest(turn: coordinator_pb2.Turn) -> str:
    return sha256_hex(turn.SerializeToString(deterministic=True))


def idempotency_key_digest(principal: str, key: str) -> str:
    return sha256_hex(principal.encode("utf-8") + b"\0" + key.encode("utf-8"))


def build_envelope(
    valid: ValidTurn,
    operation_id: str,
    principal: str,
    trace_context: runner_pb2.TraceContext | None = None,
) -> bytes:
    """The exact bytes every attempt will send (§1): built once, here. With the
    submitting call's trace context, when it had one (docs/TRACING.md)."""
    turn = valid.turn
    envelope = runner_pb2.TurnEnvelope(
        operation_id=operation_id,
        routing=runner_pb2.Routing(pool=valid.pool),
        input_items=turn.input_items,
        files=turn.files,
        item_metadata=turn.item_metadata,
        kind=turn.kind,
        replay_policy=replay_policy_to_proto(valid.replay_policy),
        principal=principal,
        # R14: the runner refuses a turn for an executor it does not serve.
        executor=turn.executor,
    )
    if turn.HasField("model"):
        envelope.model.CopyFrom(turn.model)
    if turn.HasField("limits"):
        envelope.limits.CopyFrom(turn.limits)
    if turn.HasField("retry_policy"):  # R15: the runner retries, inside its one row
        envelope.retry_policy.CopyFrom(turn.retry_policy)
    if trace_context is not None:
        envelope.trace_context.CopyFrom(trace_context)
    return envelope.SerializeToString(deterministic=True)


def new_operation(
    request: coordinator_pb2.SubmitTurnRequest,
    valid: ValidTurn,
    principal: str,
    operation_id: str,
    now: datetime,
    trace_context: runner_pb2.TraceContext | None = None,
) -> tuple[OperationRecord, EventRecord]:
    """The QUEUED record and its first event (sequence 1), ready for journal.submit."""
    envelope = build_envelope(valid, operation_id, principal, trace_context)
    birth = Birth(
        operation_id=operation_id,
        principal=principal,
        idempotency_key_digest=idempotency_key_digest(principal, request.idempotency_key),
        request_digest=request_digest(request.turn),
        envelope=envelope,
        pool=valid.pool,
        kind=valid.kind,
        replay_policy=valid.replay_policy,
        max_attempts=valid.max_attempts,
    )
    return born(birth, now)


async def accept(
    request: coordinator_pb2.SubmitTurnRequest,
    principal: str,
    *,
    journal: Journal,
    dispatch: DispatchControl,
    feed: ChangeFeed,
    clock: Callable[[], datetime],
    default_max_attempts: int,
    limits: MessageLimits = DEFAULT_LIMITS,
    trace_context: runner_pb2.TraceContext | None = None,
) -> Accepted:
    """C1: validate, persist in one transaction, then wake the dispatcher.
    ``trace_context`` goes into the envelope (docs/TRACING.md); it never
    decides whether the turn is accepted, nor whether it is a replay."""
    valid = validate(request, default_max_attempts, limits)
    if not dispatch.has_runner_for(valid.pool, valid.kind):
        raise ApiError(
            _R.ERROR_REASON_NO_RUNNER_FOR_TURN,
            f"no configured runner serves pool {valid.pool!r} for {valid.kind.value} turns",
            pool=valid.pool,
            kind=valid.kind.value,
        )
    operation_id, now = new_operation_id(), clock()
    record, event = new_operation(request, valid, principal, operation_id, now, trace_context)
    if trace_context is not None and len(record.envelope) > limits.max_envelope_bytes:
        # Tracing never refuses a turn: one that fits without its trace context
        # goes without it (docs/TRACING.md).
        record, event = new_operation(request, valid, principal, operation_id, now)
    if len(record.envelope) > limits.max_envelope_bytes:
        # Its Dispatch could never reach a runner (turnwire.limits): refuse it now
        # rather than accept a turn that can only end unsent.
        raise _turn_invalid(
            "turn",
            f"the turn's envelope is {len(record.envelope)} bytes; at most "
            f"{limits.max_envelope_bytes} fit a runner's {limits.runner_max_receive_bytes}-byte "
            "Dispatch",
        )
    no_executor = dispatch.executor_refusal(
        valid.pool, valid.kind, executor_name(valid.turn.executor)
    )
    if no_executor is not None:
        return await _no_runner_for_executor(journal, record, no_executor)
    refusal = dispatch.quota_check(principal)
    if refusal is not None:
        return await _over_quota(journal, record, refusal)
    # The dispatcher may write the turn's first attempt with it (issue 10).
    with tracing.span("turnwire.journal.submit", record.operation_id):
        stored, replayed = await dispatch.store_accepted(record, event, journal.submit)
    if replayed:
        dispatch.quota_refund(principal)
        return Accepted(stored, True)
    if stored.state is OpState.QUEUED:
        dispatch.accepted(stored)
    feed.publish(stored.operation_id)
    return Accepted(stored, False, event)


async def _replay_or_none(journal: Journal, record: OperationRecord) -> Accepted | None:
    """C1 before a refusal: the turn already accepted under this key and request
    (a replay, nothing stored), IdempotencyKeyReused for another request, None
    when the key is new."""
    existing = await journal.by_idempotency_key(record.principal, record.idempotency_key_digest)
    if existing is None:
        return None
    if existing.request_digest != record.request_digest:
        raise IdempotencyKeyReused(existing.operation_id)
    return Accepted(existing, True)


async def _no_runner_for_executor(
    journal: Journal, record: OperationRecord, refusal: NoRunnerForExecutor
) -> Accepted:
    """C6b: no runner serves the turn's executor (all have said): refused with
    FAILED_PRECONDITION / NO_RUNNER_FOR_EXECUTOR, nothing stored; a retry of a
    turn accepted earlier under the key (its runner served it then) is still
    answered as the replay it is (C1)."""
    replay = await _replay_or_none(journal, record)
    if replay is not None:
        return replay
    raise ApiError(
        _R.ERROR_REASON_NO_RUNNER_FOR_EXECUTOR,
        refusal.message,
        executor=refusal.executor,
        served=",".join(refusal.served),
    )


async def _over_quota(journal: Journal, record: OperationRecord, refusal: QuotaRefusal) -> Accepted:
    """The principal is at a limit: a retry of a turn it already submitted is
    still answered (C1: same key, same request), anything else is refused with
    RESOURCE_EXHAUSTED and a RetryInfo; nothing is stored either way."""
    replay = await _replay_or_none(journal, record)
    if replay is not None:
        return replay
    raise ApiError(
        _R.ERROR_REASON_QUOTA_EXCEEDED,
        refusal.message,
        retry_after=refusal.retry_after,
        limit=refusal.limit,
        allowed=f"{refusal.allowed:g}",
        current=f"{refusal.current:g}",
    )
