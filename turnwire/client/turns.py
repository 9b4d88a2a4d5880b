"""What a client submits: a Turn, built from plain Python values.

``Turn.build(items=["hello"], model="builtin/echo", parameters={"sleep_ms": "500"})``
is the short form; every field of the wire ``Turn`` is reachable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TypedDict

from turnwire.client.executions import TurnRetry
from turnwire.client.values import ReplayPolicy, TurnKind
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2

# One value for a file reference, submitted or executed (turnwire.executor shows it).
from turnwire.executor.context import FileRef as FileRef

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _empty() -> Mapping[str, str]:
    return _EMPTY


@dataclass(frozen=True)
class InputItem:
    """One input item; ``content`` as str is sent UTF-8 encoded."""

    content: bytes
    role: str = "user"
    content_type: str = "text/plain"
    item_id: str = ""
    metadata: Mapping[str, str] = field(default_factory=_empty)

    @classmethod
    def of(cls, value: InputItem | str | bytes) -> InputItem:
        if isinstance(value, InputItem):
            return value
        if isinstance(value, str):
            return cls(content=value.encode())
        return cls(content=value, content_type="application/octet-stream")


@dataclass(frozen=True)
class ModelRef:
    provider: str = ""
    name: str = ""
    parameters: Mapping[str, str] = field(default_factory=_empty)

    @classmethod
    def parse(cls, text: str, parameters: Mapping[str, str] | None = None) -> ModelRef:
        """``"provider/name"`` or ``"name"`` -> ModelRef."""
        provider, _, name = text.rpartition("/")
        return cls(
            provider=provider, name=name, parameters=MappingProxyType(dict(parameters or {}))
        )


class TurnFields(TypedDict, total=False):
    """The keyword form of a Turn (``client.submit(items=[...], model=...)``)."""

    items: Sequence[InputItem | str | bytes]
    model: str | ModelRef
    parameters: Mapping[str, str]
    kind: TurnKind | str
    pool: str
    files: Sequence[FileRef]
    item_metadata: Mapping[str, str]
    deadline: datetime | None
    budget_ms: int
    replay_policy: ReplayPolicy | str
    max_attempts: int
    executor: str
    retry: TurnRetry | None


@dataclass(frozen=True)
class Turn:
    """A turn to submit. ``max_attempts`` 0 means the coordinator's default.
    ``executor``: the runner executor it needs, by name (``--executor NAME=SPEC``
    on the runner); empty means ``default``. The coordinator routes it only to
    a runner serving that executor (PROTOCOL C6b) and refuses it at submit
    (NO_RUNNER_FOR_EXECUTOR) when no runner does."""

    items: tuple[InputItem, ...] = ()
    model: ModelRef = field(default_factory=ModelRef)
    kind: TurnKind = TurnKind.WRITABLE
    pool: str = ""
    files: tuple[FileRef, ...] = ()
    item_metadata: Mapping[str, str] = field(default_factory=_empty)
    deadline: datetime | None = None
    budget_ms: int = 0
    replay_policy: ReplayPolicy = ReplayPolicy.PROBE_FIRST
    max_attempts: int = 0
    executor: str = ""
    # R15: the runner may run the executor again after a failure that declared
    # effect NONE; None: one execution, never retried.
    retry: TurnRetry | None = None

    @classmethod
    def build(
        cls,
        *,
        items: Sequence[InputItem | str | bytes] = (),
        model: str | ModelRef = "",
        parameters: Mapping[str, str] | None = None,
        kind: TurnKind | str = TurnKind.WRITABLE,
        pool: str = "",
        files: Sequence[FileRef] = (),
        item_metadata: Mapping[str, str] | None = None,
        deadline: datetime | None = None,
        budget_ms: int = 0,
        replay_policy: ReplayPolicy | str = ReplayPolicy.PROBE_FIRST,
        max_attempts: int = 0,
        executor: str = "",
        retry: TurnRetry | None = None,
    ) -> Turn:
        """A Turn from plain values; ``parameters`` are the model's parameters."""
        if isinstance(model, ModelRef):
            if parameters:
                merged = {**model.parameters, **parameters}
                model = ModelRef(model.provider, model.name, MappingProxyType(merged))
        else:
            model = ModelRef.parse(model, parameters)
        return cls(
            items=tuple(InputItem.of(item) for item in items),
            model=model,
            kind=TurnKind(_enum_name(kind)),
            pool=pool,
            files=tuple(files),
            item_metadata=MappingProxyType(dict(item_metadata or {})),
            deadline=deadline,
            budget_ms=budget_ms,
            replay_policy=ReplayPolicy(_enum_name(replay_policy)),
            max_attempts=max_attempts,
            executor=executor,
            retry=retry,
        )

    def to_proto(self) -> coordinator_pb2.Turn:
        message = coordinator_pb2.Turn(
            pool=self.pool,
            model=turn_pb2.ModelRef(
                provider=self.model.provider,
                name=self.model.name,
                parameters=dict(self.model.parameters),
            ),
            input_items=[
                turn_pb2.InputItem(
                    item_id=item.item_id,
                    role=item.role,
                    content_type=item.content_type,
                    content=item.content,
                    metadata=dict(item.metadata),
                )
                for item in self.items
            ],
            files=[
                turn_pb2.FileRef(
                    uri=ref.uri,
                    sha256=ref.sha256,
                    size_bytes=ref.size_bytes,
                    media_type=ref.media_type,
                )
                for ref in self.files
            ],
            item_metadata=dict(self.item_metadata),
            kind=turn_pb2.TurnKind.Value("TURN_KIND_" + self.kind.value),
            replay_policy=turn_pb2.ReplayPolicy.Value("REPLAY_POLICY_" + self.replay_policy.value),
            max_attempts=self.max_attempts,
            executor=self.executor,
        )
        if self.retry is not None:
            message.retry_policy.CopyFrom(self.retry.to_proto())
        if self.budget_ms:
            message.limits.budget_ms = self.budget_ms
        if self.deadline is not None:
            deadline = self.deadline
            if deadline.tzinfo is None:
                raise ValueError("deadline must be timezone-aware (UTC recommended)")
            message.limits.deadline.FromDatetime(deadline.astimezone(UTC))
        return message


def _enum_name(value: str) -> str:
    """Accept ``"read-only"``, ``"read_only"`` and ``TurnKind.READ_ONLY`` alike."""
    return value.strip().upper().replace("-", "_")
