"""A small OpenAI-compatible chat-completions server, for testing executors.

Real HTTP on 127.0.0.1, real server-sent events (``data: {...}\\n\\n`` then
``data: [DONE]\\n\\n``): what an executor meets from a provider, scripted. The
behaviour of a request is chosen by its ``model`` name, so the turn itself
picks it (``turnwire submit --model stub-429x1 ...``):

========================  ==========================================================
``stub-echo`` (any other)  streams the last user message back, one word per token
``stub-429xK``             answers 429 (``Retry-After: 1``) to the first K requests
                           of an ``Idempotency-Key``, then streams as ``stub-echo``
``stub-429``               always 429
``stub-503xK``, ``stub-503``  the same with 503 Service Unavailable, no Retry-After
``stub-breakK``            streams K tokens, then drops the connection (no [DONE])
``stub-badK``              streams K tokens, then an event that is not JSON
``stub-hang``              reads the request, then sends nothing (a read timeout)
``stub-slowMS``            as ``stub-echo``, MS milliseconds between tokens
========================  ==========================================================

``max_tokens`` in the body stops the stream early (``finish_reason: length``);
``stream_options.include_usage`` adds a usage event before [DONE]. With an API
key set, a request without ``Authorization: Bearer <key>`` gets 401. Every
request is recorded (:attr:`StubServer.requests`) for tests to assert on.

Run it for the docs (it prints the base URL to give the executor)::

    python examples/http/stub_server.py --port 0
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SCRIPT = re.compile(r"stub-(?P<kind>429|503|break|bad|hang|slow)(?:x?(?P<n>\d+))?")
# Between tokens unless the model name says otherwise: slow enough that tokens
# arrive one by one (a client sees them stream), fast enough for tests.
DEFAULT_PAUSE_SECONDS = 0.01


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stub received."""

    method: str
    path: str
    idempotency_key: str | None
    authorization: str | None
    body: dict[str, Any] = field(default_factory=dict)


class StubServer:
    """The server on a thread of its own: ``with StubServer() as stub: stub.base_url``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        *,
        verbose: bool = False,
    ) -> None:
        """``verbose``: print a line per request (the command line's mode)."""
        self.api_key = api_key
        self.verbose = verbose
        self._host = host
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._seen: dict[tuple[str, str], int] = {}  # (behaviour, key) -> requests so far
        self._hanging = threading.Event()  # set at shutdown: hung handlers return
        handler = type("Handler", (_Handler,), {"stub": self})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        serve = self._server.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL is set to: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self._server.server_port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def keys(self) -> list[str | None]:
        """The Idempotency-Key of every chat request, in arrival order."""
        return [r.idempotency_key for r in self.requests if r.path == "/v1/chat/completions"]

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._hanging.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
        if self.verbose:
            model, key = request.body.get("model", ""), request.idempotency_key
            line = f"{request.method} {request.path} model={model} Idempotency-Key={key}"
            print(line, flush=True)

    def _count(self, behaviour: str, key: str | None) -> int:
        """How many requests for this behaviour and key came before this one."""
        with self._lock:
            slot = (behaviour, key or "")
            before = self._seen.get(slot, 0)
            self._seen[slot] = before + 1
            return before


class _Handler(BaseHTTPRequestHandler):
    stub: StubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the docs read the recorded requests instead

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        self.stub._record(
            RecordedRequest(
                "POST",
                self.path,
                self.headers.get("Idempotency-Key"),
                self.headers.get("Authorization"),
                body if isinstance(body, dict) else {},
            )
        )
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        if self.stub.api_key and self.headers.get("Authorization") != f"Bearer {self.stub.api_key}":
            return self._json(401, {"error": {"message": "bad or missing API key"}})
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._json(400, {"error": {"message": "the body needs messages"}})
        self._chat(body)

    def _chat(self, body: dict[str, Any]) -> None:
        model = str(body.get("model", ""))
        script = _SCRIPT.fullmatch(model)
        kind, n = (script["kind"], script["n"]) if script else ("echo", None)
        if kind in ("429", "503"):
            key = self.headers.get("Idempotency-Key")
            if n is None or self.stub._count(model, key) < int(n):
                extra = {"Retry-After": "1"} if kind == "429" else {}
                message = "rate limited" if kind == "429" else "overloaded"
                return self._json(int(kind), {"error": {"message": message}}, extra)
        if kind == "hang":
            self.stub._hanging.wait(60)  # until the client gives up, or shutdown
            self.close_connection = True
            return None
        tokens = _reply_tokens(body)
        limit = body.get("max_tokens")
        finish = "stop"
        if isinstance(limit, int) and 0 <= limit < len(tokens):
            tokens, finish = tokens[:limit], "length"
        pause = int(n) / 1000 if kind == "slow" and n else DEFAULT_PAUSE_SECONDS
        self._stream(body, model, tokens, finish, kind, int(n or 0), pause)

    def _stream(
        self,
        body: dict[str, Any],
        model: str,
        tokens: list[str],
        finish: str,
        kind: str,
        n: int,
        pause: float,
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()  # no Content-Length: the body ends when the connection closes
        self.close_connection = True
        created, ident = int(time.time()), "chatcmpl-stub"

        def event(delta: dict[str, str], finish_reason: str | None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [choice],
            }
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        try:
            self._send(event({"role": "assistant", "content": ""}, None))
            for number, token in enumerate(tokens):
                if kind in ("break", "bad") and number == n:
                    if kind == "bad":
                        self._send(b"data: {not json\n\n")
                    return  # the connection closes with no [DONE]: a broken stream
                time.sleep(pause)
                self._send(event({"content": token}, None))
            self._send(event({}, finish))
            options = body.get("stream_options")
            if isinstance(options, dict) and options.get("include_usage"):
                prompt = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": len(tokens),
                    "total_tokens": prompt + len(tokens),
                }
                chunk = {"id": ident, "object": "chat.completion.chunk", "choices": []}
                self._send(b"data: " + json.dumps({**chunk, "usage": usage}).encode() + b"\n\n")
            self._send(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancel): nothing more to send

    def _send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _reply_tokens(body: dict[str, Any]) -> list[str]:
    """The 'model': the last user message back, word by word (a space before each
    word but the first, as real tokenizers split text)."""
    users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
    words = str(users[-1].get("content", "")).split() if users else []
    return [word if i == 0 else " " + word for i, word in enumerate(words or ["(silence)"])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--api-key", help="require Authorization: Bearer KEY")
    args = parser.parse_args(argv)
    stub = StubServer(args.host, args.port, api_key=args.api_key, verbose=True).start()
    print(f"OPENAI_BASE_URL={stub.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        stub.stop()


if __name__ == "__main__":
    main()
