"""`librarian search` on a real store and the real local embedder: the same result as MCP."""

import asyncio
import json
import re

import pytest
from mcp import Client

from librarian_dagster.cli.main import main
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.rows import SearchResult
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http

BULLETS = {
    "sqlite": "Raised SQLite busy_timeout so concurrent writers stop failing with database locked",
    "css": "Added margin-bottom to closed details elements in the stylesheet",
}
FILES = {"sqlite": [], "css": ["styles/site.css", "styles/print.css", "a.css", "b.css", "c.css"]}


@pytest.fixture
def remembered(store, tmp_path, monkeypatch):
    """Two sessions embedded with the real model, and the CLI pointed at their database.

    Each holds its text as a digest bullet and as an exchange, as an ingested session would.
    """
    embedder = local_embedder()
    for session_id, bullet in BULLETS.items():
        [vector] = embedder.embed_documents([bullet])
        record = memory_record(session_id, embedding_model=embedder.model_name)
        store.memories.replace_memory(
            record.model_copy(update={"files": FILES[session_id]}),
            [ChunkRecord("solution", 0, bullet, vector), ChunkRecord(EXCHANGE, 0, bullet, vector)],
        )
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", store.url)
    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "home"))
    # No recall server at this port: the searches run in this process unless a test starts one.
    monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(free_port()))
    return store


def _search_json(capsys, *args: str) -> dict:
    assert main(["search", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_search_json_prints_the_recall_result(remembered, capsys):
    doc = _search_json(capsys, "database is locked when two processes write", "--limit", "1")
    result = SearchResult.model_validate(doc)
    assert result.query == "database is locked when two processes write"
    assert [r.session_id for r in result.results] == ["sqlite"]
    assert result.results[0].text == BULLETS["sqlite"]
    assert isinstance(doc["results"][0]["score"], float) and doc["results"][0]["score"] > 0
    # A session card's facts: its dates, branch and files (none changed in this one).
    assert doc["results"][0]["started_at"] == "2026-10-31T23:00:00Z"
    assert doc["results"][0]["date"] == "2026-11-01T00:00:00Z"
    assert doc["results"][0]["git_branch"] == "main" and doc["results"][0]["files"] == []


def test_search_json_equals_what_the_mcp_tool_returns(remembered, capsys):
    query = "margin below closed details elements"
    from_cli = _search_json(capsys, query, "--limit", "2")

    async def go():
        async with Client(build_server(Served.of(remembered, local_embedder()))) as client:
            return await client.call_tool("search_chunks", {"query": query, "limit": 2})

    from_mcp = asyncio.run(go())
    assert not from_mcp.is_error
    assert from_cli == from_mcp.structured_content
    assert from_cli["results"][0]["session_id"] == "css"


def test_search_filters_and_text_output(remembered, capsys):
    assert _search_json(capsys, "stylesheet", "--project", "nowhere")["results"] == []
    assert main(["search", "stylesheet margin", "--domain", "technical"]) == 0
    out = capsys.readouterr().out
    # A card per session: where and when, with the relevance printed with two decimals (the
    # model's, core/recall/relevance.py), then its summary, lines, files and what matched.
    card = out.split("\n\n")[0].splitlines()
    assert re.fullmatch(r"1\. alpha · main · 2026-10-31 to 2026-11-01 · relevance 0\.\d\d", card[0])
    assert card[1:] == [
        "   summary of css",
        f"   - {BULLETS['css']}",
        "   files: styles/site.css, styles/print.css, a.css, b.css (+1 more)",
        f"   matched (solution): {BULLETS['css']}",
        f"   matched (exchange): {BULLETS['css']}",
        "   session css",
    ]


def test_search_by_agent_here_and_through_a_running_server(remembered, capsys, monkeypatch):
    embedder = local_embedder()
    bullet = "Raised SQLite busy_timeout in the Go sync daemon so two writers stop failing"
    [vector] = embedder.embed_documents([bullet])
    remembered.memories.replace_memory(
        memory_record("codex-sqlite", agent="codex", embedding_model=embedder.model_name),
        [ChunkRecord("solution", 0, bullet, vector), ChunkRecord(EXCHANGE, 0, bullet, vector)],
    )
    question = "SQLite busy_timeout two writers"
    every = _search_json(capsys, question, "--limit", "10")["results"]
    agents = {r["session_id"]: r["agent"] for r in every}
    assert agents["codex-sqlite"] == "codex" and agents["sqlite"] == "claude-code"
    assert set(agents.values()) == {"claude-code", "codex"}
    codex = _search_json(capsys, question, "--limit", "10", "--agent", "codex")
    assert {(r["session_id"], r["agent"]) for r in codex["results"]} == {("codex-sqlite", "codex")}
    claude = _search_json(capsys, question, "--limit", "10", "--agent", "claude-code")
    assert "sqlite" in {r["session_id"] for r in claude["results"]}
    assert {r["agent"] for r in claude["results"]} == {"claude-code"}
    # The card names an agent other than Claude Code beside the project.
    assert main(["search", question, "--agent", "codex"]) == 0
    assert capsys.readouterr().out.startswith("1. alpha · Codex · main · ")
    assert main(["search", question, "--agent", "claude-code"]) == 0
    assert capsys.readouterr().out.startswith("1. alpha · main · ")
    app = http_app(build_server(Served.of(remembered, embedder)), "127.0.0.1")
    with serve_http(app, port := free_port()):
        monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(port))
        # The process cannot reach the database: only the server can have answered.
        monkeypatch.setenv("LIBRARIAN_DATABASE_URL", "postgresql://127.0.0.1:1/nowhere")
        assert _search_json(capsys, question, "--limit", "10", "--agent", "codex") == codex


def test_search_refuses_bad_options_before_touching_the_store(capsys):
    assert main(["search", "x", "--domain", "finance"]) == 2
    assert "--domain must be one of technical, business" in capsys.readouterr().err
    assert main(["search", "x", "--agent", "Codex"]) == 2
    assert (
        "librarian search: --agent: unknown agent 'Codex': one of claude-code, codex, gemini, "
        "opencode, copilot, pi" in capsys.readouterr().err
    )
    assert main(["search", "x", "--limit", "51"]) == 2
    assert "between 1 and 50" in capsys.readouterr().err


def test_a_question_nothing_answers_gets_an_empty_answer_that_says_so(remembered, capsys):
    doc = _search_json(capsys, "How do we rotate the Kubernetes TLS certificates?")
    assert doc["results"] == []
    assert "nothing relevant" in doc["note"]
    assert main(["search", "How do we rotate the Kubernetes TLS certificates?"]) == 0
    assert "nothing relevant" in capsys.readouterr().out


def test_the_threshold_is_a_setting(remembered, capsys, monkeypatch):
    question = "database is locked when two processes write"
    assert _search_json(capsys, question)["results"]
    monkeypatch.setenv("LIBRARIAN_RECALL_THRESHOLD", "0.9999")
    assert _search_json(capsys, question)["results"] == []
    monkeypatch.setenv("LIBRARIAN_RECALL_THRESHOLD", "0")
    assert len(_search_json(capsys, question)["results"]) == 4  # both sessions, two chunks each


def test_the_private_domain_only_with_include_private(remembered, capsys):
    embedder = local_embedder()
    bullet = "Raised SQLite busy_timeout for the family budget spreadsheet sync"
    [vector] = embedder.embed_documents([bullet])
    remembered.memories.replace_memory(
        memory_record("mine", domain="private", embedding_model=embedder.model_name),
        [ChunkRecord("solution", 0, bullet, vector), ChunkRecord(EXCHANGE, 0, bullet, vector)],
    )
    question = "SQLite busy_timeout"
    without = {r["session_id"] for r in _search_json(capsys, question, "--limit", "10")["results"]}
    assert "sqlite" in without and "mine" not in without
    with_private = _search_json(capsys, question, "--limit", "10", "--include-private")
    assert {"sqlite", "mine"} <= {r["session_id"] for r in with_private["results"]}
    assert main(["search", question, "--domain", "private"]) == 2
    assert "--domain private needs --include-private" in capsys.readouterr().err
    only = _search_json(capsys, question, "--domain", "private", "--include-private")
    assert {r["session_id"] for r in only["results"]} == {"mine"}


def test_a_running_recall_server_answers_the_search(remembered, capsys, monkeypatch):
    query = "database is locked when two processes write"
    here = _search_json(capsys, query, "--limit", "2")
    port = free_port()
    app = http_app(build_server(Served.of(remembered, local_embedder())), "127.0.0.1")
    with serve_http(app, port):
        monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(port))
        # The process cannot reach the database: only the server can have answered.
        monkeypatch.setenv("LIBRARIAN_DATABASE_URL", "postgresql://127.0.0.1:1/nowhere")
        assert _search_json(capsys, query, "--limit", "2") == here
        assert main(["search", query, "--limit", "2"]) == 0
        assert capsys.readouterr().out.startswith("1. alpha · main · ")
        # What /recall cannot answer as the process would runs here (and fails here, now).
        assert main(["search", query, "--limit", "20"]) == 1
        assert "cannot reach LIBRARIAN_DATABASE_URL" in capsys.readouterr().err


def test_a_server_that_refuses_is_said_and_the_search_runs_here(remembered, capsys, monkeypatch):
    port = free_port()
    verifier = TokenFileVerifier(shared_token="right-token")
    server = build_server(Served.of(remembered, local_embedder()), verifier=verifier)
    app = http_app(server, "127.0.0.1")
    with serve_http(app, port):
        monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(port))
        monkeypatch.setenv("LIBRARIAN_MCP_TOKEN", "wrong-token")
        assert main(["search", "stylesheet margin", "--json"]) == 0
    captured = capsys.readouterr()
    assert "the recall server did not answer (HTTP 401); searching here" in captured.err
    assert json.loads(captured.out)["results"][0]["session_id"] == "css"
