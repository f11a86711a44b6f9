"""Hybrid search over the memories: which sessions best answer a question, and how sure it is.

Cosine distance over the HNSW indexes and BM25 over PostgreSQL's lexemes, fused by reciprocal
rank (core/store/ranking.py). Vectors find paraphrases; BM25 finds the exact identifiers
(function names, error strings) that developers type and that a small embedding model blurs. BM25
is scored from postings held in memory (core/recall/lexical.py), from the statistics the writes
keep (core/store/memories.py); each session found is judged relevant or not against how alike
unrelated chunks are in this store (core/recall/relevance.py).
"""

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import psycopg
from psycopg.rows import DictRow, class_row

from librarian_dagster.core.capture.files import project_of
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN
from librarian_dagster.core.recall.lexical import LexicalIndex
from librarian_dagster.core.recall.relevance import (
    CALIBRATION_SAMPLE,
    DEFAULT_CALIBRATION,
    Evidence,
    SpaceCalibration,
    load_word_lists,
    named_terms,
    relevance,
)
from librarian_dagster.core.store.pool import CANDIDATES, Database
from librarian_dagster.core.store.queries import (
    NO_FILTERS,
    SearchFilters,
    filter_sql,
    ours,
    vector_literal,
)
from librarian_dagster.core.store.ranking import (
    DEFAULT_BOOSTS,
    Boosts,
    RecallContext,
    fuse_sessions,
    highlights,
    is_feature_branch,
    sessions_of,
    shown_chunks,
)
from librarian_dagster.core.store.rows import ChunkResult, EmbeddingSpace

SearchMode = Literal["hybrid", "vector", "text"]
"""Both ranked lists fused (the product), or one alone (to measure what each brings)."""

Layers = Literal["both", "bullets", "exchanges"]
"""Which layers a search reads: both (the product), or one alone (to measure what each brings:
`librarian eval --layer`). The sessions' mean vectors are the exchange layer's."""

# Threads that run a search's three vector lists, each on a connection of its own, while the
# search's own thread scores BM25: three index scans at once on three server processes, beside
# the numpy work, not one after the other. Two searches' lists at once.
_SIDE_READS = ThreadPoolExecutor(max_workers=6, thread_name_prefix="librarian-read")

# A question's distinct lexemes with their BM25 idf, those of its names that no chunk holds
# (core/recall/relevance.py), the collection's mean chunk length and the generation the postings
# must be at: one row, from the statistics kept at write time.
_QUERY_TERMS = """
    WITH query_lexemes AS (
        SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(text)s)) u
    ),
    named_lexemes AS (
        SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(named)s)) u
    ),
    corpus AS (
        SELECT generation, GREATEST(chunks, 1)::float8 AS n,
               GREATEST(total_length::float8 / GREATEST(chunks, 1), 1) AS avgdl
        FROM chunk_stats
    )
    SELECT corpus.generation, corpus.avgdl, corpus.n AS chunks,
           array_agg(q.lexeme ORDER BY q.lexeme) FILTER (WHERE q.lexeme IS NOT NULL) AS lexemes,
           array_agg(ln(1 + (corpus.n - COALESCE(d.df, 0) + 0.5) / (COALESCE(d.df, 0) + 0.5))
                     ORDER BY q.lexeme) FILTER (WHERE q.lexeme IS NOT NULL) AS idfs,
           array_agg(q.lexeme) FILTER (WHERE COALESCE(d.df, 0) = 0
                                       AND q.lexeme IN (SELECT lexeme FROM named_lexemes)) AS unseen
    FROM corpus LEFT JOIN query_lexemes q ON true LEFT JOIN lexeme_df d ON d.lexeme = q.lexeme
    GROUP BY corpus.generation, corpus.avgdl, corpus.n
"""


# Whether any of a text's lexemes is in some chunk: is any of a rare word's one-edit variants
# ("gitleaks" for "gitlaeks") a word the store holds?
_ANY_HELD = """
    SELECT EXISTS (
        SELECT 1 FROM unnest(to_tsvector('english', %(text)s)) u
        JOIN lexeme_df d ON d.lexeme = u.lexeme WHERE d.df > 0
    ) AS held
"""


class Search:
    """Hybrid search over the shared pool, with what it keeps in memory between questions: the
    BM25 postings, and each embedding space's calibration.

    No thread holds a connection while it waits for another thread's: a search takes one for
    each step in turn, so searches at once never wait on each other for the pool.
    """

    def __init__(self, database: Database, postings_dir: Path | None = None) -> None:
        """`postings_dir`: where the BM25 postings are kept between processes (None: nowhere,
        each process loads them from the store)."""
        self._db = database
        self._lexical = LexicalIndex(postings_dir)
        # (model, dimension) -> (chunks held when measured, the space's background).
        self._calibrations: dict[tuple[str, int], tuple[int, SpaceCalibration]] = {}

    def find(
        self,
        query_text: str,
        query_embedding: Sequence[float] | Callable[[], Sequence[float]],
        embedding_model: str,
        filters: SearchFilters = NO_FILTERS,
        limit: int = 5,
        max_per_session: int = 2,
        mode: SearchMode = "hybrid",
        boosts: Boosts = DEFAULT_BOOSTS,
        layers: Layers = "both",
        judged: Callable[[str, Evidence, SpaceCalibration], None] | None = None,
        context: RecallContext | None = None,
    ) -> list[ChunkResult]:
        """Chunks of the sessions that best answer a query, best session first.

        Sessions are ranked by reciprocal-rank fusion of four lists: each layer (digest bullets,
        exchanges) searched by vector (HNSW cosine) and by BM25 over PostgreSQL's lexemes; each
        list gives a session one vote, at the rank of its best chunk there, whatever the number
        of chunks a layer holds per session. `mode` keeps the vector or the text lists alone, and
        `layers` one layer, to measure what each brings. Each session's chunks carry its relevance
        (core/recall/relevance.py) as their score; at most `max_per_session` chunks of one session
        are returned, the ones ranked best across the lists, so one long session cannot fill the
        answer.

        The vectors are searched in PostgreSQL, BM25 in the in-memory postings
        (core/recall/lexical.py), which a long-lived search (the recall server's) keeps between
        queries. `query_embedding` may be a callable that waits for the vector
        (core/recall/answer.py embeds while BM25 is scored): it is called only once the vector is
        needed. `judged`, when given, is told each ranked session's relevance evidence, best
        first (the relevance fit, benchmarks/fit_relevance.py, learns from it). `context` (where
        the question comes from) ranks the caller's project and branch first; it filters nothing.
        """
        # The private domain is left out through the in-memory session facts (no join, no list
        # of every other session); the caller's own filters, when any, in SQL.
        where, params = filter_sql(replace(filters, include_private=True))
        with self._db.connection() as conn:

            def store_holds(words: set[str]) -> bool:
                row = conn.execute(_ANY_HELD, {"text": " ".join(words)}).fetchone()
                return bool(row and row["held"])

            named = named_terms(query_text, store_holds)
            terms = conn.execute(_QUERY_TERMS, {"text": query_text, "named": named}).fetchone()
            assert terms is not None  # chunk_stats always holds its one row
            self._lexical.refresh(conn, terms["generation"])
            allowed = None
            if where:  # `where` is our own text (fixed clauses, values as named parameters)
                chosen = ours(f"SELECT m.session_id FROM memories m WHERE TRUE {where}")
                allowed = {r["session_id"] for r in conn.execute(chosen, params)}
        params |= {
            "model": embedding_model,
            "hidden": [] if filters.include_private else self._lexical.private_sessions(),
            "private_ok": filters.include_private,
            "private_domain": PRIVATE_DOMAIN,
        }
        read = {"bullets": layers != "exchanges", "exchanges": layers != "bullets"}
        embedding = query_embedding if callable(query_embedding) else lambda: query_embedding
        # The vector lists run on their side connections (PostgreSQL's processes) while this
        # thread scores BM25 (numpy): at a million chunks each takes some 20 ms, now at once.
        vector_lists = (
            self._vector_lists(embedding, where, params, read) if mode != "text" else None
        )
        idf = dict(zip(terms["lexemes"] or (), terms["idfs"] or (), strict=True))
        scored = self._lexical.score(
            list(idf.items()),
            terms["avgdl"],
            embedding_model,
            allowed,
            filters.include_private,
            pool=CANDIDATES,
        )
        vector = embedding()
        dim = len(vector)
        params["vector"] = vector_literal(vector)

        total_idf = math.fsum(idf.values()) or None
        chunk_lists: list[list[tuple[int, str]]] = []
        ranked: list[tuple[float, Sequence[str]]] = []
        if vector_lists is not None:
            bullets, exchanges, means = (lists.result() for lists in vector_lists)
            whole = [session for _, session in means]
            chunk_lists += [bullets, exchanges]
            ranked += [(1.0, sessions_of(bullets)), (1.0, sessions_of(exchanges)), (1.0, whole)]
        if mode != "vector":
            bm25 = [
                scored.top(False, CANDIDATES) if read["bullets"] else [],
                scored.top(True, CANDIDATES) if read["exchanges"] else [],
            ]
            chunk_lists += bm25
            # BM25 votes as far as the question's own words are in the store: the share of the
            # question's idf mass its best chunk holds. A question in a user's own words, which
            # shares few words with the session that answers it, is then ranked by meaning, not
            # by the chunks that happen to share its filler words (docs/decisions/0021).
            weight = 1.0
            if mode == "hybrid":
                weight = _share(scored.best_covered, total_idf) or 0.0
            ranked += [(weight, sessions_of(bm25[0])), (weight, sessions_of(bm25[1]))]
        fused = fuse_sessions(ranked)
        if not fused:
            return []
        now, half_life = time.time(), max(boosts.half_life_days, 1e-6)
        # A session written after the facts were read gets no boost until the next refresh.
        for session_id, (importance, dated) in self._lexical.session_facts(fused).items():
            age = max(now - dated, 0.0) / 86400
            recency = 1 + boosts.recency * 0.5 ** (age / half_life)
            fused[session_id] *= recency * (1 + boosts.importance * (importance - 3))
        with self._db.connection() as conn:
            relations = _context_relations(conn, context, list(fused)) if context else {}
            for session_id, relation in relations.items():
                fused[session_id] *= (1 + boosts.project) * (
                    1 + boosts.branch if relation == "branch" else 1
                )
            top = sorted(fused, key=lambda s: (-fused[s], s))[:limit]
            shown = shown_chunks(chunk_lists, top, max_per_session)
            sessions = _session_facts(conn, dim, {**params, "top": top})
            texts = {
                r["id"]: r
                for r in conn.execute(
                    "SELECT id, section, position, text FROM indexed_chunks WHERE id = ANY(%s)",
                    ([i for ids in shown.values() for i in ids],),
                )
            }
            calibration = self._calibration(conn, embedding_model, dim, int(terms["chunks"]))
        unseen = _share(math.fsum(idf[lexeme] for lexeme in terms["unseen"] or ()), total_idf)
        results = []
        for session_id in top:
            facts = sessions.get(session_id)
            if facts is None:  # no chunk of this dimension: nothing to judge it by
                continue
            evidence = Evidence(
                exchange_cosine=facts["exchange_cosine"],
                digest_cosine=facts["digest_cosine"],
                session_cosine=facts["session_cosine"],
                unseen=unseen or 0.0,
            )
            score = relevance(evidence, calibration)
            if judged is not None:
                judged(session_id, evidence, calibration)
            lines = highlights(facts, [texts[i] for i in shown[session_id]])
            for chunk_id in shown[session_id]:
                chunk = texts[chunk_id]
                results.append(ChunkResult(
                    text=chunk["text"], score=score, session_id=session_id,
                    section=chunk["section"], position=chunk["position"],
                    project=facts["project"], date=facts["date"], summary=facts["summary"],
                    domain=facts["domain"], tags=facts["tags"], title=facts["title"],
                    git_branch=facts["git_branch"], highlights=lines,
                    started_at=facts["started_at"], files=facts["files"],
                    context=relations.get(session_id),
                ))  # fmt: skip
        return results[:limit]

    def warm_up(self) -> None:
        """Load what search keeps in memory (the BM25 postings, the word lists that tell jargon)
        now, not at the first question.

        A long-lived reader (the recall server) calls it at start; at 100,000 chunks it takes
        a few seconds, which the first question would otherwise wait for.
        """
        load_word_lists()
        with self._db.connection() as conn:
            row = conn.execute("SELECT generation FROM chunk_stats").fetchone()
            self._lexical.refresh(conn, row["generation"] if row else 0)

    def embedding_spaces(self) -> list[EmbeddingSpace]:
        """Which embedding models (and dimensions) the stored chunks were made with."""
        with (
            self._db.connection() as conn,
            conn.cursor(row_factory=class_row(EmbeddingSpace)) as cur,
        ):
            return cur.execute(
                """
                SELECT embedding_model AS model, embedding_dim AS dimension,
                       COUNT(DISTINCT session_id) AS sessions, COUNT(*) AS chunks
                FROM indexed_chunks GROUP BY embedding_model, embedding_dim
                ORDER BY COUNT(*) DESC, embedding_model
                """
            ).fetchall()

    def _calibration(
        self, conn: psycopg.Connection[DictRow], model: str, dim: int, chunks: int
    ) -> SpaceCalibration:
        """How alike unrelated chunks are in this embedding space, in this store (relevance's
        background), measured on a sample of its chunks and kept in `space_calibrations`, so
        every process reads one row; measured again once the store has grown or shrunk by a
        third since."""
        measured = self._calibrations.get((model, dim))
        if measured is not None and _still_fits(measured[0], chunks):
            return measured[1]
        kept = conn.execute(
            "SELECT chunks, chunk_mean, chunk_sd, session_mean, session_sd"
            " FROM space_calibrations WHERE embedding_model = %s AND embedding_dim = %s",
            (model, dim),
        ).fetchone()
        if kept is not None and _still_fits(kept["chunks"], chunks):
            measured = (kept["chunks"], SpaceCalibration(
                kept["chunk_mean"], kept["chunk_sd"], kept["session_mean"], kept["session_sd"]
            ))  # fmt: skip
        else:
            calibration = _measure_space(conn, model, dim)
            if calibration is not None:
                _keep_calibration(conn, model, dim, chunks, calibration)
            measured = (chunks, calibration or DEFAULT_CALIBRATION)
        self._calibrations[(model, dim)] = measured
        return measured[1]

    def _vector_lists(
        self,
        embedding: Callable[[], Sequence[float]],
        where: str,
        params: dict[str, Any],
        read: dict[str, bool],
    ) -> tuple[Future[list[tuple[int, str]]], ...]:
        """By cosine over the HNSW indexes, started in side threads (each on a connection of its
        own, each waiting for the question's vector): the `CANDIDATES` nearest chunks of each
        layer (bullets, exchanges: (chunk id, session id), nearest first) and the nearest
        sessions as a whole (their mean vectors: (0, session id)). A layer not `read` gives
        empty lists."""

        def nearest(table: str, layer: str) -> list[tuple[int, str]]:
            vector = embedding()
            dim = len(vector)
            # Only a filter needs the memories row: without one the plan is the index scan alone.
            source = f"{table} c JOIN memories m USING (session_id)" if where else f"{table} c"
            key = "c.id" if table == "indexed_chunks" else "0"
            distance = f"c.embedding::vector({dim}) <=> %(vector)s::vector({dim})"
            with self._db.connection() as conn:
                rows = conn.execute(
                    ours(f"""
                    SELECT {key} AS id, c.session_id, {distance} AS distance FROM {source}
                    WHERE c.embedding_model = %(model)s AND c.embedding_dim = {dim} {layer}
                          AND c.session_id <> ALL(%(hidden)s::text[]) {where}
                    ORDER BY {distance} LIMIT {CANDIDATES}
                    """),
                    {**params, "vector": vector_literal(vector)},
                ).fetchall()
            rows.sort(key=lambda r: (r["distance"], r["id"], r["session_id"]))
            return [(r["id"], r["session_id"]) for r in rows]

        def started(wanted: bool, table: str, layer: str) -> Future[list[tuple[int, str]]]:
            return _SIDE_READS.submit(nearest, table, layer) if wanted else _SIDE_READS.submit(list)

        return (
            started(read["bullets"], "indexed_chunks", f"AND c.section <> '{EXCHANGE}'"),
            started(read["exchanges"], "indexed_chunks", f"AND c.section = '{EXCHANGE}'"),
            started(read["exchanges"], "session_vectors", ""),
        )


def _session_facts(
    conn: psycopg.Connection[DictRow], dim: int, params: dict[str, Any]
) -> dict[str, DictRow]:
    """The facts of the `top` sessions a result shows, and their best cosines to the question
    (the relevance's evidence), by session."""
    rows = conn.execute(
        ours(f"""
        SELECT m.session_id, m.project, COALESCE(m.ended_at, m.started_at) AS date,
               m.summary, m.domain, m.tags, e.exchange_cosine, e.digest_cosine,
               1 - (v.embedding::vector({dim}) <=> %(vector)s::vector({dim}))
                   AS session_cosine,
               m.title, m.git_branch, m.started_at, m.files,
               m.digest -> 'solution' AS solution,
               m.digest -> 'problem' AS problem, m.digest -> 'open_items' AS open_items
        FROM memories m JOIN (
            SELECT c.session_id,
                   MAX(1 - (c.embedding::vector({dim}) <=> %(vector)s::vector({dim})))
                       FILTER (WHERE c.section = '{EXCHANGE}') AS exchange_cosine,
                   MAX(1 - (c.embedding::vector({dim}) <=> %(vector)s::vector({dim})))
                       FILTER (WHERE c.section <> '{EXCHANGE}') AS digest_cosine
            FROM indexed_chunks c
            WHERE c.session_id = ANY(%(top)s) AND c.embedding_dim = {dim}
            GROUP BY c.session_id
        ) e USING (session_id)
        LEFT JOIN session_vectors v
            ON v.session_id = m.session_id AND v.embedding_model = %(model)s
               AND v.embedding_dim = {dim}
        WHERE m.session_id = ANY(%(top)s)
              -- Written private since the facts were read: still never shown.
              AND (%(private_ok)s OR m.domain <> %(private_domain)s)
        """),
        params,
    )
    return {r["session_id"]: r for r in rows}


def _context_relations(
    conn: psycopg.Connection[DictRow], context: RecallContext, sessions: Sequence[str]
) -> dict[str, Literal["project", "branch"]]:
    """Which of `sessions` are of the context's project ("project"), and of its branch too
    ("branch"); see RecallContext. Sessions of neither are left out."""
    cwd = (context.cwd or "").rstrip("/")
    branch = context.git_branch if is_feature_branch(context.git_branch) else None
    # A cwd of "/" contains every path: it names no project, and the root is nobody's project.
    project = project_of(cwd) if cwd else None
    rows = conn.execute(
        """
        SELECT m.session_id,
               %(cwd)s::text <> '' AND (
                   m.project = %(project)s::text OR rtrim(m.cwd, '/') = %(cwd)s::text
                   OR starts_with(m.cwd, %(cwd)s::text || '/')
                   OR (rtrim(m.cwd, '/') <> ''
                       AND starts_with(%(cwd)s::text, rtrim(m.cwd, '/') || '/'))
               ) AS in_project,
               m.git_branch = %(branch)s::text AS same_branch
        FROM memories m WHERE m.session_id = ANY(%(sessions)s)
        """,
        {"cwd": cwd, "project": project, "branch": branch, "sessions": sessions},
    ).fetchall()
    relations: dict[str, Literal["project", "branch"]] = {}
    for row in rows:
        if row["same_branch"] and (row["in_project"] or not cwd):
            relations[row["session_id"]] = "branch"
        elif row["in_project"]:
            relations[row["session_id"]] = "project"
    return relations


def _still_fits(measured_at: int, chunks: int) -> bool:
    """Whether a space measured when the store held `measured_at` chunks still describes it."""
    return abs(chunks - measured_at) * 3 <= measured_at


def _keep_calibration(
    conn: psycopg.Connection[DictRow], model: str, dim: int, chunks: int, space: SpaceCalibration
) -> None:
    """Store a space's measured background for every process after this one. A search on a
    role or a replica that may only read keeps it in this process alone."""
    read_only = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)
    with contextlib.suppress(*read_only):
        conn.execute(
            """
            INSERT INTO space_calibrations (embedding_model, embedding_dim, chunks,
                chunk_mean, chunk_sd, session_mean, session_sd)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (embedding_model, embedding_dim) DO UPDATE SET chunks = EXCLUDED.chunks,
                chunk_mean = EXCLUDED.chunk_mean, chunk_sd = EXCLUDED.chunk_sd,
                session_mean = EXCLUDED.session_mean, session_sd = EXCLUDED.session_sd
            """,
            (model, dim, chunks, space.chunk_mean, space.chunk_sd, space.session_mean,
             space.session_sd),
        )  # fmt: skip


def _measure_space(
    conn: psycopg.Connection[DictRow], model: str, dim: int
) -> SpaceCalibration | None:
    bounds = conn.execute("SELECT MIN(id) AS low, MAX(id) AS high FROM indexed_chunks").fetchone()
    if bounds is None or bounds["low"] is None:
        return None
    low, high = int(bounds["low"]), int(bounds["high"])
    # Ids drawn at random (the same draw each time: the same store is judged alike) and
    # fetched by primary key, a sample without scanning a table of a million chunks; drawn
    # again, up to four times the sample in all, for ids of deleted chunks, which find nothing.
    draw = random.Random(0).sample(
        range(low, high + 1), min(4 * CALIBRATION_SAMPLE, high - low + 1)
    )
    rows: list[DictRow] = []
    for start in range(0, len(draw), CALIBRATION_SAMPLE):
        rows += conn.execute(
            "SELECT session_id, embedding FROM indexed_chunks WHERE id = ANY(%s)"
            " AND embedding_model = %s AND embedding_dim = %s",
            (draw[start : start + CALIBRATION_SAMPLE], model, dim),
        ).fetchall()
        if len(rows) >= CALIBRATION_SAMPLE:
            break
    rows = rows[:CALIBRATION_SAMPLE]
    owners = sorted({r["session_id"] for r in rows})
    means = conn.execute(
        "SELECT session_id, embedding FROM session_vectors WHERE session_id = ANY(%s)"
        " AND embedding_model = %s AND embedding_dim = %s",
        (owners, model, dim),
    ).fetchall()
    if not rows or not means:
        return None
    return SpaceCalibration.from_sample(
        np.array([r["embedding"].to_numpy() for r in rows], dtype=np.float64),
        [r["session_id"] for r in rows],
        np.array([r["embedding"].to_numpy() for r in means], dtype=np.float64),
        [r["session_id"] for r in means],
    )


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None
