"""`POST /history` beside /mcp: what file_history finds, as the text an agent's hook hands its
model, in one round trip over real HTTP."""

import asyncio
import json

import httpx
import pytest
from mcp import Client

from librarian_dagster.core.capture.touches import FileTouch
from librarian_dagster.core.recall.history import NOTHING_TOUCHED
from librarian_dagster.core.recall.hook_text import HISTORY_HEADER, history_text
from librarian_dagster.core.store.rows import FileHistory
from mcp_server.app import Served, build_server, http_app
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder


@pytest.fixture
def served(store):
    for i, path in enumerate(["/src/alpha/cmd/main.go", "/src/alpha/cmd/main.go", "/x/y.go"]):
        memory = memory_record(f"s{i}", days_ago=i, embedding_model=FakeEmbedder.model_name)
        store.memories.replace_memory(memory, [], [FileTouch(path, 1, 0)])
    app = http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1")
    with serve_http(app, free_port()) as url:
        yield url


def _post(url: str, body) -> httpx.Response:
    return httpx.post(url + "/history", json=body, timeout=20)


def test_history_answers_what_file_history_answers(served):
    body = {"path": "cmd/main.go", "cwd": "/src/alpha", "session_id": "s0"}
    response = _post(served, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["context"].startswith(
        HISTORY_HEADER.format(path="cmd/main.go") + "\n- session s1 ("
    )
    assert "s0" not in answer["context"] and answer["sessions"] == 1  # s0 asks: never its own

    async def over_mcp():
        async with Client(served + "/mcp") as client:
            return await client.call_tool("file_history", body)

    tool = asyncio.run(over_mcp())
    assert not tool.is_error
    facts = FileHistory.model_validate(tool.structured_content)
    assert (answer["context"], 1) == history_text(facts, "main.go", 1200, asker=None)
    # The tool's own answer is there too (`librarian history` prints it).
    assert FileHistory.model_validate(answer) == facts


def test_an_untouched_file_is_an_empty_answer_with_a_note(served):
    response = _post(served, {"path": "/src/alpha/README.md", "cwd": "/src/alpha"})
    assert response.status_code == 200
    said = response.json()
    assert (said["context"], said["sessions"], said["results"], said["note"]) == (
        None, 0, [], NOTHING_TOUCHED,
    )  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [{}, {"path": ""}, {"path": "a.go", "limit": "3"}, {"path": "a.go", "typo": 1},
     {"path": "relative.go"}],
)  # fmt: skip
def test_a_bad_body_is_a_400_that_says_why(served, body):
    response = _post(served, body)
    assert response.status_code == 400
    assert response.json()["error"]


def test_touches_says_what_a_hooked_agent_s_tool_call_touches(served):
    def touches(body) -> httpx.Response:
        return httpx.post(served + "/touches", json=body, timeout=20)

    read = {"agent": "codex", "tool_name": "Bash", "tool_input": {"command": "cat cmd/main.go"}}
    assert touches(read).json() == {"action": "read", "paths": ["cmd/main.go"]}
    run = dict(read, tool_input={"command": "go test ./..."})
    assert touches(run).json() == {"action": "run", "paths": []}
    patch = "*** Begin Patch\n*** Delete File: cmd/old.go\n*** End Patch\n"
    edit = dict(read, tool_name="apply_patch", tool_input={"command": patch})
    assert touches(edit).json() == {"action": "change", "paths": ["cmd/old.go"]}
    for bad in [dict(read, agent="cursor"), dict(read, tool_input="cat x"), {"agent": "codex"}]:
        response = touches(bad)
        assert response.status_code == 400 and "expected" in response.json()["error"]


def test_history_reads_the_task_from_the_live_transcript(tmp_path):
    from mcp_server.hooks_api import HistoryRequest, _history_arguments

    transcript = tmp_path / "0b5e0000-0000-4000-8000-000000000002.jsonl"
    prompt = {"type": "user", "sessionId": transcript.stem, "message": {"content": "fix flags"}}
    transcript.write_text(json.dumps(prompt) + "\n", encoding="utf-8")
    asked = HistoryRequest(path="a.go", cwd="/src/alpha", transcript_path=str(transcript))
    assert _history_arguments(asked) == {
        "path": "a.go", "cwd": "/src/alpha", "limit": asked.limit, "task": "fix flags"
    }  # fmt: skip
    given = asked.model_copy(update={"task": "the hook's own"})
    assert _history_arguments(given)["task"] == "the hook's own"
    gone = asked.model_copy(update={"transcript_path": str(tmp_path / "gone.jsonl")})
    assert "task" not in _history_arguments(gone)
