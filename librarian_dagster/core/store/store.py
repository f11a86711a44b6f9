"""PostgreSQL + pgvector storage: schema migrations, one-transaction writes, search and listings.

Two tables: `memories` (one row per session: the digest and the facts about the session) and
`indexed_chunks` (one row per digest bullet or exchange window, with its embedding). Embeddings
are stored in an untyped `vector` column with the model and dimension beside them, so a switch of
embedding model (384-d local, 768-d Gemini) needs no schema change; each dimension and layer gets
its own partial HNSW index on `embedding::vector(N)`, which is how pgvector indexes mixed
dimensions.

Search is hybrid: cosine distance over the HNSW indexes and BM25 over PostgreSQL's lexemes, fused
by reciprocal rank. Vectors find paraphrases; BM25 finds the exact identifiers (function names,
error strings) that developers type and that a small embedding model blurs. BM25 is scored from
postings held in memory (core/recall/lexical.py), from statistics this module keeps as it writes.

What a row holds is defined once, by the models in `core/store/rows.py`: the INSERT and SELECT lists
here are built from their fields, and rows come back as those models.
"""

import base64
import binascii
import math
import random
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, LiteralString, TypeVar, cast

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, class_row, dict_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from librarian_dagster.core.capture.files import SessionFiles, project_of
from librarian_dagster.core.capture.skips import SkipList, before_entry
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN, Domain
from librarian_dagster.core.recall.lexical import LexicalIndex
from librarian_dagster.core.recall.relevance import (
    CALIBRATION_SAMPLE,
    DEFAULT_CALIBRATION,
    Evidence,
    SpaceCalibration,
    named_terms,
    relevance,
)
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import database_url, unreachable
from librarian_dagster.core.store.rows import (
    ChunkResult,
    EmbeddingSpace,
    MemoryRecord,
    SessionDigest,
    SessionInfo,
    SessionList,
    StoreStats,
)

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
        -- Bumped by every write of chunks, so a reader that keeps the BM25 postings in memory
        -- (core/recall/lexical.py) knows, from one small row, when to catch up.
        ALTER TABLE chunk_stats ADD COLUMN generation bigint NOT NULL DEFAULT 0;
        """,
    ),
    (
        4,
        """
        -- One HNSW index per dimension and layer, not per dimension: search asks each layer for
        -- its nearest chunks, and over a two-layer index the scan must step over the other
        -- layer's chunks (2 to 5x slower at 100,000 chunks, docs/decisions/0017). The
        -- predicates must stay those of `Store._vector_lists`.
        CREATE FUNCTION librarian_ensure_vector_indexes(dim integer) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON indexed_chunks USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s AND section = %L',
                           'indexed_chunks_' || dim || '_exchange_hnsw', dim, dim, 'exchange');
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON indexed_chunks USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s AND section <> %L',
                           'indexed_chunks_' || dim || '_bullets_hnsw', dim, dim, 'exchange');
        END $$;
        DO $$
        DECLARE
            -- Read before the loop: no index can be made while a scan of the table is open.
            dims integer[] := ARRAY(SELECT DISTINCT embedding_dim FROM indexed_chunks);
            d integer;
        BEGIN
            FOREACH d IN ARRAY dims LOOP
                PERFORM librarian_ensure_vector_indexes(d);
                EXECUTE format('DROP INDEX IF EXISTS %I',
                               'indexed_chunks_embedding_' || d || '_hnsw');
            END LOOP;
        END $$;
        """,
    ),
    (
        5,
        """
        -- Tokens spent on model calls, per UTC day and model: `librarian status` sums them and
        -- the daily token budget is checked against today's row. A reused digest adds nothing.
        CREATE TABLE llm_usage (
            day           date NOT NULL,
            model         text NOT NULL,
            input_tokens  bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            calls         integer NOT NULL DEFAULT 0,
            PRIMARY KEY (day, model)
        );
        -- Sessions whose digest waits for the next day's token budget; the sensor asks again.
        CREATE TABLE deferred_digests (
            session_id  text PRIMARY KEY,
            deferred_on date NOT NULL
        );
        """,
    ),
    (
        6,
        """
        -- What the store already holds, by the transcript files' fingerprint: a memory made
        -- from them, or "nothing to remember" in them. The sensor asks for neither again.
        ALTER TABLE memories ADD COLUMN source_fingerprint text;
        ALTER TABLE session_sources ADD COLUMN nothing_at_fingerprint text;
        """,
    ),
    (
        7,
        """
        -- What `librarian skip` keeps out of the memory (core/capture/skips.py): a session by
        -- its id (skip_before NULL), or every session last active before a date ('before:DATE').
        CREATE TABLE skip_list (
            entry       text PRIMARY KEY,
            skip_before timestamptz,
            added_at    timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        8,
        """
        -- A chunk's vector stays in its row (its text is compressed or moved out first): the
        -- searches read the vectors of the chunks they rank, and an out-of-line vector cost
        -- three more page reads each (docs/decisions/0017). Rows written before keep their
        -- layout until their session is written again; nothing is rewritten here.
        ALTER TABLE indexed_chunks ALTER COLUMN embedding SET STORAGE MAIN;
        """,
    ),
    (
        9,
        """
        -- One vector per session, the mean of its exchange windows' (of all its chunks when it
        -- has none): the session as a whole, which a question in other words than any one
        -- window's comes closest to (docs/decisions/0021). Filled from the chunks already held.
        CREATE TABLE session_vectors (
            session_id      text PRIMARY KEY REFERENCES memories (session_id) ON DELETE CASCADE,
            embedding       vector NOT NULL,
            embedding_model text NOT NULL,
            embedding_dim   integer NOT NULL
        );
        ALTER TABLE session_vectors ALTER COLUMN embedding SET STORAGE MAIN;
        INSERT INTO session_vectors (session_id, embedding, embedding_model, embedding_dim)
            SELECT DISTINCT ON (session_id) session_id,
                   COALESCE(avg(embedding) FILTER (WHERE section = 'exchange'), avg(embedding)),
                   embedding_model, embedding_dim
            FROM indexed_chunks GROUP BY session_id, embedding_model, embedding_dim
            ORDER BY session_id, COUNT(*) DESC;
        -- An HNSW index per dimension, as the chunks have (`Store._vector_lists` plans with it).
        CREATE FUNCTION librarian_ensure_session_vector_index(dim integer) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON session_vectors USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s',
                           'session_vectors_' || dim || '_hnsw', dim, dim);
        END $$;
        DO $$
        DECLARE
            dims integer[] := ARRAY(SELECT DISTINCT embedding_dim FROM session_vectors);
            d integer;
        BEGIN
            FOREACH d IN ARRAY dims LOOP
                PERFORM librarian_ensure_session_vector_index(d);
            END LOOP;
        END $$;
        """,
    ),
)

# Serialises migrations between processes that start together (webserver, daemon, MCP server).
_MIGRATION_LOCK_KEY = 0x4C49425241  # "LIBRA"

# Reciprocal-rank-fusion constant: 60 is the value from Cormack et al. that most hybrid
# search engines keep; it damps the difference between the first few ranks of either list.
_RRF_K = 60
_SEARCH_POOL = 100  # chunks taken from each of the four ranked lists
_KEPT_READERS = 8  # idle read connections a store keeps (two per concurrent search, about)
# Threads that run one layer's vector list on a second connection while the search's own runs
# the other: two index scans at once on two server processes, not one after the other.
_SIDE_READS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="librarian-read")

# A session's mean vector from its chunks (every session's when `session` is NULL), as migration 9
# made them for the sessions stored before it.
_WRITE_SESSION_VECTORS = """
    INSERT INTO session_vectors (session_id, embedding, embedding_model, embedding_dim)
    SELECT session_id,
           COALESCE(avg(embedding) FILTER (WHERE section = 'exchange'), avg(embedding)),
           embedding_model, embedding_dim
    FROM indexed_chunks WHERE %(session)s::text IS NULL OR session_id = %(session)s
    GROUP BY session_id, embedding_model, embedding_dim
"""

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


@dataclass(frozen=True)
class SkipEntry:
    entry: str
    """A session id, or `before:DATE`."""
    added_at: datetime


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
    include_private: bool = False
    """Whether sessions of the `private` domain may be returned: only when the caller may read
    them (a token with the `private` scope, `--include-private`); see SECURITY.md."""


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
    project: float = 0.25
    """With a `RecallContext`: the fused score of a session of the caller's project is multiplied
    by `1 + project`. Unlike the tie-breakers above, strong enough to lift it over sessions of
    other projects that the lists rank a few places better: of the sessions the prompt hook names
    on the dev store, 95% -> 97% are of the prompt's project (benchmarks/replay.py)."""
    branch: float = 0.5
    """...and by `1 + branch` more when it is also of the caller's feature branch (not a trunk).
    As large as it is because a prompt that continues a branch ("review this PR", "why is lint
    failing") has words that rank that branch's earlier sessions 10th to 40th: the hook names one
    in 58% of such sessions without it, 78% at 0.25, 82% at 0.5 (cli + cipher-box; FitToday 33%
    -> 89%), 89% at 1.0 (benchmarks/replay.py, docs/benchmarks.md)."""


DEFAULT_BOOSTS = Boosts()


TRUNKS = frozenset({"main", "master", "trunk", "develop", "development", "HEAD"})
"""Branches everyone works on (and `HEAD`, detached): sharing one says nothing about the work."""


def is_feature_branch(branch: str | None) -> bool:
    return bool(branch) and branch not in TRUNKS


@dataclass(frozen=True)
class RecallContext:
    """Where the question is asked from: context for the ranking, never a filter.

    `cwd` names the current project: sessions whose stored cwd is it, inside it or contains it
    (path prefixes on '/' boundaries), or whose project is its project name (the last folder
    name, as ingest names projects). `git_branch`, a feature branch, counts for sessions of that
    project (of any, without a cwd). Sessions that match are ranked up (`Boosts.project`,
    `Boosts.branch`) and say how (`ChunkResult.context`); core/recall/answer.py gives the
    same-branch sessions a prior.
    """

    cwd: str | None = None
    git_branch: str | None = None


_T = TypeVar("_T")


class StoreError(RuntimeError):
    """The database cannot be used as Librarian's store; the message says why."""


class InvalidCursor(ValueError):
    """A listing cursor that `list_sessions` did not hand out."""


class Store:
    """A thin, explicit wrapper over one connection string.

    Writes and the pipeline's reads open a connection per operation: that keeps the store safe
    to share between Dagster's threads without a pool, and at our write rate (a session every few
    minutes) the cost does not matter. The reads the recall server makes on every call (search,
    get_digest, list_sessions) run on kept idle connections (`_read`): a new one costs ~15 ms
    (the connect, then pgvector's type look-ups), which was most of a get_digest over MCP.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._lexical = LexicalIndex()
        # (model, dimension) -> (chunks held when measured, the space's background).
        self._calibrations: dict[tuple[str, int], tuple[int, SpaceCalibration]] = {}
        # Reads reuse idle connections: a search must not pay a connect (~3 ms) each time.
        self._idle: deque[psycopg.Connection[DictRow]] = deque()
        weakref.finalize(self, _close_all, self._idle)

    def close(self) -> None:
        """Close the idle read connections (a store left to the garbage collector does too)."""
        _close_all(self._idle)

    def connect(self, autocommit: bool = False) -> psycopg.Connection[DictRow]:
        # psycopg's overloads do not carry the row type through for pyright; dict_row gives dicts.
        conn = cast(
            "psycopg.Connection[DictRow]",
            psycopg.connect(self.url, row_factory=dict_row, autocommit=autocommit),  # pyright: ignore[reportArgumentType]
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

    def _read(self, read: Callable[[psycopg.Connection[DictRow]], _T]) -> _T:
        """`read(conn)` on a kept connection (autocommit), kept again afterwards if it is clean.

        A kept connection the server has dropped since (a restart) fails with OperationalError:
        it is thrown away and the read runs again on the next, or on a new one, whose own
        failure is the caller's.
        """
        while True:
            try:
                conn, kept = self._idle.pop(), True
            except IndexError:
                conn, kept = self._new_reader(), False
            try:
                result = read(conn)
            except psycopg.OperationalError:
                conn.close()
                if kept:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if conn.info.transaction_status == TransactionStatus.IDLE and (
                len(self._idle) < _KEPT_READERS
            ):
                self._idle.append(conn)
            else:
                conn.close()
            return result

    def _new_reader(self) -> psycopg.Connection[DictRow]:
        conn = self.connect(autocommit=True)
        # Filters prune what the HNSW scan yields; an iterative scan keeps fetching until the
        # LIMIT is met (pgvector 0.8), and a candidate list as wide as the pool helps.
        conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(_SEARCH_POOL)))
        conn.execute("SET hnsw.iterative_scan = strict_order")
        return conn

    # -- schema ---------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Bring the schema to the newest version; safe to call from every process. Returns it."""
        # The first connection of a process: an address that drops packets must fail in seconds,
        # not after the system's TCP timeout (libpq waits forever unless told).
        first = self.url
        if "connect_timeout" not in conninfo_to_dict(first):
            first = make_conninfo(first, connect_timeout=10)
        with psycopg.connect(first, autocommit=True) as conn:
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
                conn.execute(_WRITE_SESSION_VECTORS, {"session": memory.session_id})
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

    def skip_list(self) -> SkipList:
        """The skip list as the sensor, ingest and backfills apply it (core/capture/skips.py)."""
        with self.connect() as conn:
            rows = conn.execute("SELECT entry, skip_before FROM skip_list").fetchall()
        befores = [r["skip_before"] for r in rows if r["skip_before"] is not None]
        return SkipList(
            session_ids=frozenset(r["entry"] for r in rows if r["skip_before"] is None),
            # Every session before the latest date is before the earlier ones too.
            before=max(befores) if befores else None,
        )

    def skip_entries(self) -> list[SkipEntry]:
        with self.connect() as conn, conn.cursor(row_factory=class_row(SkipEntry)) as cur:
            return cur.execute(
                "SELECT entry, added_at FROM skip_list ORDER BY added_at, entry"
            ).fetchall()

    def skip_sessions(self, session_ids: Sequence[str]) -> None:
        with self.connect() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO skip_list (entry) VALUES (%s) ON CONFLICT (entry) DO NOTHING",
                [(s,) for s in session_ids],
            )

    def skip_before(self, moment: datetime) -> str:
        """Skip every session last active before `moment`; returns the list's entry for it."""
        entry = before_entry(moment)
        with self.connect() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO skip_list (entry, skip_before) VALUES (%s, %s)"
                " ON CONFLICT (entry) DO NOTHING",
                (entry, moment),
            )
        return entry

    def remove_skip(self, entry: str) -> bool:
        """Take one entry (a session id or `before:DATE`) off the list; False if it was not on."""
        with self.connect() as conn, conn.transaction():
            return conn.execute("DELETE FROM skip_list WHERE entry = %s", (entry,)).rowcount > 0

    def remembered(self, session_ids: Sequence[str]) -> set[str]:
        """Which of these sessions have a memory."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT session_id FROM memories WHERE session_id = ANY(%s)", (list(session_ids),)
            ).fetchall()
        return {r["session_id"] for r in rows}

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

    def recount_from_chunks(self) -> None:
        """Count the BM25 statistics and make the sessions' mean vectors again from every chunk.

        `replace_memory` and `delete_memory` keep them as they write; a bulk load that goes
        around them (COPY) calls this once afterwards.
        """
        with self.connect() as conn, conn.transaction():
            conn.execute("DELETE FROM session_vectors")
            conn.execute(_WRITE_SESSION_VECTORS, {"session": None})
            conn.execute(
                """
                UPDATE chunk_stats SET chunks = x.n, total_length = x.length,
                                       generation = generation + 1
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
        # Partial HNSW indexes per dimension and layer, and for the sessions' mean vectors
        # (migrations 4 and 9 define them, in one place each).
        conn.execute("SELECT librarian_ensure_vector_indexes(%s)", (int(dim),))
        conn.execute("SELECT librarian_ensure_session_vector_index(%s)", (int(dim),))

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
        query_embedding: Sequence[float] | Callable[[], Sequence[float]],
        embedding_model: str,
        filters: SearchFilters = SearchFilters(),
        limit: int = 5,
        max_per_session: int = 2,
        mode: SearchMode = "hybrid",
        boosts: Boosts = DEFAULT_BOOSTS,
        judged: Callable[[str, Evidence, SpaceCalibration], None] | None = None,
        context: RecallContext | None = None,
    ) -> list[ChunkResult]:
        """Chunks of the sessions that best answer a query, best session first.

        Sessions are ranked by reciprocal-rank fusion of four lists: each layer (digest bullets,
        exchanges) searched by vector (HNSW cosine) and by BM25 over PostgreSQL's lexemes; each
        list gives a session one vote, at the rank of its best chunk there, whatever the number
        of chunks a layer holds per session. `mode` keeps the vector or the text lists alone, to
        measure what each brings. Each session's chunks carry its relevance
        (core/recall/relevance.py) as their score; at most `max_per_session` chunks of one session
        are returned, the ones ranked best across the lists, so one long session cannot fill the
        answer.

        The vectors are searched in PostgreSQL, BM25 in the store's in-memory postings
        (core/recall/lexical.py), which a long-lived store (the recall server) keeps between
        queries. `query_embedding` may be a callable that waits for the vector
        (core/recall/answer.py embeds while BM25 is scored): it is called only once the vector is
        needed. `judged`, when
        given, is told each ranked session's relevance evidence, best first (the relevance
        fit, benchmarks/fit_relevance.py, learns from it). `context` (where the question comes
        from) ranks the caller's project and branch first; it filters nothing.
        """
        return self._read(
            lambda conn: self._search(
                conn, query_text, query_embedding, embedding_model, filters, limit,
                max_per_session, mode, boosts, judged, context,
            )
        )  # fmt: skip

    def warm_up(self) -> None:
        """Load what search keeps in memory (the BM25 postings) now, not at the first question.

        A long-lived reader (the recall server) calls it at start; at 100,000 chunks it takes
        a few seconds, which the first question would otherwise wait for.
        """

        def refresh(conn: psycopg.Connection[DictRow]) -> None:
            row = conn.execute("SELECT generation FROM chunk_stats").fetchone()
            self._lexical.refresh(conn, row["generation"] if row else 0)

        self._read(refresh)

    def _search(
        self,
        conn: psycopg.Connection[DictRow],
        query_text: str,
        query_embedding: Sequence[float] | Callable[[], Sequence[float]],
        embedding_model: str,
        filters: SearchFilters,
        limit: int,
        max_per_session: int,
        mode: SearchMode,
        boosts: Boosts,
        judged: Callable[[str, Evidence, SpaceCalibration], None] | None,
        context: RecallContext | None = None,
    ) -> list[ChunkResult]:
        # The private domain is left out through the in-memory session facts (no join, no list
        # of every other session); the caller's own filters, when any, in SQL.
        where, params = _filter_sql(replace(filters, include_private=True))
        terms = conn.execute(
            _QUERY_TERMS, {"text": query_text, "named": named_terms(query_text)}
        ).fetchone()
        assert terms is not None  # chunk_stats always holds its one row
        self._lexical.refresh(conn, terms["generation"])
        allowed = None
        if where:  # `where` is our own text (fixed clauses, values as named parameters)
            chosen = _ours(f"SELECT m.session_id FROM memories m WHERE TRUE {where}")
            allowed = {r["session_id"] for r in conn.execute(chosen, params)}
        idf = dict(zip(terms["lexemes"] or (), terms["idfs"] or (), strict=True))
        scored = self._lexical.score(
            list(idf.items()), terms["avgdl"], embedding_model, allowed, filters.include_private
        )
        vector = query_embedding() if callable(query_embedding) else query_embedding
        dim = len(vector)
        params |= {
            "model": embedding_model,
            "vector": _vector_literal(vector),
            "hidden": [] if filters.include_private else self._lexical.private_sessions(),
            "private_ok": filters.include_private,
            "private_domain": PRIVATE_DOMAIN,
        }

        total_idf = math.fsum(idf.values()) or None
        chunk_lists: list[list[tuple[int, str]]] = []
        ranked: list[tuple[float, Sequence[str]]] = []
        if mode != "text":
            bullets, exchanges, whole = self._vector_lists(conn, dim, where, params)
            chunk_lists += [bullets, exchanges]
            ranked += [(1.0, _sessions_of(bullets)), (1.0, _sessions_of(exchanges)), (1.0, whole)]
        if mode != "vector":
            bm25 = [scored.top(False, _SEARCH_POOL), scored.top(True, _SEARCH_POOL)]
            chunk_lists += bm25
            # BM25 votes as far as the question's own words are in the store: the share of the
            # question's idf mass its best chunk holds. A question in a user's own words, which
            # shares few words with the session that answers it, is then ranked by meaning, not
            # by the chunks that happen to share its filler words (docs/decisions/0021).
            weight = 1.0
            if mode == "hybrid":
                weight = _share(float(scored.covered.max(initial=0.0)), total_idf) or 0.0
            ranked += [(weight, _sessions_of(bm25[0])), (weight, _sessions_of(bm25[1]))]
        fused = _fuse_sessions(ranked)
        if not fused:
            return []
        now, half_life = time.time(), max(boosts.half_life_days, 1e-6)
        # A session written after the facts were read gets no boost until the next refresh.
        for session_id, (importance, dated) in self._lexical.session_facts(fused).items():
            age = max(now - dated, 0.0) / 86400
            recency = 1 + boosts.recency * 0.5 ** (age / half_life)
            fused[session_id] *= recency * (1 + boosts.importance * (importance - 3))
        relations = _context_relations(conn, context, list(fused)) if context else {}
        for session_id, relation in relations.items():
            fused[session_id] *= (1 + boosts.project) * (
                1 + boosts.branch if relation == "branch" else 1
            )
        top = sorted(fused, key=lambda s: (-fused[s], s))[:limit]
        shown = _shown_chunks(chunk_lists, top, max_per_session)

        sessions = {
            r["session_id"]: r
            for r in conn.execute(
                _ours(f"""
                SELECT m.session_id, m.project, COALESCE(m.ended_at, m.started_at) AS date,
                       m.summary, m.domain, m.tags, e.exchange_cosine, e.digest_cosine,
                       1 - (v.embedding::vector({dim}) <=> %(vector)s::vector({dim}))
                           AS session_cosine,
                       m.title, m.git_branch, m.digest -> 'solution' AS solution,
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
                {**params, "top": top},
            )
        }
        texts = {
            r["id"]: r
            for r in conn.execute(
                "SELECT id, section, position, text FROM indexed_chunks WHERE id = ANY(%s)",
                ([i for ids in shown.values() for i in ids],),
            )
        }
        unseen = _share(math.fsum(idf[lexeme] for lexeme in terms["unseen"] or ()), total_idf)
        calibration = self._calibration(conn, embedding_model, dim, int(terms["chunks"]))
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
            highlights = _highlights(facts, [texts[i] for i in shown[session_id]])
            for chunk_id in shown[session_id]:
                chunk = texts[chunk_id]
                results.append(ChunkResult(
                    text=chunk["text"], score=score, session_id=session_id,
                    section=chunk["section"], position=chunk["position"],
                    project=facts["project"], date=facts["date"], summary=facts["summary"],
                    domain=facts["domain"], tags=facts["tags"], title=facts["title"],
                    git_branch=facts["git_branch"], highlights=highlights,
                    context=relations.get(session_id),
                ))  # fmt: skip
        return results[:limit]

    def _calibration(
        self, conn: psycopg.Connection[DictRow], model: str, dim: int, chunks: int
    ) -> SpaceCalibration:
        """How alike unrelated chunks are in this embedding space, in this store (relevance's
        background), measured on a sample of its chunks: once per store object, and again
        once the store has grown or shrunk by a third since."""
        measured = self._calibrations.get((model, dim))
        if measured is not None and abs(chunks - measured[0]) * 3 <= measured[0]:
            return measured[1]
        calibration = self._measure_space(conn, model, dim) or DEFAULT_CALIBRATION
        self._calibrations[(model, dim)] = (chunks, calibration)
        return calibration

    @staticmethod
    def _measure_space(
        conn: psycopg.Connection[DictRow], model: str, dim: int
    ) -> SpaceCalibration | None:
        bounds = conn.execute(
            "SELECT MIN(id) AS low, MAX(id) AS high FROM indexed_chunks"
        ).fetchone()
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

    def _vector_lists(
        self, conn: psycopg.Connection[DictRow], dim: int, where: str, params: dict[str, Any]
    ) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[str]]:
        """By cosine over the HNSW indexes: the `_SEARCH_POOL` nearest chunks of each layer
        (bullets, exchanges: (chunk id, session id), nearest first) and the nearest sessions as
        a whole (their mean vectors). The bullets and the sessions run on kept connections of
        their own, at the same time as the exchanges on `conn`."""

        def nearest(
            conn: psycopg.Connection[DictRow], table: str, layer: str
        ) -> list[tuple[int, str]]:
            # Only a filter needs the memories row: without one the plan is the index scan alone.
            source = f"{table} c JOIN memories m USING (session_id)" if where else f"{table} c"
            key = "c.id" if table == "indexed_chunks" else "0"
            distance = f"c.embedding::vector({dim}) <=> %(vector)s::vector({dim})"
            rows = conn.execute(
                _ours(f"""
                SELECT {key} AS id, c.session_id, {distance} AS distance FROM {source}
                WHERE c.embedding_model = %(model)s AND c.embedding_dim = {dim} {layer}
                      AND c.session_id <> ALL(%(hidden)s::text[]) {where}
                ORDER BY {distance} LIMIT {_SEARCH_POOL}
                """),
                params,
            ).fetchall()
            rows.sort(key=lambda r: (r["distance"], r["id"], r["session_id"]))
            return [(r["id"], r["session_id"]) for r in rows]

        bullets = _SIDE_READS.submit(
            self._read,
            lambda side: nearest(side, "indexed_chunks", f"AND c.section <> '{EXCHANGE}'"),
        )
        whole = _SIDE_READS.submit(self._read, lambda side: nearest(side, "session_vectors", ""))
        exchanges = nearest(conn, "indexed_chunks", f"AND c.section = '{EXCHANGE}'")
        return bullets.result(), exchanges, [session for _, session in whole.result()]

    def get_memory(self, session_id: str, include_private: bool = False) -> SessionDigest | None:
        """One session's digest; a private one is None unless `include_private`, as if absent."""
        query = sql.SQL(
            "SELECT {fields} FROM memories m WHERE m.session_id = %s AND (%s OR m.domain <> %s)"
        ).format(fields=_select_fields(SessionDigest))

        def read(conn: psycopg.Connection[DictRow]) -> SessionDigest | None:
            with conn.cursor(row_factory=class_row(SessionDigest)) as cur:
                return cur.execute(query, (session_id, include_private, PRIVATE_DOMAIN)).fetchone()

        return self._read(read)

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
        rows = self._read(lambda conn: conn.execute(query, params).fetchall())
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
                       (SELECT COUNT(DISTINCT project) FROM memories) AS projects,
                       (SELECT COALESCE(SUM(input_tokens), 0) FROM llm_usage) AS input_tokens,
                       (SELECT COALESCE(SUM(output_tokens), 0) FROM llm_usage) AS output_tokens,
                       (SELECT COALESCE(SUM(calls), 0) FROM llm_usage) AS llm_calls,
                       (SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM llm_usage
                        WHERE day = (now() AT TIME ZONE 'UTC')::date) AS tokens_today
                """
            ).fetchone()
        assert row is not None  # an aggregate over no rows is still one row
        return row

    def embedding_spaces(self) -> list[EmbeddingSpace]:
        """Which embedding models (and dimensions) the stored chunks were made with."""

        def read(conn: psycopg.Connection[DictRow]) -> list[EmbeddingSpace]:
            with conn.cursor(row_factory=class_row(EmbeddingSpace)) as cur:
                return cur.execute(
                    """
                    SELECT embedding_model AS model, embedding_dim AS dimension,
                           COUNT(DISTINCT session_id) AS sessions, COUNT(*) AS chunks
                    FROM indexed_chunks GROUP BY embedding_model, embedding_dim
                    ORDER BY COUNT(*) DESC, embedding_model
                    """
                ).fetchall()

        return self._read(read)

    def stored_vectors(self, session_id: str, model: str, dimension: int) -> dict[str, list[float]]:
        """A session's stored chunk vectors of one embedding space, by chunk text.

        An unchanged chunk keeps its vector when its session is written again: re-ingesting an
        unchanged session calls no embedding service.
        """
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT text, embedding FROM indexed_chunks"
                " WHERE session_id = %s AND embedding_model = %s AND embedding_dim = %s",
                (session_id, model, dimension),
            ).fetchall()
        return {r["text"]: [float(x) for x in r["embedding"].to_list()] for r in rows}

    def exchange_texts(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        """These sessions' exchange windows, in order, by session (those that have any)."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT session_id, text FROM indexed_chunks WHERE section = %s"
                " AND session_id = ANY(%s) ORDER BY session_id, position",
                (EXCHANGE, list(session_ids)),
            ).fetchall()
        texts: dict[str, list[str]] = {}
        for r in rows:
            texts.setdefault(r["session_id"], []).append(r["text"])
        return texts

    def top_tags(self, limit: int = 30) -> list[str]:
        """The most used tags, most used first: offered to the LLM so the vocabulary converges."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT tag, COUNT(*) AS n FROM memories, unnest(tags) AS tag"
                " GROUP BY tag ORDER BY n DESC, tag LIMIT %s",
                (limit,),
            ).fetchall()
        return [r["tag"] for r in rows]

    def record_usage(self, model: str, input_tokens: int, output_tokens: int, calls: int) -> None:
        """Add tokens spent today (UTC) on `model`."""
        with self.connect() as conn, conn.transaction():
            conn.execute(
                """
                INSERT INTO llm_usage (day, model, input_tokens, output_tokens, calls)
                VALUES ((now() AT TIME ZONE 'UTC')::date, %s, %s, %s, %s)
                ON CONFLICT (day, model) DO UPDATE SET
                    input_tokens = llm_usage.input_tokens + EXCLUDED.input_tokens,
                    output_tokens = llm_usage.output_tokens + EXCLUDED.output_tokens,
                    calls = llm_usage.calls + EXCLUDED.calls
                """,
                (model, input_tokens, output_tokens, calls),
            )

    def defer_digest(self, session_id: str) -> None:
        """Remember that this session's digest waits for tomorrow's (UTC) token budget."""
        with self.connect() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO deferred_digests (session_id, deferred_on)"
                " VALUES (%s, (now() AT TIME ZONE 'UTC')::date)"
                " ON CONFLICT (session_id) DO UPDATE SET deferred_on = EXCLUDED.deferred_on",
                (session_id,),
            )

    def clear_deferral(self, session_id: str) -> None:
        with self.connect() as conn, conn.transaction():
            conn.execute("DELETE FROM deferred_digests WHERE session_id = %s", (session_id,))

    def deferred(self, session_ids: Sequence[str]) -> set[str]:
        """Which of these sessions' digests wait for a later day's token budget."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT session_id FROM deferred_digests WHERE session_id = ANY(%s)",
                (list(session_ids),),
            ).fetchall()
        return {r["session_id"] for r in rows}

    def due_deferrals(self) -> list[str]:
        """Sessions deferred on an earlier day (UTC): their digest may be tried again now."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT session_id FROM deferred_digests"
                " WHERE deferred_on < (now() AT TIME ZONE 'UTC')::date ORDER BY session_id"
            ).fetchall()
        return [r["session_id"] for r in rows]

    def tokens_spent_today(self) -> int:
        """Tokens (in + out) spent today (UTC) on every model."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) AS n FROM llm_usage"
                " WHERE day = (now() AT TIME ZONE 'UTC')::date"
            ).fetchone()
        return int(row["n"]) if row else 0


def _sessions_of(chunks: Sequence[tuple[int, str]]) -> list[str]:
    """The sessions of ranked chunks, each once, at the place of its best chunk."""
    return list(dict.fromkeys(session for _, session in chunks))


HIGHLIGHTS = 3
"""Digest lines a result carries for its session (`ChunkResult.highlights`)..."""
HIGHLIGHT_CHARS = 200
"""...each at most this long: the prompt hook shows several sessions in 1,500 characters."""
# What a session found, decided or fixed, in that order: `worked_on` is left out (the offline
# digester fills it with the session's own prompts, not with what came of them).
_HIGHLIGHT_SECTIONS = ("solution", "problem", "open_items")


def _highlights(facts: dict[str, Any], shown: Sequence[dict[str, Any]]) -> list[str]:
    """The session's best distilled lines: its shown digest bullets (the ones that matched the
    query) first, then the first bullets of solution, problem and open items, taken in turn."""
    found = [c["text"] for c in shown if c["section"] in _HIGHLIGHT_SECTIONS]
    sections = [b if isinstance(b, list) else [] for b in map(facts.get, _HIGHLIGHT_SECTIONS)]
    for row in range(max(map(len, sections), default=0)):
        found += [bullets[row] for bullets in sections if row < len(bullets)]
    lines: list[str] = []
    for text in found:
        line = _cut(" ".join(str(text).split()), HIGHLIGHT_CHARS)
        if line and line not in lines:
            lines.append(line)
        if len(lines) == HIGHLIGHTS:
            break
    return lines


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word with an ellipsis that says so."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "\u2026"


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


def _fuse_sessions(lists: Sequence[tuple[float, Sequence[str]]]) -> dict[str, float]:
    """Weighted reciprocal-rank fusion: each (weight, ranked sessions) list gives a session
    weight / (k + its place there). Summed exactly (fsum), so equal votes tie."""
    votes: dict[str, list[float]] = {}
    for weight, ranked in lists:
        for place, session_id in enumerate(ranked, start=1):
            votes.setdefault(session_id, []).append(weight / (_RRF_K + place))
    return {session: math.fsum(v) for session, v in votes.items()}


def _shown_chunks(
    lists: Sequence[Sequence[tuple[int, str]]], sessions: Sequence[str], per_session: int
) -> dict[str, list[int]]:
    """Per session, its `per_session` chunks voted best across the lists (then by id)."""
    votes: dict[int, list[float]] = {}
    owner: dict[int, str] = {}
    for ranked in lists:
        for rank, (chunk_id, session_id) in enumerate(ranked, start=1):
            votes.setdefault(chunk_id, []).append(1.0 / (_RRF_K + rank))
            owner[chunk_id] = session_id
    vote = {chunk_id: math.fsum(v) for chunk_id, v in votes.items()}
    shown: dict[str, list[int]] = {s: [] for s in sessions}
    for chunk_id in sorted(vote, key=lambda c: (-vote[c], c)):
        picked = shown.get(owner[chunk_id])
        if picked is not None and len(picked) < per_session:
            picked.append(chunk_id)
    return shown


def _ours(text: str) -> LiteralString:
    """SQL text built here from fixed clauses and numbers, never from input (values always go
    as parameters): what psycopg's LiteralString typing asks for, said once."""
    return cast(LiteralString, text)


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _close_all(connections: deque[psycopg.Connection[DictRow]]) -> None:
    while connections:
        connections.pop().close()


def _count_chunks(conn: psycopg.Connection[Any], session_id: str, sign: int) -> None:
    """Add (+1) or take away (-1) a session's chunks in the BM25 statistics.

    The one-row `chunk_stats` is updated first: it serialises writers, so two sessions written at
    once never take `lexeme_df` rows in opposite orders (no deadlock).
    """
    params = {"session": session_id, "sign": sign}
    conn.execute(
        """
        UPDATE chunk_stats SET chunks = chunks + %(sign)s * x.n,
                               total_length = total_length + %(sign)s * x.length,
                               generation = generation + 1
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
    try:
        store.migrate()
    except psycopg.OperationalError as exc:
        raise unreachable(settings, exc) from None
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
    if not filters.include_private:
        clauses.append("m.domain <> %(private_domain)s")
        params["private_domain"] = PRIVATE_DOMAIN
    return "".join(" AND " + c for c in clauses), params


def _vector_literal(values: Sequence[float]) -> str:
    # Text form sent with an explicit cast: works for the untyped `vector` column and the
    # per-dimension expression index alike, with no adapter-specific typing.
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"
