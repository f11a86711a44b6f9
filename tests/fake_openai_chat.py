"""A stand-in for OpenAI's Chat Completions API on 127.0.0.1, speaking its wire format.

For agent CLIs that talk to "an OpenAI-compatible endpoint" (OpenCode's `@ai-sdk/openai-compatible`
provider, Pi's `openai-completions` API): they are pointed at `<url>/v1` as their base URL. It
serves `POST /v1/chat/completions` (streamed as server-sent events when the request says
`"stream": true`, else one JSON body) and `GET /v1/models`. Every request is recorded (headers and
body) so tests can look for what an extension added to what the model was sent.

Replies are scripted: a test queues answers (`text("...")`, `tool_call("read", {...})`, or an
`api_error`), taken in order by the requests that offer tools (the agent's own turns); a request
offering none (a title or summary an agent asks for on the side) is answered `side_answer` and
takes nothing from the queue. With nothing queued the answer is `default_text`.
"""

import json
import time
from collections.abc import Callable
from typing import Any

from tests.local_server import LocalServer, QuietHandler, Recorded, Reply

MODEL = "stand-in-model"


def _completion(message: dict[str, Any], finish_reason: str, tokens_in: int) -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-stand-in",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": 25,
                "total_tokens": tokens_in + 25,
            },
        }
    )


def text(answer: str, tokens_in: int = 1200) -> Reply:
    """An answer that says `answer` and ends the turn."""
    return _completion({"role": "assistant", "content": answer}, "stop", tokens_in)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_stand_in_1") -> Reply:
    """An answer that calls the tool `name` with `arguments` (and says nothing else)."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return _completion(message, "tool_calls", 1200)


def api_error(status: int, message: str, kind: str = "invalid_request_error") -> Reply:
    """An error as OpenAI sends it: `{"error": {"message", "type", "param", "code"}}`."""
    return Reply(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})


class FakeOpenAIChat(LocalServer):
    def __init__(self, default_text: str = "Done.", side_answer: str = "Stand-in title") -> None:
        self.script: list[Reply] = []
        self.default_text = default_text
        self.side_answer = side_answer
        self.choose: Callable[[dict[str, Any]], Reply | None] | None = None
        """When set: asked first for every request's answer (None: the usual rules)."""
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                fake.record(self)
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "stand-in"}
                    self.send_reply(Reply(body={"object": "list", "data": [model]}))
                    return
                self.send_reply(api_error(404, f"no route {self.path}", "not_found"))

            def do_POST(self) -> None:
                raw = fake.record(self)
                if not self.path.split("?")[0].endswith("/chat/completions"):
                    self.send_reply(api_error(404, f"no route {self.path}", "not_found"))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self.send_reply(api_error(400, "the body is not JSON"))
                    return
                reply = fake.answer(body)
                if reply.status == 200 and body.get("stream"):
                    usage = (body.get("stream_options") or {}).get("include_usage")
                    self._stream(reply.body, bool(usage))
                    return
                self.send_reply(reply)

            def _stream(self, completion: dict[str, Any], usage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for chunk in _chunks(completion, usage):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)

    def answer(self, body: dict[str, Any]) -> Reply:
        if self.choose is not None and (chosen := self.choose(body)) is not None:
            return chosen
        if not body.get("tools"):
            return text(self.side_answer)
        with self._lock:
            return self.script.pop(0) if self.script else text(self.default_text)

    def calls(self) -> list[Recorded]:
        with self._lock:
            return list(self.requests)

    def completions(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests, in order."""
        return [c.json for c in self.calls() if c.path.split("?")[0].endswith("/chat/completions")]

    def agent_turns(self) -> list[dict[str, Any]]:
        """The chat completion requests that offered tools: the agent's own turns."""
        return [body for body in self.completions() if body.get("tools")]


def _chunks(completion: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """The completion as the API streams it: a role, the content, each tool call, the finish."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        start = {"index": i, "id": call["id"], "type": "function"}
        start["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [start]}))
        args = {"index": i, "function": {"arguments": function["arguments"]}}
        chunks.append(chunk({"tool_calls": [args]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks
