"""The stand-in Chat Completions API answers as OpenAI does: one JSON body, or server-sent
events when streamed; the agent's turns (requests offering tools) take the script in order."""

import json
import urllib.error
import urllib.request

import pytest

from tests.fake_openai_chat import FakeOpenAIChat, api_error, text, tool_call

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def _post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_scripted_turns_streamed_and_not_and_side_requests():
    with FakeOpenAIChat(side_answer="A title") as fake:
        fake.script += [
            tool_call("read", {"path": "/a"}, "call_a"),
            text("Done it."),
            api_error(429, "slow down"),
        ]
        status, body = _post(fake.url, {"model": "m", "messages": [], "tools": TOOLS})
        assert status == 200
        message = json.loads(body)["choices"][0]
        assert message["finish_reason"] == "tool_calls"
        assert message["message"]["tool_calls"][0]["function"] == {
            "name": "read",
            "arguments": '{"path": "/a"}',
        }
        # A request offering no tools (a title) takes nothing from the script.
        status, body = _post(fake.url, {"model": "m", "messages": []})
        assert json.loads(body)["choices"][0]["message"]["content"] == "A title"
        stream = {"model": "m", "messages": [], "tools": TOOLS, "stream": True}
        status, body = _post(fake.url, {**stream, "stream_options": {"include_usage": True}})
        events = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        said = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert said == "Done it."
        assert chunks[-1]["usage"]["prompt_tokens"] == 1200
        assert _post(fake.url, {"model": "m", "messages": [], "tools": TOOLS})[0] == 429
        assert len(fake.agent_turns()) == 3 and len(fake.completions()) == 4
