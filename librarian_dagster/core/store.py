"""PostgreSQL + pgvector storage: schema migrations, one-transaction writes, search and listings.

Two tables: `memories` (one row per session: the digest and the facts about the session) and
`indexed_chunks` (one row per digest bullet, with its embedding). Embeddings are stored in an
untyped `vector` column with the model and dimension beside them, so a switch of embedding model
(384-d local, 768-d Gemini) needs no schema change; each dimension gets its own partial HNSW index
on `embedding::vector(N)`, which is how pgvector indexes mixed dimensions.

Search is hybrid: cosine distance over the HNSW index and PostgreSQL full-text rank, fused by
reciprocal rank. Vectors find paraphrases; full text finds the exact identifiers (function names,
error strings) that developers type and that a small embedding model blurs.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from librarian_dagster.core.database import database_url
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
)

# Serialises migrations between processes that start together (webserver, daemon, MCP server).
_MIGRATION_LOCK_KEY = 0x4C49425241  # "LIBRA"

# Reciprocal-rank-fusion constant: 60 is the value from Cormack et al. that most hybrid
# search engines keep; it damps the difference between the first few ranks of either list.
_RRF_K = 60
_SEARCH_POOL = 50  # candidates taken from each of the vector and full-text lists


@dataclass(frozen=True)
class ChunkRecord:
    section: str
    position: int
    text: str
    embedding: Sequence[float]


@dataclass(frozen=True)
class MemoryRecord:
    session_id: str
    project: str
    cwd: str | None
    git_branch: str | None
    started_at: datetime | None
    ended_at: datetime | None
    title: str | None
    digest: dict[str, Any]
    digest_text: str
    summary: str
    domain: str
    tags: Sequence[str]
    importance: int
    content_hash: str
    digest_version: int
    digest_model: str
    embedding_model: str
    session_input_tokens: int = 0
    session_output_tokens: int = 0
    digest_input_tokens: int = 0
    digest_output_tokens: int = 0
    turns: int = 0


@dataclass(frozen=True)
class ChunkHit:
    session_id: str
    section: str
    position: int
    text: str
    score: float
    project: str
    date: datetime | None
    summary: str
    domain: str
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SearchFilters:
    project: str | None = None
    domain: str | None = None
    tags: Sequence[str] = ()
    since: datetime | None = None


class StoreError(RuntimeError):
    """The database cannot be used as Librarian's store; the message says why."""


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
            conn.execute("DELETE FROM memories WHERE session_id = %s", (memory.session_id,))
            conn.execute(
                """
                INSERT INTO memories (
                    session_id, project, cwd, git_branch, started_at, ended_at, title, digest,
                    digest_text, summary, domain, tags, importance, content_hash, digest_version,
                    digest_model, embedding_model, session_input_tokens, session_output_tokens,
                    digest_input_tokens, digest_output_tokens, turns)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                        %s, %s, %s, %s)
                """,
                (
                    memory.session_id, memory.project, memory.cwd, memory.git_branch,
                    memory.started_at, memory.ended_at, memory.title, json.dumps(memory.digest),
                    memory.digest_text, memory.summary, memory.domain, list(memory.tags),
                    memory.importance, memory.content_hash, memory.digest_version,
                    memory.digest_model, memory.embedding_model, memory.session_input_tokens,
                    memory.session_output_tokens, memory.digest_input_tokens,
                    memory.digest_output_tokens, memory.turns,
                ),
            )  # fmt: skip
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

    def delete_memory(self, session_id: str) -> bool:
        with self.connect() as conn:
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

    def content_hash(self, session_id: str) -> str | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT content_hash FROM memories WHERE session_id = %s", (session_id,)
            ).fetchone()
            return row["content_hash"] if row else None

    def search(
        self,
        query_text: str,
        query_embedding: Sequence[float],
        embedding_model: str,
        filters: SearchFilters = SearchFilters(),
        limit: int = 5,
        max_per_session: int = 2,
    ) -> list[ChunkHit]:
        """Ranked chunks for a query: vector and full-text lists fused by reciprocal rank.

        At most `max_per_session` chunks of one session are returned, so that one long session
        cannot push every other answer out of the top results.
        """
        dim = len(query_embedding)
        where, params = _filter_sql(filters)
        vector = _vector_literal(query_embedding)
        query = f"""
            WITH by_vector AS (
                SELECT c.id, ROW_NUMBER() OVER (
                    ORDER BY c.embedding::vector({dim}) <=> %(vector)s::vector({dim})) AS rank
                FROM indexed_chunks c JOIN memories m USING (session_id)
                WHERE c.embedding_dim = {dim} AND c.embedding_model = %(model)s {where}
                ORDER BY c.embedding::vector({dim}) <=> %(vector)s::vector({dim})
                LIMIT {_SEARCH_POOL}
            ),
            by_text AS (
                SELECT c.id, ROW_NUMBER() OVER (
                    ORDER BY ts_rank_cd(c.text_search, q) DESC) AS rank
                FROM indexed_chunks c JOIN memories m USING (session_id),
                     websearch_to_tsquery('english', %(text)s) q
                WHERE c.text_search @@ q AND c.embedding_model = %(model)s {where}
                ORDER BY ts_rank_cd(c.text_search, q) DESC
                LIMIT {_SEARCH_POOL}
            ),
            fused AS (
                SELECT id, SUM(1.0 / ({_RRF_K} + rank)) AS score FROM (
                    SELECT id, rank FROM by_vector UNION ALL SELECT id, rank FROM by_text) r
                GROUP BY id
            ),
            ranked AS (
                SELECT c.session_id, c.section, c.position, c.text, f.score,
                       ROW_NUMBER() OVER (PARTITION BY c.session_id ORDER BY f.score DESC) AS nth
                FROM fused f JOIN indexed_chunks c ON c.id = f.id
            )
            SELECT r.session_id, r.section, r.position, r.text, r.score, m.project,
                   COALESCE(m.ended_at, m.started_at) AS date, m.summary, m.domain, m.tags
            FROM ranked r JOIN memories m USING (session_id)
            WHERE r.nth <= %(per_session)s
            ORDER BY r.score DESC, r.session_id, r.position
            LIMIT %(limit)s
        """
        params |= {
            "model": embedding_model,
            "vector": vector,
            "text": query_text,
            "per_session": max_per_session,
            "limit": limit,
        }
        with self.connect() as conn:
            # Filters prune what the HNSW scan yields; an iterative scan keeps fetching until the
            # LIMIT is met (pgvector 0.8), and a wider candidate list than the default 40 helps.
            conn.execute("SET hnsw.ef_search = 100")
            conn.execute("SET hnsw.iterative_scan = strict_order")
            rows = conn.execute(query, params).fetchall()  # type: ignore[arg-type]
        return [ChunkHit(**row) for row in rows]

    def get_memory(self, session_id: str) -> dict[str, Any] | None:
        with self.connect() as conn:
            row = conn.execute(
                """
                SELECT m.*, (SELECT COUNT(*) FROM indexed_chunks c
                             WHERE c.session_id = m.session_id) AS chunk_count
                FROM memories m WHERE m.session_id = %s
                """,
                (session_id,),
            ).fetchone()
            return dict(row) if row else None

    def list_sessions(
        self,
        filters: SearchFilters = SearchFilters(),
        limit: int = 20,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Sessions newest first; `after` is the (date, session_id) of the last row already seen."""
        where, params = _filter_sql(filters)
        if after is not None:
            where += (
                " AND (COALESCE(m.ended_at, m.ingested_at), m.session_id) < (%(a_date)s, %(a_id)s)"
            )
            params |= {"a_date": after[0], "a_id": after[1]}
        params["limit"] = limit
        with self.connect() as conn:
            rows = conn.execute(
                f"""
                SELECT m.session_id, m.project, m.cwd, m.git_branch, m.started_at, m.ended_at,
                       COALESCE(m.ended_at, m.ingested_at) AS sort_date, m.title, m.summary,
                       m.domain, m.tags, m.importance, m.turns,
                       (SELECT COUNT(*) FROM indexed_chunks c
                        WHERE c.session_id = m.session_id) AS chunk_count
                FROM memories m WHERE TRUE {where}
                ORDER BY COALESCE(m.ended_at, m.ingested_at) DESC, m.session_id DESC
                LIMIT %(limit)s
                """,  # type: ignore[arg-type]
                params,
            ).fetchall()
        return [dict(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        with self.connect() as conn:
            row = conn.execute(
                """
                SELECT (SELECT COUNT(*) FROM memories) AS sessions,
                       (SELECT COUNT(*) FROM indexed_chunks) AS chunks,
                       (SELECT MAX(ingested_at) FROM memories) AS last_ingest,
                       (SELECT COUNT(DISTINCT project) FROM memories) AS projects
                """
            ).fetchone()
            return dict(row) if row else {}


def open_store(settings: Settings) -> Store:
    """The store the settings point at (embedded server started if needed), schema up to date."""
    store = Store(database_url(settings))
    store.migrate()
    return store


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
    if filters.since:
        clauses.append("COALESCE(m.ended_at, m.started_at, m.ingested_at) >= %(since)s")
        params["since"] = filters.since
    return "".join(" AND " + c for c in clauses), params


def _vector_literal(values: Sequence[float]) -> str:
    # Text form sent with an explicit cast: works for the untyped `vector` column and the
    # per-dimension expression index alike, with no adapter-specific typing.
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"
