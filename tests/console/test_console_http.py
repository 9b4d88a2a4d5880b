"""The console's HTTP side without a browser: who may call, what bad input gets, what is served.

A live coordinator (console on 127.0.0.1:0) and runner, in-process; every
request is a real HTTP request over a socket.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from coordinator_svc.__main__ import build_parser, config_from_args
from coordinator_svc.console import check_console_address
from tests.console.stack import ADMIN_TOKEN, TENANT_TOKEN, ConsoleStack
from turnwire.transport_security import SecurityConfigError

pytestmark = pytest.mark.timeout(90)


def test_no_token_is_401_and_says_how_to_send_one(stack: ConsoleStack) -> None:
    """No Authorization header: 401 CREDENTIALS_MISSING with WWW-Authenticate: Bearer."""
    status, headers, _ = stack.http("GET", "/api/operations", token=None)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    status, body = stack.api("GET", "/api/runners", token=None)
    assert status == 401
    assert body["error"]["reason"] == "CREDENTIALS_MISSING"
    assert "Bearer" in body["error"]["message"]


def test_unknown_token_is_401(stack: ConsoleStack) -> None:
    status, body = stack.api("GET", "/api/session", token="no-such-token")
    assert status == 401 and body["error"]["reason"] == "CREDENTIALS_UNKNOWN"


def test_a_tenant_token_is_403_even_where_turnservice_would_answer_it(
    stack: ConsoleStack,
) -> None:
    """A token without the admin scope: 403 SCOPE_MISSING on every route, reads included
    (TurnService would list that tenant's own operations; the console is for admins)."""
    for method, path, body in (
        ("GET", "/api/session", None),
        ("GET", "/api/operations", None),
        ("GET", "/api/runners", None),
        ("GET", "/api/ambiguous", None),
        ("POST", "/api/operations/op_x/verdict", {"verdict": "EXECUTED", "reason": "r"}),
    ):
        status, answer = stack.api(method, path, token=TENANT_TOKEN, body=body)
        assert status == 403, (method, path, answer)
        assert answer["error"]["reason"] == "SCOPE_MISSING"
        assert "admin" in answer["error"]["message"]


def test_the_admin_token_opens_a_session(stack: ConsoleStack) -> None:
    status, body = stack.api("GET", "/api/session")
    assert status == 200
    assert body["principal"] == "ops"
    assert "TIMED_OUT" in body["states"] and body["executions"] == [
        "NOT_STARTED",
        "STARTED",
        "UNKNOWN",
    ]


@pytest.mark.parametrize(
    ("path", "field", "words"),
    [
        ("/api/operations?state=SUCCEEDED,BOGUS", "state", "unknown state 'BOGUS'"),
        ("/api/operations?execution=MAYBE", "execution", "unknown execution 'MAYBE'"),
        ("/api/operations?page_size=0", "page_size", "1..500"),
        ("/api/operations?page_size=ten", "page_size", "1..500"),
        ("/api/ambiguous?include_decided=perhaps", "include_decided", "true or false"),
        ("/api/operations/op%20x", "operation_id", "not a valid operation_id"),
    ],
)
def test_bad_query_input_is_400_naming_the_field(
    stack: ConsoleStack, path: str, field: str, words: str
) -> None:
    status, body = stack.api("GET", path)
    assert status == 400, body
    error = body["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error["reason"] == "ARGUMENT_INVALID"
    assert error["message"].startswith(f"{field}: ") and words in error["message"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"verdict": "PROBABLY", "reason": "x"}, "verdict: must be one of EXECUTED, NOT_EXECUTED"),
        ({"verdict": "EXECUTED"}, "reason: is required"),
        ({"verdict": "EXECUTED", "reason": 7}, "reason: must be a string"),
        (["EXECUTED"], "the body must be a JSON object"),
    ],
)
def test_a_bad_verdict_body_is_400_and_nothing_is_called(
    stack: ConsoleStack, body: object, words: str
) -> None:
    status, answer = stack.api("POST", "/api/operations/op_x/verdict", body=body)
    assert status == 400, answer
    assert words in answer["error"]["message"]


def test_a_body_that_is_not_json_is_400_and_other_types_are_415(stack: ConsoleStack) -> None:
    status, _, raw = stack.http("POST", "/api/runners/r1/drain", raw_body=b"{not json")
    assert status == 400 and b"the body is not JSON" in raw
    status, _, _ = stack.http(
        "POST", "/api/runners/r1/drain", raw_body=b"reason=x", content_type="text/plain"
    )
    assert status == 415


def test_unknown_paths_and_methods(stack: ConsoleStack) -> None:
    assert stack.api("GET", "/api/nothing-here")[0] == 404
    status, body = stack.api("POST", "/api/runners", body={})
    assert status == 405 and body["error"]["message"] == "use GET"
    assert stack.http("GET", "/etc/passwd")[0] == 404
    assert stack.http("GET", "/../pyproject.toml")[0] == 404


def test_the_page_and_its_files_are_served_with_a_strict_policy(stack: ConsoleStack) -> None:
    """index.html, console.js and console.css come from the package; every answer
    keeps scripts to the page's own (CSP), forbids framing and sends no CORS header."""
    status, headers, body = stack.http("GET", "/", token=None)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="console.js"' in body and b"http" not in body.split(b"<body>")[0]
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert headers["X-Content-Type-Options"] == "nosniff"
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        status, headers, body = stack.http("GET", "/" + name, token=None)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    status, headers, _ = stack.http("GET", "/api/session")
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert not any(name.lower().startswith("access-control-") for name in headers)


def test_the_token_never_reaches_the_log(
    stack: ConsoleStack, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="coordinator_svc.console"):
        stack.http("GET", "/api/session")
        stack.http("GET", "/api/operations?state=NOPE")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "/api/session" in logged  # the request log is there...
    assert ADMIN_TOKEN not in logged  # ...without the token


def test_plaintext_is_refused_off_loopback() -> None:
    check_console_address("127.0.0.1:0", None)
    check_console_address("[::1]:8080", None)
    with pytest.raises(SecurityConfigError, match="not a loopback address"):
        check_console_address("0.0.0.0:8080", None)


def test_the_flag_sets_the_console_address() -> None:
    args = build_parser().parse_args(["serve", "--plaintext", "--console-listen", "127.0.0.1:0"])
    assert config_from_args(args).console_listen == "127.0.0.1:0"
    args = build_parser().parse_args(["serve", "--plaintext"])
    assert config_from_args(args).console_listen is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--console-listen", "nowhere"])


def test_a_taken_port_is_refused_with_the_address(stack: ConsoleStack) -> None:
    """A second console on a port already serving one: AddressInUseError naming it,
    and nothing left listening or half-open."""
    from coordinator_svc.api.auth import Authenticator
    from coordinator_svc.console import start_console
    from turnwire.serving import AddressInUseError

    with pytest.raises(
        AddressInUseError, match=f"cannot serve the console on {stack.console_address}"
    ):
        start_console(stack.console_address, stack.address, Authenticator())
    assert stack.api("GET", "/api/session")[0] == 200  # the first one still serves


def test_with_tls_material_the_console_serves_https(tmp_path: Path) -> None:
    """--tls-*: HTTPS with the coordinator's certificate, on any address (here loopback);
    a client trusting the deployment CA gets the page and the API, plain HTTP gets nothing."""
    import hashlib
    import http.client
    import json
    import ssl

    from coordinator_svc.api.auth import Authenticator, Scope, TokenEntry
    from coordinator_svc.console import start_console
    from turnwire.certs import CA_CERT, issue_deployment
    from turnwire.transport_security import TlsMaterial

    issued = issue_deployment(tmp_path, coordinators=("coordinator",), hosts=("127.0.0.1",))
    tls = TlsMaterial.from_files(
        issued.cert_of("coordinator"), issued.key_of("coordinator"), tmp_path / CA_CERT
    )
    digest = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
    admins = Authenticator([TokenEntry("ops", digest, frozenset({Scope.ADMIN}))])
    console = start_console("127.0.0.1:0", "127.0.0.1:1", admins, tls)  # upstream never dialled
    try:
        assert console.url.startswith("https://127.0.0.1:")
        host, port = console.address.split(":")
        trust = ssl.create_default_context(cafile=str(tmp_path / CA_CERT))
        connection = http.client.HTTPSConnection(host, int(port), context=trust, timeout=10)
        connection.request(
            "GET", "/api/session", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["principal"] == "ops"
        connection.close()
        plain = http.client.HTTPConnection(host, int(port), timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/")
            plain.getresponse()
        plain.close()
    finally:
        console.stop()


def test_the_coordinators_refusals_keep_their_code_and_reason(stack: ConsoleStack) -> None:
    """AdminService's typed refusals reach the page as HTTP statuses with the
    ErrorInfo reason, and a refused verdict changes nothing."""
    (succeeded,) = stack.run_turns({})
    status, body = stack.api("GET", "/api/operations/op_" + "0" * 32)
    assert status == 404 and body["error"]["reason"] == "OPERATION_NOT_FOUND"
    verdict = {"verdict": "EXECUTED", "reason": "it ran"}
    status, body = stack.api("POST", f"/api/operations/{succeeded}/verdict", body=verdict)
    assert status == 409 and body["error"]["reason"] == "OPERATION_NOT_AMBIGUOUS"
    status, body = stack.api("GET", f"/api/operations/{succeeded}")
    assert status == 200
    operation = body["evidence"]["operation"]["operation"]
    assert operation["state"] == "OPERATION_STATE_SUCCEEDED" and "verdict" not in operation
    status, body = stack.api("POST", "/api/runners/nobody/drain", body={"reason": "x"})
    assert status == 404 and body["error"]["reason"] == "RUNNER_NOT_FOUND"


def test_the_list_is_filtered_across_principals(stack: ConsoleStack) -> None:
    """The admin sees alice's operations; a state filter keeps only that state."""
    succeeded, failed = stack.run_turns({}, {"fail": "1"})
    status, body = stack.api("GET", "/api/operations?state=FAILED&principal=alice")
    assert status == 200
    rows = body["operations"]
    assert failed in {row["operation"]["operation_id"] for row in rows}
    assert {row["operation"]["state"] for row in rows} == {"OPERATION_STATE_FAILED"}
    assert {row["principal"] for row in rows} == {"alice"}
    assert succeeded not in {row["operation"]["operation_id"] for row in rows}


def test_connections_past_the_cap_are_closed_at_once_and_logged(
    stack: ConsoleStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Each connection is a thread: MAX_CONNECTIONS clients that connect and never send
    hold them all, the next connection is closed without a thread (one WARNING
    says so), and once they go the console serves again."""
    import http.client
    import socket

    from coordinator_svc.console.server import MAX_CONNECTIONS
    from tests.console.stack import wait_until

    host, _, port = stack.console_address.rpartition(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        with (
            caplog.at_level(logging.WARNING, logger="coordinator_svc.console"),
            pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)),
        ):
            stack.http("GET", "/api/session")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"{MAX_CONNECTIONS} connections open (the cap)" in w for w in warnings)
    finally:
        for connection in idle:
            connection.close()

    def serves() -> bool:
        try:
            return stack.http("GET", "/api/session")[0] == 200
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return False

    wait_until(serves, 10, "the console serves again once the idle connections closed")
