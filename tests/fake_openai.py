"""A stand-in for OpenAI's Responses API on 127.0.0.1, speaking its streaming wire format.

The real Codex CLI is pointed at it through a model provider in $CODEX_HOME/config.toml
(`base_url = "<url>/v1"`, `wire_api = "responses"`; see `codex_config`). It serves
`POST /v1/responses` as server-sent events, the events Codex reads (codex-rs/codex-api/src/sse/
responses.rs): `response.created`, then per output item `response.output_item.added`, (for a
message) `response.output_text.delta`, `response.output_item.done`, and `response.completed`
with the token usage.

Every request is recorded (headers and body), so a test can look for a hook's text in the
request it should have reached. Replies are scripted, one queued turn per request: `say(text)`,
`shell(command)`, `apply_patch(patch)` (a tool call is written in the form the request's own
tool list asks for: `exec_command`'s `cmd`, `shell_command`'s `command`, the freeform or the
JSON `apply_patch`), or an HTTP error (`api_error`). With nothing queued it answers "Done.".
"""

import itertools
import json
from collections.abc import Callable
from typing import Any

from tests.local_server import LocalServer, QuietHandler, Recorded, Reply

Item = dict[str, Any]
Turn = Callable[[dict[str, Any]], list[Item]]
"""One scripted reply: from the request's body, the output items to stream back."""

_ids = itertools.count(1)


def say(text: str) -> Turn:
    """The model answers with `text` (an assistant message) and ends its turn."""

    def items(_request: dict[str, Any]) -> list[Item]:
        return [_message(text)]

    return items


def shell(command: str) -> Turn:
    """The model runs `command` with the shell tool the request offers."""

    def items(request: dict[str, Any]) -> list[Item]:
        tools = offered(request)
        if "exec_command" in tools:  # unified exec, the default with the `unified_exec` feature
            return [_function_call("exec_command", {"cmd": command})]
        if "shell_command" in tools:
            return [_function_call("shell_command", {"command": command})]
        if "shell" in tools:
            return [_function_call("shell", {"command": ["bash", "-lc", command]})]
        raise NoSuchTool(f"the request offers no shell tool (it offers {sorted(tools)})")

    return items


def apply_patch(patch: str) -> Turn:
    """The model edits files with `patch` (`*** Begin Patch` ... `*** End Patch`)."""

    def items(request: dict[str, Any]) -> list[Item]:
        tool = offered(request).get("apply_patch")
        if tool is None:
            raise NoSuchTool(f"the request offers no apply_patch tool ({sorted(offered(request))})")
        if tool.get("type") == "custom":  # freeform: the patch itself is the input
            call_id = f"call_{next(_ids)}"
            return [
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{call_id}",
                    "status": "completed",
                    "call_id": call_id,
                    "name": "apply_patch",
                    "input": patch,
                }
            ]
        return [_function_call("apply_patch", {"input": patch})]

    return items


def api_error(status: int, message: str, code: str = "server_error") -> Reply:
    """An error as the API sends it: `{"error": {"message", "type", "code"}}`."""
    body = {"error": {"message": message, "type": code, "param": None, "code": code}}
    return Reply(status=status, body=body)


class NoSuchTool(Exception):
    """A scripted tool call the request gives the model no tool for."""


def offered(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools a request offers the model, by name (namespaced tools left out)."""
    return {tool["name"]: tool for tool in request.get("tools") or [] if tool.get("name")}


def texts(request: dict[str, Any], role: str | None = None) -> list[str]:
    """The text of every message in a request's input (of `role` only, if given)."""
    found = []
    for item in request.get("input") or []:
        if item.get("type") == "message" and role in (None, item.get("role")):
            found += [part.get("text", "") for part in item.get("content") or []]
    return found


def tool_outputs(request: dict[str, Any]) -> dict[str, str]:
    """What each tool call returned, by call id, as the request carries it back to the model."""
    outputs = {}
    for item in request.get("input") or []:
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            outputs[item["call_id"]] = output if isinstance(output, str) else json.dumps(output)
    return outputs


class FakeOpenAI(LocalServer):
    def __init__(self) -> None:
        self.script: list[Turn | Reply] = []
        self.failures: list[str] = []
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                fake.record(self)
                self.send_reply(api_error(404, f"no route {self.path}", "not_found"))

            def do_POST(self) -> None:
                raw = fake.record(self)
                if self.path.split("?")[0] != "/v1/responses":
                    self.send_reply(api_error(404, f"no route {self.path}", "not_found"))
                    return
                with fake._lock:
                    turn = fake.script.pop(0) if fake.script else say("Done.")
                if isinstance(turn, Reply):
                    self.send_reply(turn)
                    return
                try:
                    items = turn(json.loads(raw))
                except NoSuchTool as error:
                    fake.failures.append(str(error))
                    self.send_reply(api_error(400, f"fake_openai: {error}", "invalid_request"))
                    return
                self._stream(items)

            def _stream(self, items: list[Item]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for event in _events(items):
                    data = json.dumps(event)
                    self.wfile.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)

    def queue(self, *turns: Turn | Reply) -> None:
        """Script the next replies, one per request, in order."""
        with self._lock:
            self.script += turns

    def calls(self) -> list[Recorded]:
        """Every request the model was asked (POST /v1/responses), in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.startswith("/v1/")]

    def bodies(self) -> list[dict[str, Any]]:
        return [call.json for call in self.calls()]


def _message(text: str) -> Item:
    return {
        "type": "message",
        "id": f"msg_{next(_ids)}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _function_call(name: str, arguments: dict[str, Any]) -> Item:
    call_id = f"call_{next(_ids)}"
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
    }


def _events(items: list[Item]) -> list[dict[str, Any]]:
    response_id = f"resp_{next(_ids)}"
    response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    for index, item in enumerate(items):
        if item["type"] == "message":
            added = {**item, "status": "in_progress", "content": []}
        else:
            added = {**item, "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        if item["type"] == "message":
            for part in item["content"]:
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": part["text"],
                    }
                )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    usage = {
        "input_tokens": 1200,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1240,
    }
    done = {**response, "status": "completed", "output": items, "usage": usage}
    events.append({"type": "response.completed", "response": done})
    return events
