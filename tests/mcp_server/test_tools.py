"""The MCP tools through the SDK's in-memory client, on a real store."""

import asyncio

import pytest
from mcp import Client

from librarian_dagster.core.capture.readers import AGENTS
from librarian_dagster.core.capture.touches import FileTouch
from librarian_dagster.core.digest.schema import DOMAINS
from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server
from tests.core.test_store import memory_record


class FakeEmbedder:
    """A 3-d embedder: the store and server are what is tested here, not the model."""

    model_name = "fake-3d"
    dimension = 3

    def embed_documents(self, texts):
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text):
        return [1.0, 0.0, 0.0] if "lock" in text else [0.0, 1.0, 0.0]


CODEX_SESSION = "s3"
"""The one session of the store Codex wrote; Claude Code wrote the others."""


@pytest.fixture
def server(store):
    for i in range(5):
        store.memories.replace_memory(
            memory_record(
                f"s{i}",
                project="alpha" if i % 2 else "beta",
                days_ago=i,
                embedding_model=FakeEmbedder.model_name,
                agent="codex" if f"s{i}" == CODEX_SESSION else "claude-code",
            ),
            [ChunkRecord("worked_on", 0, f"sqlite lock fix {i}", [1.0, 0.01 * i, 0.0])],
            [FileTouch("/src/alpha/lock.go", 1, 0)] if i % 2 else [],
        )
    return build_server(Served.of(store, FakeEmbedder()))


def _call(server, tool, arguments):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(go())


def test_tools_are_listed_with_typed_schemas(server):
    async def go():
        async with Client(server) as client:
            return await client.list_tools()

    tools = {t.name: t for t in asyncio.run(go()).tools}
    assert set(tools) == {"search_chunks", "get_digest", "list_sessions", "file_history"}
    limit = tools["search_chunks"].input_schema["properties"]["limit"]
    assert limit["maximum"] == 50 and limit["minimum"] == 1
    assert tools["search_chunks"].output_schema is not None
    for name in ("search_chunks", "list_sessions"):
        domain = tools[name].input_schema["properties"]["domain"]
        listed = [v for option in domain["anyOf"] for v in option.get("enum", [])]
        assert listed == list(DOMAINS), name
        agent = tools[name].input_schema["properties"]["agent"]
        assert agent["enum"] == [*AGENTS, None], name
        assert "codex" in agent["description"], name


def test_every_answer_names_the_agent_and_search_and_listing_filter_by_it(server):
    found = _call(server, "search_chunks", {"query": "lock", "limit": 10}).structured_content
    agents = {r["session_id"]: r["agent"] for r in found["results"]}
    assert agents == {f"s{i}": "codex" if i == 3 else "claude-code" for i in range(5)}
    only = _call(server, "search_chunks", {"query": "lock", "agent": "codex", "limit": 10})
    assert [(r["session_id"], r["agent"]) for r in only.structured_content["results"]] == [
        (CODEX_SESSION, "codex")
    ]
    claude = _call(server, "search_chunks", {"query": "lock", "agent": "claude-code"})
    assert CODEX_SESSION not in {r["session_id"] for r in claude.structured_content["results"]}
    listed = _call(server, "list_sessions", {"agent": "codex"}).structured_content["sessions"]
    assert [(s["session_id"], s["agent"]) for s in listed] == [(CODEX_SESSION, "codex")]
    every = _call(server, "list_sessions", {}).structured_content["sessions"]
    assert sorted(s["agent"] for s in every) == ["claude-code"] * 4 + ["codex"]
    digest = _call(server, "get_digest", {"session_id": CODEX_SESSION}).structured_content
    assert digest["agent"] == "codex"
    history = _call(
        server, "file_history", {"path": "/src/alpha/lock.go", "cwd": "/src/alpha"}
    ).structured_content
    assert [(r["session_id"], r["agent"]) for r in history["results"]] == [
        ("s1", "claude-code"),
        (CODEX_SESSION, "codex"),
    ]


@pytest.mark.parametrize("tool", ["search_chunks", "list_sessions"])
def test_an_unknown_agent_is_refused_naming_the_known_ones(server, tool):
    arguments = {"query": "lock"} if tool == "search_chunks" else {}
    refused = _call(server, tool, {**arguments, "agent": "cursor"})
    assert refused.is_error
    text = refused.content[0].text
    assert "unknown agent 'cursor'" in text
    assert ", ".join(AGENTS) in text


def test_get_digest_returns_the_whole_digest(server):
    result = _call(server, "get_digest", {"session_id": "s2"})
    assert not result.is_error
    digest = result.structured_content
    assert digest["digest"]["worked_on"] == ["worked on s2"]
    assert digest["digest_text"] == "digest of s2"
    assert digest["chunk_count"] == 1 and digest["project"] == "beta"


def test_search_filters_by_project(server):
    result = _call(server, "search_chunks", {"query": "lock", "project": "alpha", "limit": 10})
    assert not result.is_error
    ids = [r["session_id"] for r in result.structured_content["results"]]
    assert ids and set(ids) <= {"s1", "s3"}


def test_get_digest_of_an_unknown_session_is_an_error(server):
    result = _call(server, "get_digest", {"session_id": "nope"})
    assert result.is_error
    assert "no session" in result.content[0].text


def test_bad_arguments_are_errors(server):
    assert _call(server, "search_chunks", {"query": "x", "domain": "finance"}).is_error
    assert _call(server, "search_chunks", {"query": "x", "limit": 500}).is_error
    assert _call(server, "list_sessions", {"cursor": "%%%not-a-cursor"}).is_error


def test_list_sessions_pages_newest_first(server):
    first = _call(server, "list_sessions", {"limit": 2}).structured_content
    assert [s["session_id"] for s in first["sessions"]] == ["s0", "s1"]
    second = _call(server, "list_sessions", {"limit": 2, "cursor": first["next_cursor"]})
    assert [s["session_id"] for s in second.structured_content["sessions"]] == ["s2", "s3"]
    last = _call(
        server, "list_sessions", {"limit": 5, "cursor": second.structured_content["next_cursor"]}
    )
    assert [s["session_id"] for s in last.structured_content["sessions"]] == ["s4"]
    assert last.structured_content["next_cursor"] is None
    only_beta = _call(server, "list_sessions", {"project": "beta"}).structured_content
    assert {s["project"] for s in only_beta["sessions"]} == {"beta"}
