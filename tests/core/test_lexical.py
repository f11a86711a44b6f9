"""The in-memory BM25 postings against BM25 computed in SQL from the same stored statistics."""

import psycopg
import pytest

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.recall.lexical import _MAX_SEGMENTS, BM25_B, BM25_K1, LexicalIndex
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.search import _QUERY_TERMS
from tests.core.test_store import MODEL, _unit, memory_record

# BM25 straight from each chunk's tsvector: the formula the index must reproduce, in SQL.
_SQL_BM25 = f"""
    WITH q AS (SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(text)s)) u),
    corpus AS (SELECT GREATEST(chunks, 1)::float8 AS n,
                      GREATEST(total_length::float8 / GREATEST(chunks, 1), 1) AS avgdl
               FROM chunk_stats),
    idf AS (SELECT q.lexeme, ln(1 + (corpus.n - COALESCE(d.df, 0) + 0.5)
                                   / (COALESCE(d.df, 0) + 0.5)) AS idf
            FROM q CROSS JOIN corpus LEFT JOIN lexeme_df d USING (lexeme))
    SELECT c.id,
           SUM(i.idf * GREATEST(cardinality(u.positions), 1) * {BM25_K1 + 1}
               / (GREATEST(cardinality(u.positions), 1) + {BM25_K1}
                  * (1 - {BM25_B} + {BM25_B} * length(c.text_search) / corpus.avgdl))) AS score,
           SUM(i.idf) AS covered
    FROM indexed_chunks c CROSS JOIN corpus, unnest(c.text_search) u JOIN idf i USING (lexeme)
    WHERE c.embedding_model = %(model)s
    GROUP BY c.id
"""

TEXTS = {
    "lock": [
        "sqlite database is locked when two writers commit at once",
        "retry the sqlite lock with a busy timeout of five seconds, then lock again",
    ],
    "ingress": ["kubernetes ingress returns 502 after the deploy", "the ingress annotation fix"],
    "flaky": ["a flaky test in the scheduler: the lock file was shared between runs"],
}


def _write(store, session_id: str, texts: list[str], model: str = MODEL) -> None:
    chunks = [ChunkRecord(EXCHANGE, i, t, _unit(1, i + 1)) for i, t in enumerate(texts)]
    chunks.append(ChunkRecord("solution", 0, f"bullet of {session_id}: {texts[0]}", _unit(2, 1)))
    store.memories.replace_memory(memory_record(session_id, embedding_model=model), chunks)


def _index_scores(store, index: LexicalIndex, text: str, sessions=None) -> dict[int, tuple]:
    with psycopg.connect(store.url, autocommit=True) as conn:
        terms = conn.execute(_QUERY_TERMS, {"text": text, "named": ""}).fetchone()
        generation, avgdl, _chunks, lexemes, idfs, _unseen = terms
        index.refresh(conn, generation)
    scored = index.score(list(zip(lexemes or (), idfs or (), strict=True)), avgdl, MODEL, sessions)
    return {
        int(i): (float(s), float(c))
        for i, s, c in zip(scored.ids, scored.score, scored.covered, strict=True)
    }


def _sql_scores(store, text: str) -> dict[int, tuple]:
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(_SQL_BM25, {"text": text, "model": MODEL}).fetchall()
    return {i: (s, c) for i, s, c in rows}


def _assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for chunk_id, (score, covered) in want.items():
        assert got[chunk_id] == pytest.approx((score, covered), rel=1e-9)


QUESTIONS = ["sqlite lock timeout", "ingress 502", "flaky lock test", "nothing matches zebra"]


def test_index_scores_every_chunk_as_sql_bm25_does(store):
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    _write(store, "other-model", ["sqlite lock elsewhere"], model="another-model")
    index = LexicalIndex()
    for question in QUESTIONS:
        _assert_same(_index_scores(store, index, question), _sql_scores(store, question))
    assert _index_scores(store, index, "sqlite lock", {"flaky"}).keys() == {
        i for i in _sql_scores(store, "sqlite lock") if i in _chunk_ids(store, "flaky")
    }


def _chunk_ids(store, session_id: str) -> set[int]:
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(
            "SELECT id FROM indexed_chunks WHERE session_id = %s", (session_id,)
        ).fetchall()
    return {r[0] for r in rows}


def test_index_follows_replacements_deletions_and_merges_its_segments(store):
    index = LexicalIndex()
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    _index_scores(store, index, "lock")
    # Many small writes, each seen by a search: one segment each, merged once they pile up.
    for n in range(_MAX_SEGMENTS + 3):
        _write(store, "lock", [f"sqlite lock rewritten {n} times", "busy timeout"])
        _write(store, f"new-{n}", [f"another lock story number {n}"])
        for question in QUESTIONS:
            _assert_same(_index_scores(store, index, question), _sql_scores(store, question))
        assert index.segments <= _MAX_SEGMENTS
    store.memories.delete_memory("ingress")
    assert _index_scores(store, index, "ingress 502") == {}
    _assert_same(_index_scores(store, index, "lock"), _sql_scores(store, "lock"))


def test_search_sees_a_memory_written_after_the_store_was_first_searched(store):
    _write(store, "lock", TEXTS["lock"])
    assert {h.session_id for h in store.search.find("kubernetes ingress", _unit(0, 1), MODEL)} == {
        "lock"
    }
    _write(store, "ingress", TEXTS["ingress"])
    hits = store.search.find("kubernetes ingress 502", _unit(0, 1), MODEL, mode="text")
    assert hits[0].session_id == "ingress"
    filtered = store.search.find("lock", _unit(0, 1), MODEL, SearchFilters(project="nowhere"))
    assert filtered == []


def test_search_survives_its_kept_connection_being_dropped(store):
    _write(store, "lock", TEXTS["lock"])
    assert store.search.find("sqlite lock", _unit(1, 1), MODEL)
    with psycopg.connect(store.url, autocommit=True) as conn:
        # What a server restart does to every kept connection.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    hits = store.search.find("sqlite lock", _unit(1, 1), MODEL)
    assert hits[0].session_id == "lock"
    store.close()


def _write_private(store, session_id: str, text: str, vector: list[float]) -> None:
    store.memories.replace_memory(
        memory_record(session_id, domain="private"),
        [ChunkRecord(EXCHANGE, 0, text, vector), ChunkRecord("solution", 0, text, vector)],
    )


def test_private_sessions_are_left_out_of_every_list_unless_asked_for(store):
    _write(store, "lock", TEXTS["lock"])
    # The private session is the best match by words and by vector alike.
    _write_private(store, "diary", "sqlite lock busy timeout sqlite lock", _unit(1, 1))
    for mode in ("hybrid", "vector", "text"):
        hidden = store.search.find("sqlite lock busy timeout", _unit(1, 1), MODEL, mode=mode)
        assert hidden and {h.session_id for h in hidden} == {"lock"}, mode
        shown = store.search.find(
            "sqlite lock busy timeout", _unit(1, 1), MODEL,
            SearchFilters(include_private=True), mode=mode,
        )  # fmt: skip
        assert shown[0].session_id == "diary", mode
    # With a filter of the caller's own (the SQL path), still none.
    filtered = store.search.find("sqlite lock", _unit(1, 1), MODEL, SearchFilters(project="alpha"))
    assert {h.session_id for h in filtered} == {"lock"}


def test_a_session_written_private_after_the_facts_were_read_is_still_never_shown(
    store, monkeypatch
):
    _write(store, "lock", TEXTS["lock"])
    assert store.search.find("sqlite lock", _unit(1, 1), MODEL)
    # As if the write below landed between a search's refresh and its vector queries: the
    # in-memory facts do not know the new session is private.
    monkeypatch.setattr(store.search._lexical, "refresh", lambda conn, generation: None)
    _write_private(store, "diary", "sqlite lock busy timeout", _unit(1, 1))
    hits = store.search.find("sqlite lock busy timeout", _unit(1, 1), MODEL, mode="vector")
    assert hits and "diary" not in {h.session_id for h in hits}
