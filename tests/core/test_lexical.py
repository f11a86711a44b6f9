"""The in-memory BM25 postings against BM25 computed in SQL from the same stored statistics."""

from pathlib import Path

import numpy as np
import psycopg
import pytest

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.recall import lexical, postings_file
from librarian_dagster.core.recall.lexical import _MAX_SEGMENTS, BM25_B, BM25_K1, LexicalIndex
from librarian_dagster.core.recall.postings_file import PackedPostings
from librarian_dagster.core.recall.search import Search
from librarian_dagster.core.recall.terms import _QUERY_TERMS
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.queries import SearchFilters
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


class _StaleAfterFirst(LexicalIndex):
    """An index that catches up once, then never again."""

    def refresh(self, conn, generation):
        if self.segments == 0:
            super().refresh(conn, generation)


def test_a_session_written_private_after_the_facts_were_read_is_still_never_shown(store):
    _write(store, "lock", TEXTS["lock"])
    search = Search(store.database, lexical=_StaleAfterFirst())
    assert search.find("sqlite lock", _unit(1, 1), MODEL)
    # As if the write below landed between a search's refresh and its vector queries: the
    # in-memory facts do not know the new session is private.
    _write_private(store, "diary", "sqlite lock busy timeout", _unit(1, 1))
    hits = search.find("sqlite lock busy timeout", _unit(1, 1), MODEL, mode="vector")
    assert hits and "diary" not in {h.session_id for h in hits}


def test_a_new_process_maps_the_kept_postings_and_catches_up_with_the_store(store, tmp_path):
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    loaded = LexicalIndex(tmp_path)
    _index_scores(store, loaded, "lock")  # a full load, then kept, and searched mapped
    (kept,) = tmp_path.glob("*.postings")
    assert isinstance(loaded._segments[0].postings, PackedPostings)
    _assert_same(_index_scores(store, loaded, "sqlite lock"), _sql_scores(store, "sqlite lock"))
    written = kept.stat().st_mtime_ns
    mapped = LexicalIndex(tmp_path)
    for question in QUESTIONS:
        _assert_same(_index_scores(store, mapped, question), _sql_scores(store, question))
    assert isinstance(mapped._segments[0].postings, PackedPostings)
    assert kept.stat().st_mtime_ns == written  # read, not written again
    # What the store gained and lost since the file: caught up from the store.
    _write(store, "lock", ["sqlite lock rewritten", "busy timeout"])
    _write(store, "late", ["a late lock story about ingress"])
    store.memories.delete_memory("flaky")
    later = LexicalIndex(tmp_path)
    for question in [*QUESTIONS, "late story"]:
        _assert_same(_index_scores(store, later, question), _sql_scores(store, question))
    # A reader merges nothing (its heap would hold what the map held): what it loaded is
    # kept as a segment file beside the base, which stays as it was.
    assert later.segments == 2 and kept.stat().st_mtime_ns == written
    assert all(isinstance(s.postings, PackedPostings) for s in later._segments)
    assert len(list(tmp_path.glob("*.postings"))) == 2
    # The writer (the `memory` stage after its run): far over a tenth of the base's chunks
    # beside it, so all merged into the base, kept again, and the segment file deleted.
    with psycopg.connect(store.url, autocommit=True) as conn:
        later.keep(conn)
    assert later.segments == 1 and kept.stat().st_mtime_ns != written
    assert list(tmp_path.glob("*.postings")) == [kept]
    again = LexicalIndex(tmp_path)
    _assert_same(_index_scores(store, again, "late story"), _sql_scores(store, "late story"))
    assert isinstance(again._segments[0].postings, PackedPostings)


def _refuse(monkeypatch, name: str, what: str) -> None:
    """Any call of lexical's `name` fails the test, saying `what` was done."""

    def refused(*_args, **_kwargs):
        raise AssertionError(what)

    monkeypatch.setattr(lexical, name, refused)


def _loads_nothing(monkeypatch) -> None:
    _refuse(monkeypatch, "_load_segment", "postings loaded from the store")


def test_each_write_kept_by_the_writer_is_mapped_by_a_new_reader_and_by_a_running_one(
    store, tmp_path, monkeypatch
):
    writer = LexicalIndex(tmp_path)
    running = LexicalIndex(tmp_path)
    _index_scores(store, running, "lock")  # an empty store: nothing kept yet
    for n in range(100):  # a first run: the base
        _write(store, f"filler-{n}", [f"filler {n} about nothing much"])
    with psycopg.connect(store.url, autocommit=True) as conn:
        writer.keep(conn)
    for n, (session_id, texts) in enumerate(TEXTS.items(), start=1):
        _write(store, session_id, texts)
        with psycopg.connect(store.url, autocommit=True) as conn:
            writer.keep(conn)
        assert len(list(tmp_path.glob("*.postings"))) == 1 + n  # the base, then a segment each
    with monkeypatch.context() as patched:
        _loads_nothing(patched)
        fresh = LexicalIndex(tmp_path)
        for question in QUESTIONS:
            _assert_same(_index_scores(store, fresh, question), _sql_scores(store, question))
            _assert_same(_index_scores(store, running, question), _sql_scores(store, question))
        for index in (fresh, running):
            assert all(s.file is not None for s in index._segments)
    # Many small runs: the segment files beside the base merged into one as they pile up,
    # the base rewritten only once they hold a tenth of its chunks.
    base = postings_file.base_file(tmp_path, writer._store or "")
    for n in range(40):
        _write(store, f"small-{n}", [f"note {n} about the lock"])
        with psycopg.connect(store.url, autocommit=True) as conn:
            writer.keep(conn)
        assert writer.segments <= _MAX_SEGMENTS
        assert len(list(tmp_path.glob("*.postings"))) == writer.segments
    assert base.exists()
    with monkeypatch.context() as patched:
        _loads_nothing(patched)
        for question in [*QUESTIONS, "note 7"]:
            _assert_same(_index_scores(store, fresh, question), _sql_scores(store, question))
            _assert_same(
                _index_scores(store, LexicalIndex(tmp_path), question), _sql_scores(store, question)
            )


def _reads_no_ids(monkeypatch) -> None:
    _refuse(monkeypatch, "_ids", "every live chunk id read from the store")


def test_a_reader_of_files_the_writer_brought_up_to_the_store_reads_no_ids(
    store, tmp_path, monkeypatch
):
    writer = LexicalIndex(tmp_path)
    for n in range(100):  # a base that a session's chunks do not make rewritten
        _write(store, f"filler-{n}", [f"filler {n} about nothing much"])
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    with psycopg.connect(store.url, autocommit=True) as conn:
        writer.keep(conn)
    # A session written again (its old chunks gone, still in the base's file), and kept.
    _write(store, "lock", ["sqlite lock rewritten", "busy timeout"])
    with psycopg.connect(store.url, autocommit=True) as conn:
        writer.keep(conn)
    assert len(list(tmp_path.glob("*.postings"))) == 2
    with monkeypatch.context() as patched:
        _reads_no_ids(patched)
        _loads_nothing(patched)
        fresh = LexicalIndex(tmp_path)
        for question in QUESTIONS:  # the old chunks of "lock" not among them
            _assert_same(_index_scores(store, fresh, question), _sql_scores(store, question))
    # The store moved on since the record: the ids are read again, and the forgotten left out.
    store.memories.delete_memory("flaky")
    with monkeypatch.context() as patched, pytest.raises(AssertionError, match="chunk id"):
        _reads_no_ids(patched)
        _index_scores(store, LexicalIndex(tmp_path), "flaky lock test")
    later = LexicalIndex(tmp_path)
    for question in QUESTIONS:
        _assert_same(_index_scores(store, later, question), _sql_scores(store, question))
    # Kept again: the forgotten chunks among the record's gone ones, read from it alone.
    with psycopg.connect(store.url, autocommit=True) as conn:
        writer.keep(conn)
    with monkeypatch.context() as patched:
        _reads_no_ids(patched)
        fresh = LexicalIndex(tmp_path)
        for question in QUESTIONS:
            _assert_same(_index_scores(store, fresh, question), _sql_scores(store, question))
    # A file that is not what the record says: the ids read again.
    base = postings_file.base_file(tmp_path, writer._store or "")
    base.write_bytes(base.read_bytes() + b"\0" * 64)
    with monkeypatch.context() as patched, pytest.raises(AssertionError, match="chunk id"):
        _reads_no_ids(patched)
        _index_scores(store, LexicalIndex(tmp_path), "flaky lock test")


def test_files_that_hold_the_same_chunks_count_them_once(store, tmp_path):
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    _index_scores(store, LexicalIndex(tmp_path), "lock")  # the base
    (kept,) = tmp_path.glob("*.postings")
    # Two processes kept what neither saw the other keep: the same chunks in two files.
    copy = kept.with_name(kept.name.replace(".postings", ".copy.postings"))
    copy.write_bytes(kept.read_bytes())
    index = LexicalIndex(tmp_path)
    for question in QUESTIONS:
        _assert_same(_index_scores(store, index, question), _sql_scores(store, question))
    assert index.segments == 1  # the copy's rows all held by the base: dropped
    with psycopg.connect(store.url, autocommit=True) as conn:
        index.keep(conn)
    assert list(tmp_path.glob("*.postings")) == [kept]  # and its file deleted by the writer


def test_a_reader_writes_nothing_while_a_writer_holds_the_folder(store, tmp_path):
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    reader = LexicalIndex(tmp_path)
    _index_scores(store, reader, "lock")
    (kept,) = tmp_path.glob("*.postings")
    _write(store, "late", ["a late lock story about ingress"])
    held = postings_file.lock(tmp_path, reader._store or "", wait=True)
    assert held is not None
    with held:
        for question in [*QUESTIONS, "late story"]:
            _assert_same(_index_scores(store, reader, question), _sql_scores(store, question))
        assert list(tmp_path.glob("*.postings")) == [kept]
        assert reader._segments[-1].file is None  # held in memory meanwhile
    _write(store, "later", ["later still"])
    _index_scores(store, reader, "later")  # the folder free again: kept
    assert all(s.file is not None for s in reader._segments)
    assert len(list(tmp_path.glob("*.postings"))) == 3  # the base, what it held, the new


def test_a_file_of_another_store_or_cut_short_is_not_read(store, tmp_path):
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    _index_scores(store, LexicalIndex(tmp_path), "lock")
    (kept,) = tmp_path.glob("*.postings")
    whole = kept.read_bytes()
    postings_file.write(
        kept, "another-store", {n: np.zeros(0, np.int32) for n in postings_file.ROW_ARRAYS},
        PackedPostings.of({}), [], [],
    )  # fmt: skip
    for damaged in (kept.read_bytes(), whole[: len(whole) // 2]):
        kept.write_bytes(damaged)
        index = LexicalIndex(tmp_path)
        for question in QUESTIONS:
            _assert_same(_index_scores(store, index, question), _sql_scores(store, question))
        assert kept.read_bytes() != damaged  # loaded from the store, and kept anew
    assert postings_file.read(kept, "another-store") is None


def test_packed_postings_answer_as_the_dict_they_were_packed_from():
    postings = {
        "lock": (np.array([0, 3, 7], np.int32), np.array([1, 2, 1], np.float32)),
        "zébra": (np.array([5], np.int32), np.array([4], np.float32)),
        "a": (np.array([1, 2], np.int32), np.array([1, 1], np.float32)),
    }
    packed = PackedPostings.of(postings)
    assert len(packed) == 3 and sorted(packed) == sorted(postings)
    for lexeme, (rows, tf) in postings.items():
        got = packed[lexeme]
        assert got[0].tolist() == rows.tolist() and got[1].tolist() == tf.tolist()
    assert packed.get("lockx") is None and packed.get("") is None and packed.get("zz") is None
    assert {k: v[0].tolist() for k, v in packed.items()} == {
        k: v[0].tolist() for k, v in postings.items()
    }


def test_postings_read_from_a_file_stay_out_of_the_readers_resident_memory(tmp_path):
    """A recall server asked questions over a million chunks came to hold every posting page it
    had touched through a map (315 MB): postings are read slice by slice, the pages the kernel's."""
    rows = np.arange(4_000_000, dtype=np.int32)
    postings = {"lock": (rows, np.ones(len(rows), np.float32)), "a": (rows[:3], rows[:3] * 1.0)}
    path = tmp_path / "store.postings"
    postings_file.write(
        path, "store", {n: np.zeros(1, np.int32) for n in postings_file.ROW_ARRAYS},
        PackedPostings.of(postings), [], [],
    )  # fmt: skip
    read = postings_file.read(path, "store")
    assert read is not None
    _rows_read, packed, _sessions, _models = read
    got_rows, got_tf = packed["lock"]  # 32 MB of postings, read whole
    assert got_rows.tolist() == rows.tolist() and float(got_tf.sum()) == len(rows)
    assert packed["a"][0].tolist() == [0, 1, 2] and packed.get("zebra") is None
    del got_rows, got_tf
    assert _resident_kb_of(path) < 1024


def _resident_kb_of(path) -> int:
    """Resident kB of this process's maps of `path` (/proc/self/smaps)."""
    resident, in_path = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            in_path = fields[-1] == str(path)
        elif in_path and fields[0] == "Rss:":
            resident += int(fields[1])
    return resident


def test_a_space_measured_once_is_read_by_every_later_search(store, monkeypatch):
    from librarian_dagster.core.recall import calibration

    rng = np.random.default_rng(7)
    for s in range(12):  # enough to measure: 10 sessions, 200 chunks
        vectors = rng.normal(size=(20, 3)) + np.array([s, 0, 0])
        chunks = [ChunkRecord(EXCHANGE, i, f"story {s} part {i}", _unit(*v)) for i, v in
                  enumerate(vectors)]  # fmt: skip
        store.memories.replace_memory(memory_record(f"s{s}"), chunks)
    measured = []
    real = calibration.measure_space
    monkeypatch.setattr(calibration, "measure_space", lambda *a: measured.append(a) or real(*a))
    first = store.search.find("story", _unit(1, 0, 0), MODEL, judged=lambda *a: None)
    assert first and len(measured) == 1
    later = Search(store.database)
    seen = []
    later.find("story", _unit(1, 0, 0), MODEL, judged=lambda _s, _e, space: seen.append(space))
    assert len(measured) == 1  # read from the store, not sampled again
    with psycopg.connect(store.url) as conn:
        row = conn.execute("SELECT chunk_mean, chunks FROM space_calibrations").fetchone()
    assert row is not None and seen[0].chunk_mean == row[0] and row[1] == 240
    # Grown by more than a third since: measured again.
    for s in range(12, 20):
        chunks = [ChunkRecord(EXCHANGE, i, f"story {s} part {i}", _unit(s, i + 1, 1))
                  for i in range(20)]  # fmt: skip
        store.memories.replace_memory(memory_record(f"s{s}"), chunks)
    Search(store.database).find("story", _unit(1, 0, 0), MODEL)
    assert len(measured) == 2


def test_a_pool_keeps_what_the_best_of_each_layer_needs_and_nothing_more(store):
    index = LexicalIndex()
    for session_id, texts in TEXTS.items():
        _write(store, session_id, texts)
    _index_scores(store, index, "lock")
    for n in range(3):  # ties between copies of one text
        _write(store, f"copy-{n}", ["sqlite lock timeout", "lock lock lock", "the lock test"])
        _index_scores(store, index, "lock")
    with psycopg.connect(store.url, autocommit=True) as conn:
        for question in QUESTIONS:
            terms = conn.execute(_QUERY_TERMS, {"text": question, "named": ""}).fetchone()
            asked = list(zip(terms[3] or (), terms[4] or (), strict=True))
            every = index.score(asked, terms[1], MODEL)
            for pool in (1, 2, 3):
                kept = index.score(asked, terms[1], MODEL, pool=pool)
                assert len(kept.ids) <= len(every.ids)
                for layer in (True, False):
                    assert kept.top(layer, pool) == every.top(layer, pool)
                assert kept.best_covered == every.covered.max(initial=0.0)
    long = index.score([("lock", 1.0)], 10.0, MODEL, pool=1)
    assert 0 < len(long.ids) < len(index.score([("lock", 1.0)], 10.0, MODEL).ids)
