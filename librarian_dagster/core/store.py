"""PostgreSQL + pgvector storage: schema migrations, one-transaction writes, search and listings.

Two tables: `memories` (one row per session: the digest and the facts about the session) and
`indexed_chunks` (one row per digest bullet, with its embedding). Embeddings are stored in an
untyped `vector` column with the model and dimension beside them, so a switch of embedding model
(384-d local, 768-d Gemini) needs no schema change; each dimension gets its own partial HNSW index
on `embedding::vector(N)`, which is how pgvector indexes mixed dimensions.

Search is hybrid: cosine distance over the HNSW index and PostgreSQL full-text rank, fused by
reciprocal rank. Vectors find paraphrases; full text finds the exact identifiers (function names,
error strings) that developers type and that a small embedding model blurs.

What a row holds is defined once, by the models in `core/models.py`: the INSERT and SELECT lists
here are built from their fields, and rows come back as those models.
"""

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import DictRow, class_row, dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from librarian_dagster.core.chunking import EXCHANGE
from librarian_dagster.core.database import database_url
from librarian_dagster.core.digest import Domain
from librarian_dagster.core.models import (
    ChunkResult,
    MemoryRecord,
    SessionDigest,
    SessionInfo,
    SessionList,
    StoreStats,
)
from librarian_dagster.core.relevance import relevance
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.transcripts import SessionFiles

# Versioned, append-only: never edit a released step, add a new one.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE memories (
            session_id            text PRIMARY KEY,
            project               text NOT NULL,
            cwd                   text,
            git_branch            text,
            started_at            timestamptz,
            ended_at              timestamptz,
            title                 text,
            digest                jsonb NOT NULL,
            digest_text           text NOT NULL,
            summary               text NOT NULL,
            domain                text NOT NULL,
            tags                  text[] NOT NULL DEFAULT '{}',
            importance            smallint NOT NULL,
            content_hash          text NOT NULL,
            digest_version        integer NOT NULL,
            digest_model          text NOT NULL,
            embedding_model       text NOT NULL,
            session_input_tokens  bigint NOT NULL DEFAULT 0,
            session_output_tokens bigint NOT NULL DEFAULT 0,
            digest_input_tokens   integer NOT NULL DEFAULT 0,
            digest_output_tokens  integer NOT NULL DEFAULT 0,
            turns                 integer NOT NULL DEFAULT 0,
            ingested_at           timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX memories_recent ON memories (COALESCE(ended_at, ingested_at) DESC, session_id);
        CREATE INDEX memories_project ON memories (project);
        CREATE INDEX memories_tags ON memories USING gin (tags);
        CREATE TABLE indexed_chunks (
            id              bigserial PRIMARY KEY,
            session_id      text NOT NULL REFERENCES memories (session_id) ON DELETE CASCADE,
            section         text NOT NULL,
            position        integer NOT NULL,
            text            text NOT NULL,
            embedding       vector NOT NULL,
            embedding_model text NOT NULL,
            embedding_dim   integer NOT NULL,
            text_search     tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            UNIQUE (session_id, section, position)
        );
        CREATE INDEX indexed_chunks_session ON indexed_chunks (session_id);
        CREATE INDEX indexed_chunks_text_search ON indexed_chunks USING gin (text_search);
        -- Where each session's files are, so any stage (or a backfill from the UI) can find
        -- them from the partition key alone.
        CREATE TABLE session_sources (
            session_id     text PRIMARY KEY,
            main_path      text,
            subagent_paths text[] NOT NULL DEFAULT '{}',
            fingerprint    text NOT NULL,
            recorded_at    timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        2,
        """
        -- BM25 needs each lexeme's document frequency and the collection's size and mean length.
        -- Counted once at write time (in the same transaction as the chunks), not per query.
        CREATE TABLE lexeme_df (
            lexeme text PRIMARY KEY,
            df     integer NOT NULL
        );
        CREATE TABLE chunk_stats (
            singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            chunks       bigint NOT NULL,
            total_length bigint NOT NULL
        );
        INSERT INTO chunk_stats (chunks, total_length)
            SELECT COUNT(*), COALESCE(SUM(length(text_search)), 0) FROM indexed_chunks;
        INSERT INTO lexeme_df (lexeme, df)
            SELECT u.lexeme, COUNT(*) FROM indexed_chunks c, unnest(c.text_search) u
            GROUP BY u.lexeme;
        CREATE INDEX indexed_chunks_session_section ON indexed_chunks (session_id, section);
        """,
    ),
    (
        3,
        """
        -- What the store already holds, by the transcript files' fingerprint: a memory made
        -- from them, or "nothing to remember" in them. The sensor asks for neither again.
        ALTER TABLE memories ADD COLUMN source_fingerprint text;
        ALTER TABLE session_sources ADD COLUMN nothing_at_fingerprint text;
        """,
    ),
)

# Serialises migrations between processes that start together (webserver, daemon, MCP server).
_MIGRATION_LOCK_KEY = 0x4C49425241  # "LIBRA"

# Reciprocal-rank-fusion constant: 60 is the value from Cormack et al. that most hybrid
# search engines keep; it damps the difference between the first few ranks of either list.
_RRF_K = 60
_SEARCH_POOL = 100  # chunks taken from each of the four ranked lists
# BM25 as Lucene sets it; a chunk's length is its number of distinct lexemes (length(tsvector)).
_BM25_K1 = 1.2
_BM25_B = 0.75


@dataclass(frozen=True)
class ChunkRecord:
    section: str
    position: int
    text: str
    embedding: Sequence[float]


# The INSERT of a memory, one named parameter per field of MemoryRecord.
_MEMORY_COLUMNS = tuple(MemoryRecord.model_fields)
_INSERT_MEMORY = sql.SQL("INSERT INTO memories ({columns}) VALUES ({values})").format(
    columns=sql.SQL(", ").join(map(sql.Identifier, _MEMORY_COLUMNS)),
    values=sql.SQL(", ").join(map(sql.Placeholder, _MEMORY_COLUMNS)),
)
_CHUNK_COUNT = sql.SQL(
    "(SELECT COUNT(*) FROM indexed_chunks c WHERE c.session_id = m.session_id) AS chunk_count"
)


SearchMode = Literal["hybrid", "vector", "text"]
"""Both ranked lists fused (the product), or one alone (to measure what each brings)."""


@dataclass(frozen=True)
class SearchFilters:
    project: str | None = None
    domain: Domain | None = None
    tags: Sequence[str] = ()
    """Only sessions carrying all of these tags."""
    any_tags: Sequence[str] = ()
    """Only sessions carrying at least one of these tags."""
    git_branch: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class Boosts:
    """Tie-breakers on a session's fused rank score: recent and important work first.

    The fused score is multiplied by `1 + recency * 0.5 ** (age_days / half_life_days)` and by
    `1 + importance * (importance - 3)` (importance 1 to 5). They are kept below the gap between
    two neighbouring places in the fused lists (about 1.4% at place 10, more above), so they order
    sessions the lists rank (nearly) alike and never lift a worse match over a better one: at 4%
    the importance boost alone cost MRR 0.934 -> 0.906 on the dev questions.
    """

    recency: float = 0.005
    half_life_days: float = 90.0
    importance: float = 0.002


DEFAULT_BOOSTS = Boosts()


class StoreError(RuntimeError):
    """The database cannot be used as Librarian's store; the message says why."""


class InvalidCursor(ValueError):
    """A listing cursor that `list_sessions` did not hand out."""


class Store:
    """A thin, explicit wrapper over one connection string; opens a connection per operation.

    A connection per call keeps the store safe to share between Dagster's threads and the MCP
    server's event loop without a pool; at our write rate (a session every few minutes) and read
    rate (an agent's query at a time) the ~2 ms of a Unix-socket connect does not matter.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    def connect(self) -> psycopg.Connection[DictRow]:
        # psycopg's overloads do not carry the row type through for pyright; dict_row gives dicts.
        conn = cast(
            "psycopg.Connection[DictRow]",
            psycopg.connect(self.url, row_factory=dict_row),  # pyright: ignore[reportArgumentType]
        )
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            conn.close()
            raise StoreError(
                "the database has no `vector` extension: install pgvector on that server "
                "(or unset LIBRARIAN_DATABASE_URL to use the embedded one)"
            ) from None
        return conn

    # -- schema ---------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Bring the schema to the newest version; safe to call from every process. Returns it."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise StoreError(
                    "cannot enable the `vector` extension on this database "
                    f"({exc.diag.message_primary or exc}); pgvector must be installed on the "
                    "server, or unset LIBRARIAN_DATABASE_URL to use the embedded one"
                ) from None
        with psycopg.connect(self.url) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
            current = row[0] if row else 0
            for version, statements in MIGRATIONS:
                if version > current:
                    conn.execute(statements)  # type: ignore[arg-type]
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                    current = version
            return current

    # -- writes ---------------------------------------------------------------------------------

    def replace_memory(self, memory: MemoryRecord, chunks: Sequence[ChunkRecord]) -> None:
        """Write a session's memory and all its chunks in one transaction, replacing any older one.

        A crash anywhere leaves the previous memory whole: never a half-written memory.
        """
        dims = {len(c.embedding) for c in chunks}
        if len(dims) > 1:
            raise ValueError(f"chunks of one memory must share a dimension, got {sorted(dims)}")
        with self.connect() as conn, conn.transaction():
            for dim in dims:
                self._ensure_vector_index(conn, dim)
            _count_chunks(conn, memory.session_id, -1)
            conn.execute("DELETE FROM memories WHERE session_id = %s", (memory.session_id,))
            params = memory.model_dump()
            # A dict has no default PostgreSQL type in psycopg: name the column's.
            params["digest"] = Jsonb(params["digest"])
            conn.execute(_INSERT_MEMORY, params)
            if chunks:
                with conn.cursor() as cur:
                    cur.executemany(
                        """
                        INSERT INTO indexed_chunks (session_id, section, position, text,
                            embedding, embedding_model, embedding_dim)
                        VALUES (%s, %s, %s, %s, %s::vector, %s, %s)
                        """,
                        [
                            (
                                memory.session_id, c.section, c.position, c.text,
                                _vector_literal(c.embedding), memory.embedding_model,
                                len(c.embedding),
                            )
                            for c in chunks
                        ],
                    )  # fmt: skip
            _count_chunks(conn, memory.session_id, +1)

    def record_sources(self, sessions: Sequence[tuple[SessionFiles, str]]) -> None:
        """Remember where each (session files, fingerprint) lives; the newest record wins."""
        if not sessions:
            return
        with self.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                """
                INSERT INTO session_sources (session_id, main_path, subagent_paths, fingerprint)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (session_id) DO UPDATE SET main_path = EXCLUDED.main_path,
                    subagent_paths = EXCLUDED.subagent_paths,
                    fingerprint = EXCLUDED.fingerprint, recorded_at = now()
                """,
                [
                    (
                        files.session_id,
                        str(files.main) if files.main else None,
                        [str(p) for p in files.subagents],
                        fingerprint,
                    )
                    for files, fingerprint in sessions
                ],
            )

    def record_nothing_to_remember(self, session_id: str, fingerprint: str) -> None:
        """The session's files at `fingerprint` hold nothing to remember (empty, summary-only)."""
        with self.connect() as conn:
            conn.execute(
                "UPDATE session_sources SET nothing_at_fingerprint = %s WHERE session_id = %s",
                (fingerprint, session_id),
            )

    def nothing_to_remember(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Session id -> the fingerprint its files had when they held nothing to remember."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT session_id, nothing_at_fingerprint FROM session_sources"
                " WHERE session_id = ANY(%s) AND nothing_at_fingerprint IS NOT NULL",
                (list(session_ids),),
            ).fetchall()
        return {row["session_id"]: row["nothing_at_fingerprint"] for row in rows}

    def backfill_sessions(
        self,
        project: str | None = None,
        since: datetime | None = None,
        remembered_only: bool = False,
    ) -> list[str]:
        """Session ids to run again, oldest first: all whose files are recorded, or only the
        remembered ones (of a project and/or active since a date, as their memory says)."""
        if project is None and since is None and not remembered_only:
            query = "SELECT session_id FROM session_sources ORDER BY recorded_at, session_id"
            params: dict[str, Any] = {}
        else:
            query = (
                "SELECT m.session_id FROM memories m JOIN session_sources USING (session_id)"
                " WHERE (%(project)s::text IS NULL OR m.project = %(project)s)"
                " AND (%(since)s::timestamptz IS NULL"
                "      OR COALESCE(m.ended_at, m.started_at, m.ingested_at) >= %(since)s)"
                " ORDER BY COALESCE(m.started_at, m.ingested_at), m.session_id"
            )
            params = {"project": project, "since": since}
        with self.connect() as conn:
            return [row["session_id"] for row in conn.execute(query, params).fetchall()]

    def held_fingerprints(self) -> set[tuple[str, str]]:
        """(session id, fingerprint) of transcript files whose outcome the store already holds.

        A memory made from them, or the note that they hold nothing to remember: asking for
        such a session again while its files are unchanged would only repeat the work.
        """
        with self.connect() as conn:
            rows = conn.execute(
                """
                SELECT session_id, nothing_at_fingerprint AS fingerprint FROM session_sources
                WHERE nothing_at_fingerprint IS NOT NULL
                UNION
                SELECT session_id, source_fingerprint FROM memories
                WHERE source_fingerprint IS NOT NULL
                """
            ).fetchall()
        return {(row["session_id"], row["fingerprint"]) for row in rows}

    def session_source(self, session_id: str) -> SessionFiles | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT main_path, subagent_paths FROM session_sources WHERE session_id = %s",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        return SessionFiles(
            session_id=session_id,
            main=Path(row["main_path"]) if row["main_path"] else None,
            subagents=tuple(Path(p) for p in row["subagent_paths"]),
        )

    def recount_text_statistics(self) -> None:
        """Count the BM25 statistics again from every chunk.

        `replace_memory` and `delete_memory` keep them as they write; a bulk load that goes
        around them (COPY) calls this once afterwards.
        """
        with self.connect() as conn, conn.transaction():
            conn.execute(
                """
                UPDATE chunk_stats SET chunks = x.n, total_length = x.length
                FROM (SELECT COUNT(*) AS n, COALESCE(SUM(length(text_search)), 0) AS length
                      FROM indexed_chunks) x
                """
            )
            conn.execute("DELETE FROM lexeme_df")
            conn.execute(
                "INSERT INTO lexeme_df (lexeme, df) SELECT u.lexeme, COUNT(*)"
                " FROM indexed_chunks c, unnest(c.text_search) u GROUP BY u.lexeme"
            )

    def delete_memory(self, session_id: str) -> bool:
        with self.connect() as conn, conn.transaction():
            _count_chunks(conn, session_id, -1)
            cur = conn.execute("DELETE FROM memories WHERE session_id = %s", (session_id,))
            return cur.rowcount > 0

    @staticmethod
    def _ensure_vector_index(conn: psycopg.Connection[Any], dim: int) -> None:
        # One partial HNSW index per dimension: the expression must match the one in `search`.
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {name} ON indexed_chunks USING hnsw "
                "((embedding::vector({dim})) vector_cosine_ops) WHERE embedding_dim = {dim}"
            ).format(
                name=sql.Identifier(f"indexed_chunks_embedding_{int(dim)}_hnsw"),
                dim=sql.Literal(int(dim)),
            )
        )

    # -- reads ----------------------------------------------------------------------------------

    def memory_record(self, session_id: str) -> MemoryRecord | None:
        """A session's memory as the write path stored it (digest provenance included)."""
        query = sql.SQL("SELECT {fields} FROM memories m WHERE m.session_id = %s").format(
            fields=_select_fields(MemoryRecord)
        )
        with self.connect() as conn, conn.cursor(row_factory=class_row(MemoryRecord)) as cur:
            return cur.execute(query, (session_id,)).fetchone()

    def search(
        self,
        query_text: str,
        query_embedding: Sequence[float],
        embedding_model: str,
        filters: SearchFilters = SearchFilters(),
        limit: int = 5,
        max_per_session: int = 2,
        mode: SearchMode = "hybrid",
        boosts: Boosts = DEFAULT_BOOSTS,
    ) -> list[ChunkResult]:
        """Chunks of the sessions that best answer a query, best session first.

        Sessions are ranked by reciprocal-rank fusion of four lists: each layer (digest bullets,
        exchanges) searched by vector (HNSW cosine) and by BM25 over PostgreSQL's lexemes; each
        list gives a session one vote, at the rank of its best chunk there, whatever the number
        of chunks a layer holds per session. `mode` keeps the vector or the text lists alone, to
        measure what each brings. Each session's chunks carry its relevance (core/relevance.py)
        as their score; at most `max_per_session` chunks of one session are returned, the ones
        ranked best across the lists, so one long session cannot fill the answer.
        """
        dim = len(query_embedding)
        where, params = _filter_sql(filters)
        vector = f"%(vector)s::vector({dim})"
        distance = f"c.embedding::vector({dim}) <=> {vector}"
        candidates = (
            "FROM indexed_chunks c JOIN memories m USING (session_id) "
            f"WHERE c.embedding_model = %(model)s {where}"
        )

        bullets, exchanges = f"c.section <> '{EXCHANGE}'", f"c.section = '{EXCHANGE}'"

        def by_vector(layer: str) -> str:
            return f"""
                SELECT c.id, c.session_id, ROW_NUMBER() OVER (ORDER BY {distance}, c.id) AS rank
                {candidates} AND c.embedding_dim = {dim} AND {layer}
                ORDER BY {distance} LIMIT {_SEARCH_POOL}"""

        def by_text(exchange: bool) -> str:
            return f"""
                SELECT id, session_id, ROW_NUMBER() OVER (ORDER BY score DESC, id) AS rank
                FROM bm25 WHERE is_exchange = {exchange} ORDER BY score DESC, id
                LIMIT {_SEARCH_POOL}"""

        query = f"""
            WITH query_lexemes AS (
                SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(text)s)) u
            ),
            corpus AS (
                SELECT GREATEST(chunks, 1)::float8 AS n,
                       GREATEST(total_length::float8 / GREATEST(chunks, 1), 1) AS avgdl
                FROM chunk_stats
            ),
            idf AS (
                SELECT q.lexeme, ln(1 + (corpus.n - COALESCE(d.df, 0) + 0.5)
                                       / (COALESCE(d.df, 0) + 0.5)) AS idf
                FROM query_lexemes q CROSS JOIN corpus LEFT JOIN lexeme_df d USING (lexeme)
            ),
            any_lexeme AS (
                -- The query's lexemes OR-ed: a chunk needs one of them to get a BM25 score.
                SELECT replace(plainto_tsquery('english', %(text)s)::text, '&', '|')::tsquery
                       AS q,
                       (SELECT array_agg(lexeme) FROM query_lexemes) AS lexemes
            ),
            bm25 AS (
                SELECT c.id, c.session_id, c.section = '{EXCHANGE}' AS is_exchange,
                       SUM(i.idf * GREATEST(cardinality(u.positions), 1) * {_BM25_K1 + 1}
                           / (GREATEST(cardinality(u.positions), 1) + {_BM25_K1}
                              * (1 - {_BM25_B} + {_BM25_B} * length(c.text_search)
                                 / corpus.avgdl))) AS score,
                       SUM(i.idf) AS covered
                FROM indexed_chunks c JOIN memories m USING (session_id)
                     CROSS JOIN any_lexeme CROSS JOIN corpus
                     -- Only the query's lexemes of each chunk, with their positions (the term
                     -- frequency): marked with weight A and filtered in C, rather than
                     -- unnesting every lexeme of every candidate into rows.
                     CROSS JOIN LATERAL unnest(ts_filter(
                         setweight(c.text_search, 'A', any_lexeme.lexemes), '{{a}}')) u
                     JOIN idf i ON i.lexeme = u.lexeme
                WHERE c.text_search @@ any_lexeme.q AND c.embedding_model = %(model)s {where}
                GROUP BY c.id, c.session_id, c.section
            ),
            lists AS (
                SELECT 'bullets/vector' AS list, * FROM ({by_vector(bullets)}) v
                WHERE %(mode)s <> 'text'
                UNION ALL
                SELECT 'exchanges/vector', * FROM ({by_vector(exchanges)}) v
                WHERE %(mode)s <> 'text'
                UNION ALL
                SELECT 'bullets/text', * FROM ({by_text(False)}) t WHERE %(mode)s <> 'vector'
                UNION ALL
                SELECT 'exchanges/text', * FROM ({by_text(True)}) t WHERE %(mode)s <> 'vector'
            ),
            session_votes AS (
                -- A session's place in a list is the rank of its best chunk among sessions.
                SELECT list, session_id,
                       ROW_NUMBER() OVER (PARTITION BY list ORDER BY MIN(rank)) AS place
                FROM lists GROUP BY list, session_id
            ),
            top_sessions AS (
                SELECT v.session_id,
                       SUM(1.0 / ({_RRF_K} + v.place))::float8
                       * (1 + %(recency)s * power(0.5, GREATEST(EXTRACT(EPOCH FROM now()
                              - COALESCE(m.ended_at, m.started_at, m.ingested_at)), 0)
                              / 86400.0 / %(half_life)s))
                       * (1 + %(importance)s * (m.importance - 3)) AS fused
                FROM session_votes v JOIN memories m USING (session_id)
                GROUP BY v.session_id, m.ended_at, m.started_at, m.ingested_at, m.importance
                ORDER BY fused DESC, v.session_id LIMIT %(limit)s
            ),
            chunk_votes AS (
                SELECT id, SUM(1.0 / ({_RRF_K} + rank)) AS vote FROM lists GROUP BY id
            ),
            shown AS (
                SELECT c.id, c.session_id, c.section, c.position, c.text,
                       ROW_NUMBER() OVER (PARTITION BY c.session_id
                                          ORDER BY v.vote DESC, c.id) AS nth
                FROM chunk_votes v JOIN indexed_chunks c USING (id)
                WHERE c.session_id IN (SELECT session_id FROM top_sessions)
            ),
            evidence AS (
                -- What the relevance is computed from, once per top session, in one pass
                -- over its chunks.
                SELECT c.session_id,
                       MAX(1 - (c.embedding::vector({dim}) <=> {vector}))
                           FILTER (WHERE c.section = '{EXCHANGE}') AS exchange_cosine,
                       MAX(1 - (c.embedding::vector({dim}) <=> {vector})) AS any_cosine
                FROM indexed_chunks c
                WHERE c.session_id IN (SELECT session_id FROM top_sessions)
                  AND c.embedding_dim = {dim}
                GROUP BY c.session_id
            ),
            best_exchange_text AS (
                SELECT DISTINCT ON (session_id) session_id, covered FROM bm25
                WHERE is_exchange AND session_id IN (SELECT session_id FROM top_sessions)
                ORDER BY session_id, score DESC
            ),
            best_any_text AS (
                SELECT DISTINCT ON (session_id) session_id, covered FROM bm25
                WHERE session_id IN (SELECT session_id FROM top_sessions)
                ORDER BY session_id, score DESC
            ),
            query_idf AS (SELECT NULLIF(SUM(idf), 0) AS total FROM idf)
            SELECT t.session_id, t.fused, s.section, s.position, s.text, m.project,
                   COALESCE(m.ended_at, m.started_at) AS date, m.summary, m.domain, m.tags,
                   e.exchange_cosine, e.any_cosine,
                   bx.covered / q.total AS exchange_coverage,
                   ba.covered / q.total AS any_coverage
            FROM top_sessions t JOIN shown s USING (session_id) JOIN memories m USING (session_id)
                 JOIN evidence e USING (session_id) CROSS JOIN query_idf q
                 LEFT JOIN best_exchange_text bx USING (session_id)
                 LEFT JOIN best_any_text ba USING (session_id)
            WHERE s.nth <= %(per_session)s
            ORDER BY t.fused DESC, t.session_id, s.nth
        """
        params |= {
            "model": embedding_model,
            "vector": _vector_literal(query_embedding),
            "text": query_text,
            "per_session": max_per_session,
            "limit": limit,
            "mode": mode,
            "recency": boosts.recency,
            "half_life": max(boosts.half_life_days, 1e-6),
            "importance": boosts.importance,
        }
        with self.connect() as conn:
            # Filters prune what the HNSW scan yields; an iterative scan keeps fetching until the
            # LIMIT is met (pgvector 0.8), and a candidate list as wide as the pool helps.
            conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(_SEARCH_POOL)))
            conn.execute("SET hnsw.iterative_scan = strict_order")
            rows = conn.execute(query, params).fetchall()  # type: ignore[arg-type]
        return [
            ChunkResult.model_validate({**row, "score": _session_relevance(row)})
            for row in rows[:limit]
        ]

    def get_memory(self, session_id: str) -> SessionDigest | None:
        query = sql.SQL("SELECT {fields} FROM memories m WHERE m.session_id = %s").format(
            fields=_select_fields(SessionDigest)
        )
        with self.connect() as conn, conn.cursor(row_factory=class_row(SessionDigest)) as cur:
            return cur.execute(query, (session_id,)).fetchone()

    def list_sessions(
        self,
        filters: SearchFilters = SearchFilters(),
        limit: int = 20,
        cursor: str | None = None,
    ) -> SessionList:
        """Sessions newest first, `limit` at a time; `cursor` is the previous page's next_cursor.

        Raises InvalidCursor for a cursor this method did not hand out.
        """
        where, params = _filter_sql(filters)
        if cursor is not None:
            where += (
                " AND (COALESCE(m.ended_at, m.ingested_at), m.session_id) < (%(a_date)s, %(a_id)s)"
            )
            params["a_date"], params["a_id"] = _decode_cursor(cursor)
        # One row more than asked: whether it exists says whether there is a next page.
        params["limit"] = limit + 1
        # `where` is our own text (fixed clauses, values as named parameters), never input.
        query = sql.SQL(
            """
            SELECT {fields}, COALESCE(m.ended_at, m.ingested_at) AS sort_date
            FROM memories m WHERE TRUE {where}
            ORDER BY COALESCE(m.ended_at, m.ingested_at) DESC, m.session_id DESC
            LIMIT %(limit)s
            """
        ).format(fields=_select_fields(SessionInfo), where=sql.SQL(where))  # type: ignore[arg-type]
        with self.connect() as conn:
            rows = conn.execute(query, params).fetchall()
        page = rows[:limit]
        last = page[-1] if len(rows) > limit else None
        return SessionList(
            sessions=[SessionInfo.model_validate(r) for r in page],
            next_cursor=_encode_cursor(last["sort_date"], last["session_id"]) if last else None,
        )

    def stats(self) -> StoreStats:
        with self.connect() as conn, conn.cursor(row_factory=class_row(StoreStats)) as cur:
            row = cur.execute(
                """
                SELECT (SELECT COUNT(*) FROM memories) AS sessions,
                       (SELECT COUNT(*) FROM indexed_chunks) AS chunks,
                       (SELECT MAX(ingested_at) FROM memories) AS last_ingest,
                       (SELECT COUNT(DISTINCT project) FROM memories) AS projects
                """
            ).fetchone()
        assert row is not None  # an aggregate over no rows is still one row
        return row


def _session_relevance(row: dict[str, Any]) -> float:
    """The session's relevance from its exchange chunks; from all its chunks if it has none
    (a memory written before the exchange layer existed, until it is ingested again)."""
    if row["exchange_cosine"] is not None:
        return relevance(row["exchange_cosine"], row["exchange_coverage"] or 0.0)
    return relevance(row["any_cosine"] or 0.0, row["any_coverage"] or 0.0)


def _count_chunks(conn: psycopg.Connection[Any], session_id: str, sign: int) -> None:
    """Add (+1) or take away (-1) a session's chunks in the BM25 statistics.

    The one-row `chunk_stats` is updated first: it serialises writers, so two sessions written at
    once never take `lexeme_df` rows in opposite orders (no deadlock).
    """
    params = {"session": session_id, "sign": sign}
    conn.execute(
        """
        UPDATE chunk_stats SET chunks = chunks + %(sign)s * x.n,
                               total_length = total_length + %(sign)s * x.length
        FROM (SELECT COUNT(*) AS n, COALESCE(SUM(length(text_search)), 0) AS length
              FROM indexed_chunks WHERE session_id = %(session)s) x
        """,
        params,
    )
    conn.execute(
        """
        INSERT INTO lexeme_df (lexeme, df)
        SELECT u.lexeme, %(sign)s * COUNT(*) FROM indexed_chunks c, unnest(c.text_search) u
        WHERE c.session_id = %(session)s GROUP BY u.lexeme ORDER BY u.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df
        """,
        params,
    )


def open_store(settings: Settings) -> Store:
    """The store the settings point at (embedded server started if needed), schema up to date."""
    store = Store(database_url(settings))
    store.migrate()
    return store


def _select_fields(model: type[BaseModel]) -> sql.Composed:
    """The SELECT list that reads `model` from `memories m`: one column per field of it.

    `chunk_count` is the one field that is not a column: it is counted from `indexed_chunks`.
    """
    return sql.SQL(", ").join(
        _CHUNK_COUNT if name == "chunk_count" else sql.Identifier("m", name)
        for name in model.model_fields
    )


def _encode_cursor(date: datetime, session_id: str) -> str:
    return base64.urlsafe_b64encode(f"{date.isoformat()}|{session_id}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        date, session_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(date), session_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor("invalid cursor: pass the next_cursor of a previous page") from None


def _filter_sql(filters: SearchFilters) -> tuple[str, dict[str, Any]]:
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if filters.project:
        clauses.append("m.project = %(project)s")
        params["project"] = filters.project
    if filters.domain:
        clauses.append("m.domain = %(domain)s")
        params["domain"] = filters.domain
    if filters.tags:
        clauses.append("m.tags @> %(tags)s")
        params["tags"] = list(filters.tags)
    if filters.any_tags:
        clauses.append("m.tags && %(any_tags)s")
        params["any_tags"] = list(filters.any_tags)
    if filters.git_branch:
        clauses.append("m.git_branch = %(git_branch)s")
        params["git_branch"] = filters.git_branch
    if filters.since:
        clauses.append("COALESCE(m.ended_at, m.started_at, m.ingested_at) >= %(since)s")
        params["since"] = filters.since
    if filters.until:
        clauses.append("COALESCE(m.started_at, m.ended_at, m.ingested_at) <= %(until)s")
        params["until"] = filters.until
    return "".join(" AND " + c for c in clauses), params


def _vector_literal(values: Sequence[float]) -> str:
    # Text form sent with an explicit cast: works for the untyped `vector` column and the
    # per-dimension expression index alike, with no adapter-specific typing.
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"
