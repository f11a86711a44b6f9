"""A fake Telegram Bot API on 127.0.0.1: the real paths and JSON, recording every message.

`POST /bot<token>/sendMessage` with a JSON or form body answers as Telegram does: 200 with
`{"ok": true, "result": {...}}`, 401 for a wrong token, 400 for a missing chat or text. Set
`fail_with` to a status (500, 429, ...) to make the next `failures` calls fail (None: forever).
"""

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from tests.local_server import POLL_S

TOKEN = "123456789:AAFakeTokenForTestsOnly_abcdefghijklm"
CHAT_ID = "42"


@dataclass
class FakeTelegram:
    url: str = ""
    token: str = TOKEN
    messages: list[dict] = field(default_factory=list)
    """Accepted messages: {"chat_id": ..., "text": ...}."""
    calls: int = 0
    fail_with: int | None = None
    failures: int | None = None

    @property
    def texts(self) -> list[str]:
        return [m["text"] for m in self.messages]


def _handler(fake: FakeTelegram, lock: threading.Lock):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass  # quiet: the test reads `fake.messages`

        def do_POST(self):
            with lock:
                fake.calls += 1
                failing = fake.fail_with is not None and (
                    fake.failures is None or fake.failures > 0
                )
                if failing and fake.failures is not None:
                    fake.failures -= 1
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if failing:
                status = fake.fail_with or 500
                body = {"ok": False, "error_code": status, "description": "Internal Server Error"}
                if status == 429:
                    body = {
                        "ok": False,
                        "error_code": 429,
                        "description": "Too Many Requests: retry after 1",
                        "parameters": {"retry_after": 1},
                    }
                return self._answer(status, body)
            if self.path != f"/bot{fake.token}/sendMessage":
                if self.path.endswith("/sendMessage"):
                    return self._answer(
                        401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
                    )
                return self._answer(
                    404, {"ok": False, "error_code": 404, "description": "Not Found"}
                )
            if self.headers.get("Content-Type", "").startswith("application/json"):
                params = json.loads(raw)
            else:
                params = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            if not params.get("chat_id") or not params.get("text"):
                return self._answer(
                    400,
                    {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
                )
            with lock:
                fake.messages.append({"chat_id": str(params["chat_id"]), "text": params["text"]})
                message_id = len(fake.messages)
            result = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": int(params["chat_id"]), "type": "private"},
                "text": params["text"],
            }
            return self._answer(200, {"ok": True, "result": result})

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def fake_telegram():
    fake = FakeTelegram()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake, threading.Lock()))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
