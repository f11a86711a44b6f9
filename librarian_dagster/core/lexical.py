"""BM25 over the stored chunks, from an in-memory postings index kept in step with the store.

Why in memory: BM25 in SQL read the lexemes of every chunk that shares a word with the question,
and at 100,000 chunks that cost a second a query (docs/decisions/0017). Postings held in numpy
arrays score the same chunks, with the same formula, in milliseconds. The index mirrors the store
and decides nothing of its own: document frequencies and collection statistics still come from
the store (counted at write time, `lexeme_df` and `chunk_stats`), and the index answers only
which chunks hold a lexeme, how often, and how long each chunk is.

It is made of segments, as a search engine's index is: the chunks there when it was built, then
one small segment per refresh for the chunks written since. Chunk ids are never reused (a
replaced session's chunks get new ids), so a refresh needs only the ids the store holds now: the
ones the index lacks are new and loaded as a segment; the ones the store no longer has were
deleted and are masked out. The store bumps `chunk_stats.generation` on every write, which says
when to look. Segments are merged once they pile up, from memory, without the database.
"""

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import tuple_row

from librarian_dagster.core.chunking import EXCHANGE

# BM25 as Lucene sets it; a chunk's length is its number of distinct lexemes (length(tsvector)).
BM25_K1 = 1.2
BM25_B = 0.75
_MAX_SEGMENTS = 8

_Rows = np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True)
class Segment:
    """Some chunks' postings. Immutable but for `live`, which a refresh replaces, never edits."""

    ids: np.ndarray
    """Chunk id per row, ascending."""
    session_codes: np.ndarray
    sessions: tuple[str, ...]
    """Session id per code."""
    exchange: np.ndarray
    """Whether the row is an exchange window (else a digest bullet)."""
    model_codes: np.ndarray
    models: tuple[str, ...]
    """Embedding model per code: a chunk is searched only in its own model's space."""
    length: np.ndarray
    live: np.ndarray
    """False for rows whose chunk the store has deleted since."""
    postings: dict[str, tuple[np.ndarray, np.ndarray]]
    """lexeme -> (rows holding it, ascending; its term frequency in each)."""

    def code_of(self, names: tuple[str, ...], wanted: Collection[str]) -> np.ndarray:
        return np.array([i for i, name in enumerate(names) if name in wanted], dtype=np.int32)


@dataclass(frozen=True)
class Scored:
    """Every chunk that holds one of the question's lexemes (and passes the filters)."""

    ids: np.ndarray
    sessions: np.ndarray
    exchange: np.ndarray
    score: np.ndarray
    covered: np.ndarray
    """The question's idf mass the chunk holds (relevance's coverage, before dividing)."""

    def top(self, exchange: bool, pool: int) -> list[tuple[int, str]]:
        """The `pool` best (chunk id, session id) of one layer: score descending, then id."""
        rows = np.flatnonzero(self.exchange == exchange)
        if len(rows) > pool:
            # All rows tied with the pool's last score are kept, so ties order by id, as in SQL.
            cut = np.partition(self.score[rows], len(rows) - pool)[len(rows) - pool]
            rows = rows[self.score[rows] >= cut]
        rows = rows[np.lexsort((self.ids[rows], -self.score[rows]))][:pool]
        return [(int(i), str(s)) for i, s in zip(self.ids[rows], self.sessions[rows], strict=True)]

    def best_covered(self, sessions: Collection[str], exchange_only: bool) -> dict[str, float]:
        """Per session, the idf mass held by its best-scoring chunk (of the exchange layer)."""
        rows = np.flatnonzero(np.isin(self.sessions, list(sessions)))
        if exchange_only:
            rows = rows[self.exchange[rows]]
        best: dict[str, float] = {}
        for row in rows[np.lexsort((self.ids[rows], -self.score[rows]))]:
            best.setdefault(str(self.sessions[row]), float(self.covered[row]))
        return best


class LexicalIndex:
    """BM25 postings of every chunk in one store; safe to share between threads."""

    def __init__(self) -> None:
        self._segments: tuple[Segment, ...] = ()
        self._generation: int | None = None
        self._lock = threading.Lock()

    @property
    def generation(self) -> int | None:
        return self._generation

    def refresh(self, conn: psycopg.Connection[Any], generation: int) -> None:
        """Catch up with the store when `generation` (chunk_stats') differs from ours."""
        if generation == self._generation:
            return
        with self._lock:
            if generation == self._generation:  # another thread caught up meanwhile
                return
            # One snapshot: the live ids and the new chunks' postings agree with each other and
            # with the generation recorded, whatever is written meanwhile.
            with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                current = _value(cur.execute("SELECT generation FROM chunk_stats").fetchone(), 0)
                live = _ids(cur.execute(
                    "SELECT string_agg(int8send(id), ''::bytea ORDER BY id) FROM indexed_chunks"
                ).fetchone())  # fmt: skip
                segments = [_without_deleted(s, live) for s in self._segments]
                known = np.concatenate([s.ids for s in segments]) if segments else live[:0]
                new = np.setdiff1d(live, known, assume_unique=True)
                if len(new):
                    segments.append(_load_segment(cur, new))
            segments = [s for s in segments if s.live.any()]
            if len(segments) > _MAX_SEGMENTS:
                segments = [_merge(segments)]
            self._segments = tuple(segments)
            self._generation = current

    def score(
        self,
        terms: Sequence[tuple[str, float]],
        avgdl: float,
        model: str,
        sessions: Collection[str] | None = None,
    ) -> Scored:
        """BM25 of every chunk of `model` (of `sessions`, when given) holding one of `terms`.

        `terms` are the question's distinct lexemes with their idf, as the store counts them.
        """
        parts: list[tuple[np.ndarray, ...]] = []
        for segment in self._segments:
            scores = np.zeros(len(segment.ids))
            covered = np.zeros(len(segment.ids))
            length_norm = BM25_K1 * (1 - BM25_B + BM25_B * segment.length / max(avgdl, 1.0))
            for lexeme, idf in terms:
                posting = segment.postings.get(lexeme)
                if posting is None:
                    continue
                rows, tf = posting
                # Rows are unique within one posting list, so fancy-index += adds each once.
                scores[rows] += idf * tf * (BM25_K1 + 1) / (tf + length_norm[rows])
                covered[rows] += idf
            keep = segment.live & (covered > 0)
            keep &= np.isin(segment.model_codes, segment.code_of(segment.models, {model}))
            if sessions is not None:
                keep &= np.isin(segment.session_codes, segment.code_of(segment.sessions, sessions))
            rows = np.flatnonzero(keep)
            names = np.asarray(segment.sessions, dtype=object)
            parts.append((
                segment.ids[rows], names[segment.session_codes[rows]], segment.exchange[rows],
                scores[rows], covered[rows],
            ))  # fmt: skip
        if not parts:
            empty = np.zeros(0)
            return Scored(empty.astype(np.int64), empty.astype(object), empty.astype(bool),
                          empty, empty)  # fmt: skip
        columns = zip(*parts, strict=True)
        ids, names, exchange, scores, covered = (np.concatenate(c) for c in columns)
        return Scored(ids, names, exchange, scores, covered)


def _value(row: Any, default: Any) -> Any:
    return row[0] if row is not None and row[0] is not None else default


def _ids(row: Any) -> _Rows:
    raw = _value(row, b"")
    return np.frombuffer(raw, dtype=">i8").astype(np.int64)


def _without_deleted(segment: Segment, live: _Rows) -> Segment:
    still = segment.live & np.isin(segment.ids, live, assume_unique=True)
    return segment if np.array_equal(still, segment.live) else replace(segment, live=still)


def _load_segment(cur: psycopg.Cursor[tuple[Any, ...]], ids: _Rows) -> Segment:
    """The postings of these chunks, read from their stored tsvectors.

    PostgreSQL groups the postings by lexeme and packs each list as bytes, which numpy reads as
    they are: tens of thousands of rows, not millions of Python objects.
    """
    id_list = ids.tolist()
    rows = cur.execute(
        "SELECT c.id, c.session_id, c.section = %s, c.embedding_model, length(c.text_search)"
        " FROM indexed_chunks c WHERE c.id = ANY(%s) ORDER BY c.id",
        (EXCHANGE, id_list),
    ).fetchall()
    chunk_ids = np.array([r[0] for r in rows], dtype=np.int64)
    session_names = tuple(dict.fromkeys(r[1] for r in rows))
    session_code = {name: i for i, name in enumerate(session_names)}
    model_names = tuple(dict.fromkeys(r[3] for r in rows))
    model_code = {name: i for i, name in enumerate(model_names)}
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for lexeme, packed_ids, packed_tf in cur.execute(
        """
        SELECT u.lexeme, string_agg(int8send(c.id), ''::bytea ORDER BY c.id),
               string_agg(int2send(LEAST(GREATEST(cardinality(u.positions), 1), 32767)::int2),
                          ''::bytea ORDER BY c.id)
        FROM indexed_chunks c, unnest(c.text_search) u WHERE c.id = ANY(%s) GROUP BY u.lexeme
        """,
        (id_list,),
    ):
        holders = np.frombuffer(packed_ids, dtype=">i8")
        tf = np.frombuffer(packed_tf, dtype=">i2").astype(np.float64)
        postings[lexeme] = (np.searchsorted(chunk_ids, holders), tf)
    return Segment(
        ids=chunk_ids,
        session_codes=np.array([session_code[r[1]] for r in rows], dtype=np.int32),
        sessions=session_names,
        exchange=np.array([r[2] for r in rows], dtype=bool),
        model_codes=np.array([model_code[r[3]] for r in rows], dtype=np.int32),
        models=model_names,
        length=np.array([r[4] for r in rows], dtype=np.float64),
        live=np.ones(len(rows), dtype=bool),
        postings=postings,
    )


def _merge(segments: Sequence[Segment]) -> Segment:
    """One segment of the live rows of many, built in memory."""
    sessions = tuple(dict.fromkeys(name for s in segments for name in s.sessions))
    models = tuple(dict.fromkeys(name for s in segments for name in s.models))
    session_code = {name: i for i, name in enumerate(sessions)}
    model_code = {name: i for i, name in enumerate(models)}
    kept = [np.flatnonzero(s.live) for s in segments]
    # Each segment's live rows, renumbered in the merged order (segments' ids interleave).
    ids = np.concatenate([s.ids[k] for s, k in zip(segments, kept, strict=True)])
    order = np.argsort(ids, kind="stable")
    place = np.empty(len(ids), dtype=np.int64)
    place[order] = np.arange(len(ids))
    new_row: list[np.ndarray] = []
    offset = 0
    for s, k in zip(segments, kept, strict=True):
        mapping = np.full(len(s.ids), -1, dtype=np.int64)
        mapping[k] = place[offset : offset + len(k)]
        new_row.append(mapping)
        offset += len(k)

    def gather(field: str, recode: dict[str, int] | None = None, names: str = "") -> np.ndarray:
        pieces = []
        for s, k in zip(segments, kept, strict=True):
            values = getattr(s, field)[k]
            if recode is not None:
                table = np.array([recode[n] for n in getattr(s, names)], dtype=np.int32)
                values = table[values] if len(table) else values
            pieces.append(values)
        return np.concatenate(pieces)[order]

    postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for s, mapping in zip(segments, new_row, strict=True):
        for lexeme, (rows, tf) in s.postings.items():
            moved = mapping[rows]
            alive = moved >= 0
            if not alive.any():
                continue
            have = postings.get(lexeme)
            pair = (moved[alive], tf[alive])
            postings[lexeme] = (
                pair if have is None else
                (np.concatenate([have[0], pair[0]]), np.concatenate([have[1], pair[1]]))
            )  # fmt: skip
    for lexeme, (rows, tf) in postings.items():
        by_row = np.argsort(rows, kind="stable")
        postings[lexeme] = (rows[by_row], tf[by_row])
    return Segment(
        ids=ids[order],
        session_codes=gather("session_codes", session_code, "sessions"),
        sessions=sessions,
        exchange=gather("exchange"),
        model_codes=gather("model_codes", model_code, "models"),
        models=models,
        length=gather("length"),
        live=np.ones(len(ids), dtype=bool),
        postings=postings,
    )
