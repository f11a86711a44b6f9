"""The naive reference index: what it reads of a session, BM25, the fused ranking with the real
local model, and where its texts come from (staged sessions, else a real store's exchanges)."""

import math
from datetime import UTC, datetime

import pytest
from pydantic import TypeAdapter

from librarian_dagster.core.capture.session import Session, Turn
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.recall.evaluation import GoldenQuestion, evaluate
from librarian_dagster.core.recall.reference import (
    Bm25,
    NaiveIndex,
    gather_documents,
    session_texts,
    tokens,
)
from librarian_dagster.core.store.memories import ChunkRecord
from tests.core.test_store import memory_record

T = datetime(2026, 11, 1, tzinfo=UTC)


def _session(session_id: str, *dialogue: tuple[str, str]) -> Session:
    """A session of (kind, text) turns: `prompt` typed by the user, `text` the agent's replies."""
    turns = [Turn("user" if k == "prompt" else "assistant", k, text, T) for k, text in dialogue]
    return Session(session_id=session_id, project="app", turns=turns)


def test_session_texts_are_the_typed_prompts_and_the_last_reply_to_each():
    session = _session(
        "s",
        ("prompt", "/clear"),  # steers the tool, asks nothing
        ("prompt", "Why does the upload fail with 413?"),
        ("text", "Let me look at the proxy."),
        ("tool_result", "client_max_body_size 1m;"),
        ("text", "The proxy capped bodies at 1 MB; raised to 50 MB."),
        ("prompt", "Why does the upload fail with 413?"),  # asked again: kept once
        ("text", "Still the proxy."),
    )
    assert session_texts(session) == [
        "Why does the upload fail with 413?",
        "The proxy capped bodies at 1 MB; raised to 50 MB.",
        "Still the proxy.",
    ]


def test_bm25_matches_the_okapi_formula_on_a_tiny_collection():
    documents = [tokens("SQLite is locked, locked again"), tokens("CSS margin"), tokens("css")]
    scores = Bm25(documents).scores(tokens("locked css css"))  # a repeated query word counts once
    mean_length = (5 + 2 + 1) / 3

    def term(df: int, tf: int, length: int) -> float:
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / mean_length))

    assert scores[0] == pytest.approx(term(1, 2, 5))
    assert scores[1] == pytest.approx(term(2, 1, 2))
    assert scores[2] == pytest.approx(term(2, 1, 1))
    assert scores[2] > scores[1]  # the same word in a shorter document
    assert Bm25(documents).scores(["kubernetes"]).tolist() == [0.0, 0.0, 0.0]


SESSIONS = {
    "sqlite": _session(
        "sqlite",
        ("prompt", "The SQLite database is locked whenever two worker processes write at once"),
        ("text", "Switched the journal to WAL mode and added a busy timeout."),
    ),
    "css": _session(
        "css",
        ("prompt", "Closed details elements have no spacing below them in the stylesheet"),
        ("text", "Added margin-bottom to details:not([open])."),
    ),
    "deploy": _session(
        "deploy",
        ("prompt", "Set up the staging deploy on the VPS with Docker compose"),
        ("text", "Deployed; the compose file pins the images."),
    ),
}


@pytest.fixture(scope="module")
def naive() -> NaiveIndex:
    return NaiveIndex({s: session_texts(v) for s, v in SESSIONS.items()}, local_embedder())


def test_the_naive_index_ranks_the_session_whose_prompt_matches_first(naive):
    assert naive.chunks == 6
    assert naive.ask("database locked by concurrent writers")[0] == "sqlite"
    assert naive.ask("no gap under the collapsed disclosure widgets")[0] == "css"
    assert naive.ask("how did we ship to the staging server")[0] == "deploy"


def test_the_naive_index_always_answers_with_every_session(naive):
    # Nothing here is about Kubernetes, and no chunk shares a word with the question: the
    # vector list still ranks every chunk, and there is no threshold to say "nothing".
    answer = naive.ask("Kubernetes ingress")
    assert sorted(answer) == ["css", "deploy", "sqlite"]
    report = evaluate(
        [GoldenQuestion("Kubernetes ingress", frozenset()), GoldenQuestion("WAL", frozenset())],
        naive.ask,
        abstains=False,
    )
    assert report.overall.abstain_rate is None


def test_an_empty_naive_index_answers_nothing():
    assert NaiveIndex({}, local_embedder()).ask("anything") == []


def test_documents_come_from_staged_sessions_else_from_the_stores_exchange_chunks(store, tmp_path):
    for session_id in ("staged", "unstaged", "corrupt"):
        chunks = [
            ChunkRecord("summary", 0, f"summary of {session_id}", [1.0, 0.0]),
            ChunkRecord(EXCHANGE, 1, f"second window of {session_id}", [1.0, 0.0]),
            ChunkRecord(EXCHANGE, 0, f"first window of {session_id}", [1.0, 0.0]),
        ]
        store.memories.replace_memory(memory_record(session_id), chunks)
    staged = _session("staged", ("prompt", "staged prompt"), ("text", "staged reply"))
    (tmp_path / "staged.json").write_bytes(TypeAdapter(Session).dump_json(staged))
    (tmp_path / "corrupt.json").write_text("{not a session", encoding="utf-8")

    documents = gather_documents(
        store.memories, ["staged", "unstaged", "corrupt"], lambda s: tmp_path / f"{s}.json"
    )
    assert (documents.staged, documents.from_chunks) == (1, 2)
    assert documents.texts == {
        "staged": ["staged prompt", "staged reply"],
        # Exchange windows only (no digest bullet), in their order.
        "unstaged": ["first window of unstaged", "second window of unstaged"],
        "corrupt": ["first window of corrupt", "second window of corrupt"],
    }
