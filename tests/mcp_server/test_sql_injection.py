"""SQL injection payloads in every text parameter, against the real embedded PostgreSQL.

Every statement binds its values as parameters; these payloads show it: each is taken as the
text it is (it matches nothing, or only itself), and no table gains or loses a row.
"""

import asyncio
import base64

import pytest
from mcp import Client

from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server
from tests.core.test_store import memory_record
from tests.mcp_server.test_tools import FakeEmbedder

PAYLOADS = [
    "'; DROP TABLE memories; --",
    "' OR '1'='1",
    "' OR 1=1 --",
    "alpha' OR project <> 'alpha",
    '"; DELETE FROM indexed_chunks; --',
    "x'); TRUNCATE memories CASCADE; --",
    "%s",
    "%(project)s",
    "$1",
    "{where}",
    "\\'; SELECT pg_sleep(5); --",
    "' UNION SELECT session_id, project FROM memories --",
    "*/ OR /* ",
    "lock & !x | (y <-> z):*",
]
TABLES = ("memories", "indexed_chunks", "lexeme_df", "chunk_stats", "session_sources")


def _rows(store) -> dict[str, int]:
    with store.database.connection() as conn:
        counts = {}
        for table in TABLES:
            row = conn.execute(f"SELECT COUNT(*) AS n FROM {table}").fetchone()  # our names
            assert row is not None
            counts[table] = row["n"]
        return counts


@pytest.fixture
def server(store):
    for i, project in enumerate(("alpha", "beta")):
        store.memories.replace_memory(
            memory_record(f"s{i}", project=project, embedding_model=FakeEmbedder.model_name),
            [ChunkRecord("worked_on", 0, f"sqlite lock fix {i}", [1.0, 0.0, 0.0])],
        )
    return build_server(Served.of(store, FakeEmbedder()))


def _cursor(payload: str) -> str:
    """A well-formed cursor whose session id is the payload: it reaches the SQL."""
    return base64.urlsafe_b64encode(f"2030-01-01T00:00:00+00:00|{payload}".encode()).decode()


def test_payloads_in_every_text_parameter_are_only_text(store, server):
    before = _rows(store)
    assert before["memories"] == 2 and before["indexed_chunks"] == 2

    async def go():
        answers = {}
        async with Client(server) as client:
            for p in PAYLOADS:
                answers[p] = {
                    "query": await client.call_tool("search_chunks", {"query": p, "limit": 50}),
                    "project": await client.call_tool(
                        "search_chunks", {"query": "lock", "project": p}
                    ),
                    "tags": await client.call_tool("search_chunks", {"query": "lock", "tags": [p]}),
                    "any_tags": await client.call_tool(
                        "search_chunks", {"query": "lock", "any_tags": [p, "nothing"]}
                    ),
                    "git_branch": await client.call_tool(
                        "search_chunks", {"query": "lock", "git_branch": p}
                    ),
                    "session_id": await client.call_tool("get_digest", {"session_id": p}),
                    "list_project": await client.call_tool("list_sessions", {"project": p}),
                    "raw_cursor": await client.call_tool("list_sessions", {"cursor": p}),
                    "cursor": await client.call_tool("list_sessions", {"cursor": _cursor(p)}),
                }
        return answers

    answers = asyncio.run(go())
    assert _rows(store) == before
    for payload, got in answers.items():
        # A question is a question: it searches (nothing or the sessions), never an error.
        assert not got["query"].is_error, payload
        # As filters, a payload is a value no session has: nothing comes back, not everything.
        for name in ("project", "tags", "any_tags", "git_branch"):
            assert not got[name].is_error, (payload, name)
            assert got[name].structured_content["results"] == [], (payload, name)
        assert got["session_id"].is_error, payload
        assert "no session" in got["session_id"].content[0].text, payload
        assert got["list_project"].structured_content["sessions"] == [], payload
        assert got["raw_cursor"].is_error, payload
        # A cursor past every session id in order: the payload is compared, not executed.
        assert not got["cursor"].is_error, payload
        listed = {s["session_id"] for s in got["cursor"].structured_content["sessions"]}
        assert listed <= {"s0", "s1"}, payload


def test_the_store_itself_binds_every_value(store, server):
    """The same payloads straight at the Store, below the tools' validation."""
    from librarian_dagster.core.store.queries import SearchFilters

    before = _rows(store)
    for p in PAYLOADS:
        filters = SearchFilters(project=p, tags=(p,), any_tags=(p,), git_branch=p)
        assert store.search.find(p, [1.0, 0.0, 0.0], FakeEmbedder.model_name, filters) == []
        assert store.search.find(p, [1.0, 0.0, 0.0], p, SearchFilters()) == []  # the model name too
        assert store.memories.get_memory(p) is None
        assert store.memories.list_sessions(SearchFilters(project=p)).sessions == []
        assert store.ledger.session_source(p) is None
        assert store.memories.delete_memory(p) is False
    assert _rows(store) == before
