"""`POST /recall` beside /mcp: search_chunks as plain JSON in one round trip, over real HTTP."""

import asyncio

import httpx
import pytest
from mcp import Client

from librarian_dagster.core.models import SearchResult
from librarian_dagster.core.recall import NOTHING_RELEVANT
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import ChunkRecord, Store
from mcp_server.app import build_server, http_app
from mcp_server.auth import TokenFileVerifier
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

TOKEN = "s3cret-token-for-tests"


def _remember(store, count: int = 5) -> None:
    for i in range(count):
        store.replace_memory(
            memory_record(f"s{i}", days_ago=i, embedding_model=FakeEmbedder.model_name),
            [
                ChunkRecord("worked_on", 0, f"sqlite lock fix {i}", [1.0, 0.01 * i, 0.0]),
                ChunkRecord("solution", 0, f"retry the lock {i}", [1.0, 0.02 * i, 0.0]),
            ],
        )


@pytest.fixture
def served(store):
    """The real HTTP app of the recall server on a free port, with a few memories."""
    _remember(store)
    with serve_http(http_app(build_server(store, FakeEmbedder()), "127.0.0.1"), free_port()) as url:
        yield url


def _post(url: str, body=None, **kwargs) -> httpx.Response:
    return httpx.post(url + "/recall", json=body, timeout=20, **kwargs)


def test_recall_answers_what_search_chunks_answers(served):
    response = _post(served, {"query": "lock", "limit": 4})
    assert response.status_code == 200, response.text
    answer = SearchResult.model_validate(response.json())
    assert answer.query == "lock" and answer.note is None
    assert len(answer.results) == 4

    async def over_mcp():
        async with Client(served + "/mcp") as client:
            return await client.call_tool("search_chunks", {"query": "lock", "limit": 4})

    tool = asyncio.run(over_mcp())
    assert not tool.is_error
    assert response.json() == tool.structured_content


def test_limit_defaults_to_three(served):
    response = _post(served, {"query": "lock"})
    assert response.status_code == 200
    assert len(response.json()["results"]) == 3


def test_an_empty_memory_answers_nothing_relevant_with_a_note(store):
    with serve_http(http_app(build_server(store, FakeEmbedder()), "127.0.0.1"), free_port()) as url:
        response = _post(url, {"query": "lock"})
    assert response.status_code == 200
    assert response.json()["results"] == [] and response.json()["note"] == NOTHING_RELEVANT


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 2001}, "query"),
        ({"query": "lock", "limit": 0}, "limit"),
        ({"query": "lock", "limit": 11}, "limit"),
        ({"query": "lock", "limit": "3"}, "limit"),
        ({"query": 42}, "query"),
        ({"query": "lock\x00"}, "NUL"),
        ({"query": "lock", "project": "alpha"}, "project"),
        (["lock"], "body"),
    ],
)
def test_a_bad_body_is_a_400_that_says_what_is_wrong(served, body, says):
    response = _post(served, body)
    assert response.status_code == 400
    message = response.json()["error"]
    assert message.startswith('expected {"query": str, "limit": 1..10}') and says in message


def test_a_400_never_repeats_the_prompt(served):
    prompt = "my password is hunter2-do-not-echo"
    response = _post(served, {"query": prompt, "limit": 99})
    assert response.status_code == 400 and "limit" in response.text
    assert "hunter2" not in response.text


def test_not_json_not_post_too_large_and_wrong_content_type(served):
    broken = httpx.post(
        served + "/recall",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
        timeout=20,
    )
    assert broken.status_code == 400 and "error" in broken.json()
    # POST only (a GET falls through to the SSE app's mount, which has no such page).
    assert httpx.get(served + "/recall", timeout=20).status_code in (404, 405)
    huge = _post(served, {"query": "lock", "pad": "x" * 20_000})
    assert huge.status_code == 413
    form = httpx.post(served + "/recall", data={"query": "lock"}, timeout=20)
    assert form.status_code == 415


def test_a_foreign_host_header_is_refused_on_loopback(served):
    # What a DNS-rebinding page would send: its own hostname, resolved to 127.0.0.1.
    response = _post(served, {"query": "lock"}, headers={"Host": "attacker.example:3201"})
    assert response.status_code == 421
    assert _post(served, {"query": "lock"}, headers={"Host": "localhost:3201"}).status_code == 200


def test_with_a_token_the_endpoint_demands_it(store):
    _remember(store, 2)
    server = build_server(store, FakeEmbedder(), verifier=TokenFileVerifier(shared_token=TOKEN))
    app = http_app(server, "127.0.0.1")
    with serve_http(app, free_port()) as url:
        missing = _post(url, {"query": "lock"})
        wrong = _post(url, {"query": "lock"}, headers={"Authorization": "Bearer nope"})
        basic = _post(url, {"query": "lock"}, headers={"Authorization": f"Basic {TOKEN}"})
        right = _post(url, {"query": "lock"}, headers={"Authorization": f"Bearer {TOKEN}"})
    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in refused.text
    assert right.status_code == 200 and right.json()["results"]


def test_a_broken_database_is_a_503_without_details(tmp_path):
    nowhere = Store(f"postgresql://postgres@/librarian?host={tmp_path / 'no-socket'}")
    with serve_http(
        http_app(build_server(nowhere, FakeEmbedder()), "127.0.0.1"), free_port()
    ) as url:
        response = _post(url, {"query": "lock"})
    assert response.status_code == 503
    assert response.json() == {"error": "recall failed on the server"}


def test_the_token_comes_from_settings_and_stays_out_of_repr():
    settings = Settings.from_env({"LIBRARIAN_MCP_TOKEN": TOKEN})
    assert settings.mcp_token == TOKEN and TOKEN not in repr(settings)
    assert Settings.from_env({}).mcp_token is None
