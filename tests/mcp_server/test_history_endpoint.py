"""`POST /history` beside /mcp: file_history as plain JSON in one round trip, over real HTTP."""

import asyncio

import httpx
import pytest
from mcp import Client

from librarian_dagster.core.capture.touches import FileTouch
from librarian_dagster.core.recall.history import NOTHING_TOUCHED
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
    answer = FileHistory.model_validate(response.json())
    assert answer.path == "cmd/main.go"
    assert [s.session_id for s in answer.results] == ["s1"]  # s0 asks: never its own answer

    async def over_mcp():
        async with Client(served + "/mcp") as client:
            return await client.call_tool("file_history", body)

    tool = asyncio.run(over_mcp())
    assert not tool.is_error
    assert response.json() == tool.structured_content


def test_an_untouched_file_is_an_empty_answer_with_a_note(served):
    response = _post(served, {"path": "/src/alpha/README.md", "cwd": "/src/alpha"})
    assert response.status_code == 200
    assert response.json()["results"] == [] and response.json()["note"] == NOTHING_TOUCHED


@pytest.mark.parametrize(
    "body",
    [{}, {"path": ""}, {"path": "a.go", "limit": "3"}, {"path": "a.go", "typo": 1},
     {"path": "relative.go"}],
)  # fmt: skip
def test_a_bad_body_is_a_400_that_says_why(served, body):
    response = _post(served, body)
    assert response.status_code == 400
    assert response.json()["error"]
