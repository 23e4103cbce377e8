"""A small, real OpenAI-compatible HTTP server on 127.0.0.1 for tests: scripted chat completions.

It speaks the wire format the ``openai`` client speaks (``POST /v1/chat/completions``,
``GET /v1/models``), so tests exercise the real client -- its retries, timeouts, Retry-After
handling and structured-output parsing -- over a real socket. Replies are scripted per test and
served in order; every request body is kept for assertions.

Usage::

    with OpenAIServer() as srv:
        srv.script(Reply(json={"priors": []}), Reply(status=429, headers={"Retry-After": "1"}))
        llm = LLMConfig(base_url=srv.base_url, model="test-model")
        ...
        srv.requests[0]["messages"]       # what the client sent

stdlib only (http.server in a daemon thread, one thread per connection).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One scripted answer.

    ``content`` (text) or ``json`` (serialized into the content) or ``refusal``; ``status`` other than
    200 sends an OpenAI-style error body instead; ``delay_s`` sleeps before answering (timeouts).
    """

    content: str | None = None
    json: Any = None
    refusal: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    finish_reason: str = "stop"
    error: str = "scripted error"
    prompt_tokens: int = 11
    completion_tokens: int = 7
    raw: str | None = None  # send this body verbatim (a proxy's HTML page, a truncated reply)


Responder = Callable[[dict[str, Any]], Reply]


class OpenAIServer:
    """Serve scripted replies; ``reject_json_schema=True`` answers 400 to ``response_format``
    json_schema requests (an endpoint without structured outputs), ``reject_json_object`` likewise."""

    def __init__(self, *, reject_json_schema: bool = False, reject_json_object: bool = False) -> None:
        self.reject_json_schema = reject_json_schema
        self.reject_json_object = reject_json_object
        self._queue: deque[Reply | Responder] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # every chat request body, in arrival order
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control
    def script(self, *replies: Reply | Responder) -> "OpenAIServer":
        """Queue replies (or functions request -> Reply) served in order; an empty queue answers 500."""
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        return len(self._queue)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start the server first (use it as a context manager)"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "OpenAIServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet in tests
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "infrarsi"}]})
                else:
                    self._send(404, _error(f"no route GET {self.path}", "not_found"))

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, _error(f"no route POST {self.path}", "not_found"))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, _error("request body is not JSON", "invalid_request_error"))
                    return
                with server._lock:
                    server.requests.append(body)
                    item = server._queue.popleft() if server._queue else None
                fmt = (body.get("response_format") or {}).get("type")
                if (fmt == "json_schema" and server.reject_json_schema) or (fmt == "json_object" and server.reject_json_object):
                    with server._lock:  # the scripted reply is for the request the endpoint accepts
                        if item is not None:
                            server._queue.appendleft(item)
                    self._send(400, _error(f"response_format type {fmt!r} is not supported", "invalid_request_error"))
                    return
                if item is None:
                    self._send(500, _error("no scripted reply left", "server_error"))
                    return
                reply = item(body) if callable(item) else item
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw is not None:
                    self._send_raw(reply.status, reply.raw.encode(), "text/html", reply.headers)
                    return
                if reply.status != 200:
                    self._send(reply.status, _error(reply.error, "scripted"), reply.headers)
                    return
                content = reply.content if reply.json is None else json.dumps(reply.json)
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "test-model"),
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": None if reply.refusal else content,
                                    "refusal": reply.refusal},
                        "finish_reason": reply.finish_reason,
                        "logprobs": None,
                    }],
                    "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                              "total_tokens": reply.prompt_tokens + reply.completion_tokens},
                }, reply.headers)

            def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                self._send_raw(status, json.dumps(obj).encode(), "application/json", headers)

            def _send_raw(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # a short poll interval: shutdown() waits up to one interval
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "OpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
