"""What the stand-ins for services outside this machine share: an HTTP server on 127.0.0.1 on a
free port, served from a thread for the span of a `with` block."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

POLL_S = 0.05
"""How often a stand-in's `serve_forever` looks for its stop: `shutdown()` waits for that look,
and at the standard library's 0.5 s each of a hundred hook tests spent most of its time there,
often all four workers at once, the two cores idle."""


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """One scripted answer: an HTTP status, headers and a JSON body (or raw text)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: str | None = None


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output clean (no line per request)."""

    def send_reply(self, reply: Reply, content_type: str = "application/json") -> None:
        payload = (reply.raw if reply.raw is not None else json.dumps(reply.body)).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LocalServer:
    """Every request is recorded (path, headers, body), so tests can count calls and look for
    secrets in what left the machine."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def record(self, handler: BaseHTTPRequestHandler) -> bytes:
        """Read the request's body and record the request; the body, for the answer."""
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        with self._lock:
            self.requests.append(
                Recorded(handler.command, handler.path, dict(handler.headers.items()), body)
            )
        return body
