"""A stand-in for Anthropic's Messages API on 127.0.0.1, speaking its wire format.

The real `anthropic` SDK is pointed at it through `base_url` (LIBRARIAN_ANTHROPIC_BASE_URL). It
serves `POST /v1/messages`: every request is recorded (headers and body) so tests can count calls
and look for secrets in what left the machine; replies are scripted (a test queues messages or
HTTP errors), and with nothing queued it answers with a digest of the shape asked for.
"""

import json
from typing import Any

from tests.fake_gemini import DEFAULT_DIGEST
from tests.local_server import LocalServer, QuietHandler, Recorded, Reply

STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
"""The tool Claude Code offers the model for `--json-schema`'s structured output."""


def message(text: str, stop_reason: str = "end_turn", tokens_in: int = 1500) -> Reply:
    """A Messages API reply holding one text block."""
    return Reply(
        body={
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": 250},
        }
    )


def digest_message(**changes: Any) -> Reply:
    return message(json.dumps({**DEFAULT_DIGEST, **changes}))


def api_error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    """An error as the API sends it: `{"type": "error", "error": {"type", "message"}}`."""
    body = {"type": "error", "error": {"type": kind, "message": text}}
    return Reply(status=status, body=body, headers=headers or {})


class FakeAnthropic(LocalServer):
    def __init__(self) -> None:
        self.script: list[Reply] = []
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = fake.record(self)
                with fake._lock:
                    reply = fake.script.pop(0) if fake.script else None
                if self.path.split("?")[0] != "/v1/messages":
                    reply = api_error(404, "not_found_error", f"no route {self.path}")
                reply = reply or fake.default(body)
                if reply.status == 200 and _streamed(body):
                    self._stream(reply.body)
                    return
                self.send_reply(reply)

            def _stream(self, message: dict[str, Any]) -> None:
                """The message as the API streams it (server-sent events), one block at a time."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for event in _events(message):
                    data = json.dumps(event)
                    self.wfile.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)

    def calls(self) -> list[Recorded]:
        with self._lock:
            return list(self.requests)

    def default(self, raw: bytes) -> Reply:
        """With nothing scripted: a digest, as the tool the request asks the model to call when
        it offers one for structured output (Claude Code's `--json-schema`), else as text."""
        body = json.loads(raw or b"{}")
        tools = [t for t in body.get("tools") or [] if "input_schema" in t]
        forced = body.get("tool_choice") or {}
        wanted = forced.get("name") or STRUCTURED_OUTPUT_TOOL
        tool = next((t for t in tools if t.get("name") == wanted), None)
        if tool is not None:
            return tool_use(tool["name"], DEFAULT_DIGEST)
        return digest_message()


def tool_use(name: str, arguments: dict[str, Any]) -> Reply:
    """A reply calling tool `name` with `arguments`."""
    return Reply(
        body={
            "id": "msg_fake_tool",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "tool_use", "id": "toolu_fake", "name": name, "input": arguments}],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1500, "output_tokens": 250},
        }
    )


def _streamed(raw: bytes) -> bool:
    try:
        return bool(json.loads(raw or b"{}").get("stream"))
    except ValueError:
        return False


def _events(message: dict[str, Any]) -> list[dict[str, Any]]:
    start = {**message, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": i, "content_block": empty},
            {"type": "content_block_delta", "index": i, "delta": delta},
            {"type": "content_block_stop", "index": i},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return events
