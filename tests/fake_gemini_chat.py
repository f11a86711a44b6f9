"""A stand-in for the Gemini API as the Gemini CLI (npm @google/gemini-cli) talks to it.

The CLI's @google/genai client is pointed at it with GOOGLE_GEMINI_BASE_URL (and an API key,
GEMINI_API_KEY, that the fake never checks). It serves what the CLI calls:

- `POST /v1beta/models/<m>:streamGenerateContent?alt=sse`: the agent's own turns. Answered from
  `script`, a queue of `Step`s (`answer("...")`, `call_tool("read_file", {...})`,
  `failure(...)`), or a function of the request body; with nothing queued, `default(body)`
  (the text "OK"). The reply is server-sent events, `data: <GenerateContentResponse>` each
  followed by a blank line (CRLF, as Google sends them), one event per chunk of the step.
- `POST /v1beta/models/<m>:generateContent`: the CLI's side calls (the model router's
  classifier, when no `-m` is given; loop checks; summaries). The answer follows the
  request's `responseJsonSchema` / `responseSchema` (the least object it allows), else it is
  the text "OK". `side_answers` can queue other bodies.
- `POST /v1beta/models/<m>:countTokens`: a count of about a token per 4 characters.

Every request is recorded (method, path, headers, body; LocalServer), so a test can read what
the model was sent: `turns()` are the bodies of the streamed calls, in order; `texts(body)` every
text part of a body's `contents`; `function_responses(body)` the tool results sent back.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.local_server import LocalServer, QuietHandler, Recorded, Reply

MODEL = "gemini-2.5-flash"


@dataclass
class Step:
    """One answer to a streamed call: its chunks (each a GenerateContentResponse, sent as one
    event), or an HTTP error instead."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    error: Reply | None = None


def _chunk(parts: list[dict[str, Any]], finish: str | None, tokens_in: int, tokens_out: int):
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL}
    if finish:
        chunk["usageMetadata"] = {
            "promptTokenCount": tokens_in,
            "candidatesTokenCount": tokens_out,
            "totalTokenCount": tokens_in + tokens_out,
        }
    return chunk


def answer(text: str, pieces: int = 1, tokens_in: int = 1000, tokens_out: int = 20) -> Step:
    """The model says `text` and stops, streamed in `pieces` chunks."""
    size = max(1, -(-len(text) // max(pieces, 1)))
    bits = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    last = len(bits) - 1
    return Step([
        _chunk([{"text": bit}], "STOP" if i == last else None, tokens_in, tokens_out)
        for i, bit in enumerate(bits)
    ])  # fmt: skip


def call_tool(name: str, args: dict[str, Any], text: str = "") -> Step:
    """The model calls the tool `name` with `args` (after saying `text`, if any)."""
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts.append({"functionCall": {"name": name, "args": args}})
    return Step([_chunk(parts, "STOP", 1000, 20)])


def read_file(path: str) -> Step:
    """The model calls the CLI's read_file tool on `path` (its one argument is `file_path`)."""
    return call_tool("read_file", {"file_path": path})


def failure(status: int, message: str, reason: str) -> Step:
    """An HTTP error in Google's JSON error shape instead of a stream."""
    body = {"error": {"code": status, "message": message, "status": reason}}
    return Step(error=Reply(status, body))


def least_of(schema: Any) -> Any:
    """The least value a (JSON or OpenAPI) schema allows: its required properties filled with
    empty strings, minimum numbers, false, first enum values, empty lists."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type") or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: least_of(props.get(name)) for name in schema.get("required") or props}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "fake"


def side_answer(body: dict[str, Any]) -> Reply:
    """A non-streamed generateContent answer: JSON of the asked schema, else "OK"."""
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    text = json.dumps(least_of(schema)) if schema else "OK"
    return Reply(200, _chunk([{"text": text}], "STOP", 100, 10))


class FakeGeminiChat(LocalServer):
    def __init__(self) -> None:
        self.script: list[Step | Callable[[dict[str, Any]], Step]] = []
        self.side_answers: list[Reply] = []
        self.default: Callable[[dict[str, Any]], Step] = lambda _body: answer("OK")
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                fake.record(self)
                self.send_reply(_not_found(self.path))

            def do_POST(self) -> None:
                raw = fake.record(self)
                route = self.path.split("?", 1)[0]
                method = route.rsplit(":", 1)[-1] if route.startswith("/v1beta/models/") else ""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self.send_reply(
                        _error(400, "Invalid JSON payload received.", "INVALID_ARGUMENT")
                    )
                elif method == "streamGenerateContent":
                    self._stream(fake._next_step(body))
                elif method == "generateContent":
                    with fake._lock:
                        queued = fake.side_answers.pop(0) if fake.side_answers else None
                    self.send_reply(queued or side_answer(body))
                elif method == "countTokens":
                    size = len(json.dumps(body.get("contents") or body))
                    self.send_reply(Reply(200, {"totalTokens": size // 4}))
                else:
                    self.send_reply(_not_found(self.path))

            def _stream(self, step: Step) -> None:
                if step.error is not None:
                    self.send_reply(step.error)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for chunk in step.chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)

    def _next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            queued = self.script.pop(0) if self.script else None
        if queued is None:
            return self.default(body)
        return queued(body) if callable(queued) else queued

    # -- what was asked ------------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Recorded]:
        """Requests received, optionally only those to `:<method>`."""
        with self._lock:
            return [
                r for r in self.requests
                if method is None or r.path.split("?", 1)[0].endswith(":" + method)
            ]  # fmt: skip

    def turns(self) -> list[dict[str, Any]]:
        """The bodies of the agent's streamed calls, in the order they came."""
        return [r.json for r in self.calls("streamGenerateContent")]

    @staticmethod
    def texts(body: dict[str, Any]) -> list[str]:
        """Every text part of the body's `contents`, in order."""
        return [
            part["text"]
            for content in body.get("contents") or []
            for part in content.get("parts") or []
            if isinstance(part.get("text"), str)
        ]

    @staticmethod
    def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
        """The tool results the body sends back (`functionResponse` parts), in order."""
        return [
            part["functionResponse"]
            for content in body.get("contents") or []
            for part in content.get("parts") or []
            if isinstance(part.get("functionResponse"), dict)
        ]


def _error(status: int, message: str, reason: str) -> Reply:
    return Reply(status, {"error": {"code": status, "message": message, "status": reason}})


def _not_found(path: str) -> Reply:
    return _error(404, f"no such method: {path}", "NOT_FOUND")
