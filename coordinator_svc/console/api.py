"""The console's JSON API: HTTP requests in, the coordinator's gRPC calls out.

Routes (every one needs ``Authorization: Bearer <admin token>``)::

    GET  /api/session                          whose token; the state and execution names
    GET  /api/operations?state=S&execution=E&principal=P&runner=R&pool=P&page_size=N&page_token=T
    GET  /api/operations/{id}                  {"evidence": ...}: events, attempts, verdicts
    POST /api/operations/{id}/verdict          {"verdict": "EXECUTED", "reason": "..."}
                                               (verdict: EXECUTED or NOT_EXECUTED)
    POST /api/operations/{id}/requeue          {"reason": "..."}
    GET  /api/ambiguous?include_decided=true&include_open=true&page_size=N&page_token=T
    GET  /api/runners
    POST /api/runners/{name}/drain             {"reason": "..."}
    POST /api/runners/{name}/undrain           {}

Each is one AdminService call (docs/ADMIN_API.md). Answers are the reply in
the proto's JSON mapping (field names as in the .proto, enums by name,
uint64 as strings). A refusal is ``{"error": {"status", "code", "reason",
"message"}}``: 401 without a usable token, 403 for a token without the admin
scope, 400 for input the console or the coordinator refuses (naming the
field), and the coordinator's other refusals mapped from their gRPC codes
(``upstream.http_error_for``: 404 not found, 409 a verdict that conflicts...).

The token is checked here first (so a tenant's token is refused before any
call), then sent on with every call, where the coordinator checks it again.
Only the Authorization header is read, never a cookie or the URL, so a page
on another site cannot make the browser act with the token.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from coordinator_svc.api.auth import Authenticator, Scope
from coordinator_svc.api.errors import ApiError
from coordinator_svc.console.upstream import (
    CALL_TIMEOUT_SECONDS,
    HttpError,
    bearer_metadata,
    http_error_for,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2
from turnwire.errors import reason

_STATE_PREFIX = "OPERATION_STATE_"
_EXECUTION_PREFIX = "EXECUTION_"
STATE_NAMES: tuple[str, ...] = tuple(
    name.removeprefix(_STATE_PREFIX)
    for name in coordinator_pb2.OperationState.DESCRIPTOR.values_by_name
    if not name.endswith("_UNSPECIFIED")
)
EXECUTION_NAMES: tuple[str, ...] = tuple(
    name.removeprefix(_EXECUTION_PREFIX)
    for name in turn_pb2.Execution.DESCRIPTOR.values_by_name
    if not name.endswith("_UNSPECIFIED")
)
VERDICT_NAMES = ("EXECUTED", "NOT_EXECUTED")
MAX_PAGE_SIZE = 500
_ID_RE = re.compile(r"\A[A-Za-z0-9._:@\-]{1,255}\Z")


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    query: Mapping[str, Sequence[str]] = field(default_factory=dict)
    authorization: str | None = None
    body: Any = None  # the parsed JSON body of a POST, or None


def to_json(message: Message) -> dict[str, Any]:
    return MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def bad_request(message: str, field_name: str) -> HttpError:
    return HttpError(400, "INVALID_ARGUMENT", f"{field_name}: {message}", "ARGUMENT_INVALID")


def parse_names(values: Sequence[str], names: Sequence[str], field_name: str) -> list[str]:
    """Query values naming enum values (repeatable or comma-separated, any case,
    with or without the enum's prefix) as the short names; 400 for any other."""
    found: list[str] = []
    prefix = _STATE_PREFIX if field_name == "state" else _EXECUTION_PREFIX
    for value in values:
        for name in filter(None, (part.strip().upper() for part in value.split(","))):
            short = name.removeprefix(prefix)
            if short not in names:
                raise bad_request(
                    f"unknown {field_name} {name!r}: use {', '.join(names)}", field_name
                )
            found.append(short)
    return found


def parse_page_size(values: Sequence[str]) -> int:
    """0 (the server's default) when absent; else 1..MAX_PAGE_SIZE."""
    text = values[-1] if values else ""
    if text == "":
        return 0
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise bad_request(f"must be an integer 1..{MAX_PAGE_SIZE}, got {text[:20]!r}", "page_size")
    return int(text)


def parse_flag(values: Sequence[str], field_name: str) -> bool:
    text = (values[-1] if values else "").lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise bad_request(f"must be true or false, got {text[:20]!r}", field_name)


def check_id(value: str, field_name: str) -> str:
    if not _ID_RE.match(value):
        raise bad_request(f"not a valid {field_name}: {value[:40]!r}", field_name)
    return value


def body_text(body: Any, key: str, *, required: bool) -> str:
    """A string member of a JSON object body; 400 naming it when missing or not a string."""
    if not isinstance(body, dict):
        raise HttpError(
            400, "INVALID_ARGUMENT", "the body must be a JSON object", "REQUEST_MALFORMED"
        )
    value = body.get(key, "")
    if not isinstance(value, str):
        raise bad_request("must be a string", key)
    if required and not value.strip():
        raise bad_request("is required", key)
    return value


class _Call:
    """One authenticated request: its input and the metadata to send upstream."""

    def __init__(self, request: ApiRequest, token: str, principal: str, match: re.Match[str]):
        self.request = request
        self.principal = principal
        self.metadata = bearer_metadata(token)
        self.match = match

    def query(self, name: str) -> Sequence[str]:
        return self.request.query.get(name, ())

    def last(self, name: str) -> str:
        values = self.query(name)
        return values[-1] if values else ""

    def upstream(self) -> dict[str, Any]:
        """Keyword arguments for an upstream call: the token and a deadline."""
        return {"metadata": self.metadata, "timeout": CALL_TIMEOUT_SECONDS}


Handler = Callable[[_Call], Message | dict[str, Any]]


class ConsoleApi:
    """Routes one request to the coordinator's AdminService; thread-safe (each
    ``handle`` uses only the shared, thread-safe gRPC channel)."""

    def __init__(self, channel: grpc.Channel, authenticator: Authenticator) -> None:
        self._authenticator = authenticator
        self._admin_service = admin_pb2_grpc.AdminServiceStub(channel)
        operation = r"/api/operations/(?P<id>[^/]+)"
        runner = r"/api/runners/(?P<name>[^/]+)"
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(r"/api/session"), self._session),
            ("GET", re.compile(r"/api/operations"), self._list_operations),
            ("GET", re.compile(operation), self._describe),
            ("POST", re.compile(operation + "/verdict"), self._verdict),
            ("POST", re.compile(operation + "/requeue"), self._requeue),
            ("GET", re.compile(r"/api/ambiguous"), self._ambiguous),
            ("GET", re.compile(r"/api/runners"), self._runners),
            ("POST", re.compile(runner + "/drain"), self._drain),
            ("POST", re.compile(runner + "/undrain"), self._undrain),
        ]

    def handle(self, request: ApiRequest) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for ``request``; never raises for bad input."""
        try:
            answer = self._dispatch(request)
        except HttpError as error:
            return error.status, error.body()
        except grpc.RpcError as error:
            failure = http_error_for(error)
            return failure.status, failure.body()
        return 200, to_json(answer) if isinstance(answer, Message) else answer

    def _dispatch(self, request: ApiRequest) -> Message | dict[str, Any]:
        allowed: list[str] = []
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            token, principal = self._admin(request)
            return handler(_Call(request, token, principal, match))
        if allowed:
            raise HttpError(405, "METHOD_NOT_ALLOWED", f"use {' or '.join(allowed)}")
        raise HttpError(404, "NOT_FOUND", f"no such API path: {request.path[:100]}")

    def _admin(self, request: ApiRequest) -> tuple[str, str]:
        """The token and its principal, if it holds the admin scope; else 401/403."""
        header = request.authorization
        metadata = [("authorization", header)] if header else []
        try:
            principal = self._authenticator.authenticate(metadata, Scope.ADMIN)
        except ApiError as refused:
            if refused.code is grpc.StatusCode.PERMISSION_DENIED:
                status, message = 403, "the console needs a token with the 'admin' scope"
            else:
                status, message = 401, refused.message
            raise HttpError(status, refused.code.name, message, reason(refused.reason)) from None
        token = header.split(None, 1)[1].strip() if header else ""
        return token, principal

    # --- handlers: one AdminService call each ----------------------------------------

    def _session(self, call: _Call) -> dict[str, Any]:
        return {
            "principal": call.principal,
            "states": list(STATE_NAMES),
            "executions": list(EXECUTION_NAMES),
        }

    def _list_operations(self, call: _Call) -> Message:
        states = parse_names(call.query("state"), STATE_NAMES, "state")
        executions = parse_names(call.query("execution"), EXECUTION_NAMES, "execution")
        request = admin_pb2.AdminServiceListOperationsRequest(
            states=[coordinator_pb2.OperationState.Value(_STATE_PREFIX + s) for s in states],
            executions=[turn_pb2.Execution.Value(_EXECUTION_PREFIX + e) for e in executions],
            principal=call.last("principal").strip(),
            runner=call.last("runner").strip(),
            pool=call.last("pool").strip(),
            page_size=parse_page_size(call.query("page_size")),
            page_token=call.last("page_token"),
        )
        reply: Message = self._admin_service.ListOperations(request, **call.upstream())
        return reply

    def _describe(self, call: _Call) -> Message:
        request = admin_pb2.DescribeOperationRequest(
            operation_id=check_id(call.match["id"], "operation_id")
        )
        reply: Message = self._admin_service.DescribeOperation(request, **call.upstream())
        return reply

    def _verdict(self, call: _Call) -> Message:
        operation_id = check_id(call.match["id"], "operation_id")
        verdict = body_text(call.request.body, "verdict", required=True).strip().upper()
        verdict = verdict.removeprefix("VERDICT_")
        if verdict not in VERDICT_NAMES:
            raise bad_request(f"must be one of {', '.join(VERDICT_NAMES)}", "verdict")
        request = admin_pb2.RecordVerdictRequest(
            operation_id=operation_id,
            verdict=coordinator_pb2.Verdict.Value("VERDICT_" + verdict),
            reason=body_text(call.request.body, "reason", required=True),
        )
        reply: Message = self._admin_service.RecordVerdict(request, **call.upstream())
        return reply

    def _requeue(self, call: _Call) -> Message:
        request = admin_pb2.RequeueOperationRequest(
            operation_id=check_id(call.match["id"], "operation_id"),
            reason=body_text(call.request.body, "reason", required=True),
        )
        reply: Message = self._admin_service.RequeueOperation(request, **call.upstream())
        return reply

    def _ambiguous(self, call: _Call) -> Message:
        request = admin_pb2.ListAmbiguousOperationsRequest(
            include_decided=parse_flag(call.query("include_decided"), "include_decided"),
            include_open=parse_flag(call.query("include_open"), "include_open"),
            page_size=parse_page_size(call.query("page_size")),
            page_token=call.last("page_token"),
        )
        reply: Message = self._admin_service.ListAmbiguousOperations(request, **call.upstream())
        return reply

    def _runners(self, call: _Call) -> Message:
        reply: Message = self._admin_service.ListRunners(
            admin_pb2.ListRunnersRequest(), **call.upstream()
        )
        return reply

    def _drain(self, call: _Call) -> Message:
        request = admin_pb2.DrainRunnerRequest(
            runner=check_id(call.match["name"], "runner"),
            reason=body_text(call.request.body, "reason", required=True),
        )
        reply: Message = self._admin_service.DrainRunner(request, **call.upstream())
        return reply

    def _undrain(self, call: _Call) -> Message:
        request = admin_pb2.UndrainRunnerRequest(runner=check_id(call.match["name"], "runner"))
        reply: Message = self._admin_service.UndrainRunner(request, **call.upstream())
        return reply
