"""Bad parameters over real HTTP: each a clear MCP tool error, never a 500 or a stack trace."""

import asyncio
import base64

import pytest
from mcp import Client

from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server, http_app
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

MEGABYTE = "lock " * (1024 * 1024 // 5)

# (tool, arguments, words the error must contain)
BAD = [
    ("search_chunks", {"query": "lock", "limit": 10**9}, "limit"),
    ("search_chunks", {"query": "lock", "limit": 0}, "limit"),
    ("search_chunks", {"query": "lock", "limit": "many"}, "limit"),
    ("search_chunks", {"query": ""}, "query"),
    ("search_chunks", {}, "query"),
    ("search_chunks", {"query": MEGABYTE}, "query"),
    ("search_chunks", {"query": "lock", "domain": "finance"}, "domain"),
    ("search_chunks", {"query": "lock", "since": "last tuesday"}, "since"),
    ("search_chunks", {"query": "lock", "tags": "go"}, "tags"),
    ("search_chunks", {"query": "lock", "tags": ["x"] * 51}, "tags"),
    ("search_chunks", {"query": "lock", "project": "p" * 201}, "project"),
    ("search_chunks", {"query": "lock", "agent": "cursor"}, "one of claude-code, codex"),
    ("search_chunks", {"query": "lock", "agent": "x" * 10_000}, "unknown agent"),
    ("search_chunks", {"query": "lock\x00"}, "NUL"),
    ("get_digest", {"session_id": "no-such-session"}, "no session"),
    ("get_digest", {"session_id": ""}, "session_id"),
    ("get_digest", {"session_id": "s" * 10_000}, "session_id"),
    ("get_digest", {"session_id": "s1\x00"}, "NUL"),
    ("list_sessions", {"limit": 10**9}, "limit"),
    ("list_sessions", {"cursor": "%%%not-a-cursor"}, "invalid cursor"),
    ("list_sessions", {"cursor": base64.urlsafe_b64encode(b"garbage").decode()}, "invalid cursor"),
    ("list_sessions", {"cursor": base64.urlsafe_b64encode(b"\xff\xfe|x").decode()}, "cursor"),
    ("list_sessions", {"cursor": "c" * 5000}, "cursor"),
    ("list_sessions", {"project": "alpha\x00"}, "NUL"),
    ("list_sessions", {"agent": "Claude Code"}, "one of claude-code, codex"),
    ("no_such_tool", {}, "no_such_tool"),
]


@pytest.fixture
def served(store):
    store.memories.replace_memory(
        memory_record("s1", embedding_model=FakeEmbedder.model_name),
        [ChunkRecord("worked_on", 0, "sqlite lock fix", [1.0, 0.0, 0.0])],
    )
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        yield url


def test_every_bad_parameter_is_a_clear_tool_error(served):
    async def go():
        async with Client(served + "/mcp") as client:
            answers = [await client.call_tool(tool, args) for tool, args, _ in BAD]
            # The session is still good after all of that.
            answers.append(await client.call_tool("search_chunks", {"query": "lock"}))
            return answers

    *refused, fine = asyncio.run(go())
    for (tool, args, says), answer in zip(BAD, refused, strict=True):
        text = answer.content[0].text if answer.content else ""
        shown = f"{tool} {str(args)[:80]}: {text[:300]}"
        assert answer.is_error, shown
        assert says.lower() in text.lower(), shown
        assert "Traceback" not in text and 'File "' not in text, shown
        assert len(text) < 4000, shown  # a 1 MB query is not echoed back
    assert not fine.is_error and fine.structured_content["results"]
