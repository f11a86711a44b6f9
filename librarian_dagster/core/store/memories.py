"""The memories: each session's row and its chunks, written in one transaction, and read back.

What a row holds is defined once, by the models in `core/store/rows.py`: the INSERT and SELECT
lists here are built from their fields, and rows come back as those models. Every write keeps the
statistics BM25 is scored from (`chunk_stats`, `lexeme_df`) and each session's mean vector
(`session_vectors`) in the same transaction as its chunks, so a search never sees them disagree.
"""

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from librarian_dagster.core.capture.touches import FileTouch, file_name
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.store.pool import Database
from librarian_dagster.core.store.queries import (
    NO_FILTERS,
    VISIBLE,
    SearchFilters,
    filter_sql,
    ours,
    visible,
)
from librarian_dagster.core.store.rows import (
    MemoryRecord,
    SessionDigest,
    SessionInfo,
    SessionList,
    StoreStats,
)


@dataclass(frozen=True)
class ChunkRecord:
    section: str
    position: int
    text: str
    embedding: Sequence[float]


@dataclass(frozen=True)
class ProjectCount:
    project: str
    sessions: int
    last_active: datetime


@dataclass(frozen=True)
class AgentCount:
    agent: str
    sessions: int


@dataclass(frozen=True)
class PersonCount:
    person: str
    sessions: int


@dataclass(frozen=True)
class IndexedChunk:
    section: str
    position: int
    text: str


class InvalidCursor(ValueError):
    """A listing cursor that `list_sessions` did not hand out."""


# The INSERT of a memory, one named parameter per field of MemoryRecord.
_MEMORY_COLUMNS = tuple(MemoryRecord.model_fields)
_INSERT_MEMORY = sql.SQL("INSERT INTO memories ({columns}) VALUES ({values})").format(
    columns=sql.SQL(", ").join(map(sql.Identifier, _MEMORY_COLUMNS)),
    values=sql.SQL(", ").join(map(sql.Placeholder, _MEMORY_COLUMNS)),
)
_CHUNK_COUNT = sql.SQL(
    "(SELECT COUNT(*) FROM indexed_chunks c WHERE c.session_id = m.session_id) AS chunk_count"
)

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


class Memories:
    """Writes and reads of the memories, over the shared pool."""

    def __init__(self, database: Database) -> None:
        self._db = database

    # -- writes ---------------------------------------------------------------------------------

    def replace_memory(
        self,
        memory: MemoryRecord,
        chunks: Sequence[ChunkRecord],
        touches: Sequence[FileTouch] = (),
    ) -> None:
        """Write a session's memory, all its chunks and the files it touched in one transaction,
        replacing any older one.

        A crash anywhere leaves the previous memory whole: never a half-written memory.
        """
        dims = {len(c.embedding) for c in chunks}
        if len(dims) > 1:
            raise ValueError(f"chunks of one memory must share a dimension, got {sorted(dims)}")
        with self._db.connection() as conn, conn.transaction():
            # One writer of a session at a time; writers of other sessions go on beside it.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (memory.session_id,)
            )
            for dim in dims:
                _ensure_vector_index(conn, dim)
            if _has_chunks(conn, memory.session_id):
                _count_chunks(conn, memory.session_id, -1)
            # A new session takes the BM25 statistics' lock (`_count_chunks`) only at the end:
            # the inserts before it, most of a write (the HNSW and GIN indexes), run beside
            # another session's (decision 0044).
            conn.execute("DELETE FROM memories WHERE session_id = %s", (memory.session_id,))
            memory = _of_known_repository(conn, memory)
            params = memory.model_dump()
            # A dict has no default PostgreSQL type in psycopg: name the column's.
            params["digest"] = Jsonb(params["digest"])
            conn.execute(_INSERT_MEMORY, params)
            if chunks:
                _insert_chunks(conn, memory, chunks)
            if touches:
                _insert_touches(conn, memory.session_id, touches)
            _count_chunks(conn, memory.session_id, +1)

    def delete_memory(self, session_id: str) -> bool:
        with self._db.connection() as conn, conn.transaction():
            _count_chunks(conn, session_id, -1)
            cur = conn.execute("DELETE FROM memories WHERE session_id = %s", (session_id,))
            return cur.rowcount > 0

    def recount_from_chunks(self) -> None:
        """Count the BM25 statistics and make the sessions' mean vectors again from every chunk.

        `replace_memory` and `delete_memory` keep them as they write; a bulk load that goes
        around them (COPY) calls this once afterwards.
        """
        with self._db.connection() as conn, conn.transaction():
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

    # -- reads ----------------------------------------------------------------------------------

    def memory_record(self, session_id: str) -> MemoryRecord | None:
        """A session's memory as the write path stored it (digest provenance included)."""
        query = sql.SQL("SELECT {fields} FROM memories m WHERE m.session_id = %s").format(
            fields=_select_fields(MemoryRecord)
        )
        with self._db.connection() as conn, conn.cursor(row_factory=class_row(MemoryRecord)) as cur:
            return cur.execute(query, (session_id,)).fetchone()

    def remembered(self, session_ids: Sequence[str]) -> set[str]:
        """Which of these sessions have a memory."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id FROM memories WHERE session_id = ANY(%s)", (list(session_ids),)
            ).fetchall()
        return {r["session_id"] for r in rows}

    def get_memory(
        self, session_id: str, include_private: bool = False, viewer: str | None = None
    ) -> SessionDigest | None:
        """One session's digest; a private one is None unless `include_private` (and then, with
        a `viewer`, only the viewer's own), as if absent."""
        query = sql.SQL(
            "SELECT {fields} FROM memories m WHERE m.session_id = %(session_id)s AND {visible}"
        ).format(fields=_select_fields(SessionDigest), visible=sql.SQL(VISIBLE))
        params = {"session_id": session_id, **visible(include_private, viewer)}
        with (
            self._db.connection() as conn,
            conn.cursor(row_factory=class_row(SessionDigest)) as cur,
        ):
            return cur.execute(query, params).fetchone()

    def list_sessions(
        self,
        filters: SearchFilters = NO_FILTERS,
        limit: int = 20,
        cursor: str | None = None,
    ) -> SessionList:
        """Sessions newest first, `limit` at a time; `cursor` is the previous page's next_cursor.

        Raises InvalidCursor for a cursor this method did not hand out.
        """
        where, params = filter_sql(filters)
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
        with self._db.connection() as conn:
            rows = conn.execute(query, params).fetchall()
        page = rows[:limit]
        last = page[-1] if len(rows) > limit else None
        return SessionList(
            sessions=[SessionInfo.model_validate(r) for r in page],
            next_cursor=_encode_cursor(last["sort_date"], last["session_id"]) if last else None,
        )

    def stats(self) -> StoreStats:
        with self._db.connection() as conn, conn.cursor(row_factory=class_row(StoreStats)) as cur:
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

    def stored_vectors(self, session_id: str, model: str, dimension: int) -> dict[str, list[float]]:
        """A session's stored chunk vectors of one embedding space, by chunk text.

        An unchanged chunk keeps its vector when its session is written again: re-ingesting an
        unchanged session calls no embedding service.
        """
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT text, embedding FROM indexed_chunks"
                " WHERE session_id = %s AND embedding_model = %s AND embedding_dim = %s",
                (session_id, model, dimension),
            ).fetchall()
        return {r["text"]: [float(x) for x in r["embedding"].to_list()] for r in rows}

    def exchange_texts(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        """These sessions' exchange windows, in order, by session (those that have any)."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id, text FROM indexed_chunks WHERE section = %s"
                " AND session_id = ANY(%s) ORDER BY session_id, position",
                (EXCHANGE, list(session_ids)),
            ).fetchall()
        texts: dict[str, list[str]] = {}
        for r in rows:
            texts.setdefault(r["session_id"], []).append(r["text"])
        return texts

    def projects(
        self, include_private: bool = False, limit: int = 500, viewer: str | None = None
    ) -> list[ProjectCount]:
        """The projects with remembered sessions, the most recently active first."""
        with (
            self._db.connection() as conn,
            conn.cursor(row_factory=class_row(ProjectCount)) as cur,
        ):
            return cur.execute(
                ours(f"""
                SELECT project, COUNT(*) AS sessions,
                       MAX(COALESCE(ended_at, ingested_at)) AS last_active
                FROM memories m WHERE {VISIBLE}
                GROUP BY project ORDER BY last_active DESC, project LIMIT %(limit)s
                """),
                {**visible(include_private, viewer), "limit": limit},
            ).fetchall()

    def agents(self, include_private: bool = False, viewer: str | None = None) -> list[AgentCount]:
        """The agents whose sessions are remembered, with how many each, the most first."""
        counted = self._counts("agent", include_private, viewer)
        return [AgentCount(name, sessions) for name, sessions in counted]

    def people(self, include_private: bool = False, viewer: str | None = None) -> list[PersonCount]:
        """The people whose sessions are remembered, with how many each, the most first."""
        counted = self._counts("person", include_private, viewer)
        return [PersonCount(name, sessions) for name, sessions in counted]

    def _counts(
        self, column: str, include_private: bool, viewer: str | None
    ) -> list[tuple[str, int]]:
        query = sql.SQL(
            "SELECT m.{column} AS name, COUNT(*) AS sessions FROM memories m WHERE {visible}"
            " AND m.{column} IS NOT NULL GROUP BY m.{column} ORDER BY sessions DESC, m.{column}"
        ).format(column=sql.Identifier(column), visible=sql.SQL(VISIBLE))
        with self._db.connection() as conn:
            rows = conn.execute(query, visible(include_private, viewer)).fetchall()
        return [(r["name"], r["sessions"]) for r in rows]

    def agents_held(
        self, agents: Sequence[str], include_private: bool = False, viewer: str | None = None
    ) -> list[str]:
        """Those of `agents` with a remembered session, in their order: an index probe each,
        where counting them all (`agents`) reads every row."""
        with self._db.connection() as conn:
            rows = conn.execute(
                ours(
                    "SELECT a.agent FROM unnest(%(agents)s::text[]) WITH ORDINALITY"
                    " AS a (agent, place) WHERE EXISTS (SELECT 1 FROM memories m"
                    f" WHERE m.agent = a.agent AND {VISIBLE}) ORDER BY a.place"
                ),
                {"agents": list(agents), **visible(include_private, viewer)},
            ).fetchall()
        return [r["agent"] for r in rows]

    def indexed_chunks(self, session_id: str) -> list[IndexedChunk]:
        """What search reads of one session: its chunks, by section and place."""
        with (
            self._db.connection() as conn,
            conn.cursor(row_factory=class_row(IndexedChunk)) as cur,
        ):
            return cur.execute(
                "SELECT section, position, text FROM indexed_chunks WHERE session_id = %s"
                " ORDER BY section, position",
                (session_id,),
            ).fetchall()

    def top_tags(self, limit: int = 30) -> list[str]:
        """The most used tags, most used first: offered to the LLM so the vocabulary converges."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT tag, COUNT(*) AS n FROM memories, unnest(tags) AS tag"
                " GROUP BY tag ORDER BY n DESC, tag LIMIT %s",
                (limit,),
            ).fetchall()
        return [r["tag"] for r in rows]

    def last_written(self) -> dict[str, datetime]:
        """Project -> when a memory of it was last written: what `library_sensor` watches."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT project, max(ingested_at) AS last FROM memories GROUP BY project"
            ).fetchall()
        return {r["project"]: r["last"] for r in rows}


def _of_known_repository(conn: psycopg.Connection[Any], memory: MemoryRecord) -> MemoryRecord:
    """One project across a person's sessions of one folder, whenever its remote is known: a
    memory written with its repository gives it to that person's earlier sessions of the same
    folder that had none (pushed before the laptop could read a remote); one written without
    takes the repository such a session named."""
    if not memory.cwd:
        return memory
    where = {"cwd": memory.cwd, "person": memory.person, "session_id": memory.session_id}
    if memory.repository:
        conn.execute(
            "UPDATE memories SET repository = %(repository)s, project = %(project)s"
            " WHERE repository IS NULL AND cwd = %(cwd)s"
            " AND person IS NOT DISTINCT FROM %(person)s AND session_id <> %(session_id)s",
            {**where, "repository": memory.repository, "project": memory.project},
        )
        return memory
    known = conn.execute(
        "SELECT repository, project FROM memories WHERE repository IS NOT NULL"
        " AND cwd = %(cwd)s AND person IS NOT DISTINCT FROM %(person)s"
        " ORDER BY ingested_at DESC LIMIT 1",
        where,
    ).fetchone()
    if known is None:
        return memory
    return memory.model_copy(
        update={"repository": known["repository"], "project": known["project"]}
    )


def _ensure_vector_index(conn: psycopg.Connection[Any], dim: int) -> None:
    # Partial HNSW indexes per dimension and layer, and for the sessions' mean vectors
    # (migrations 4 and 9 define them, in one place each, and name them as below).
    # Looked up first: `CREATE INDEX IF NOT EXISTS` locks the table (SHARE) before it finds the
    # index there, until the transaction ends, and two writers of sessions that held it each
    # waited for the other's inserts: a deadlock.
    names = [f"indexed_chunks_{dim}_exchange_hnsw", f"indexed_chunks_{dim}_bullets_hnsw",
             f"session_vectors_{dim}_hnsw"]  # fmt: skip
    held = conn.execute(
        "SELECT bool_and(to_regclass(n) IS NOT NULL) AS held FROM unnest(%s::text[]) n", (names,)
    ).fetchone()
    if held and held["held"]:
        return
    # A new dimension: one writer makes its indexes, the others wait for it.
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('librarian vector indexes', 0))")
    conn.execute("SELECT librarian_ensure_vector_indexes(%s)", (int(dim),))
    conn.execute("SELECT librarian_ensure_session_vector_index(%s)", (int(dim),))


def _insert_chunks(
    conn: psycopg.Connection[Any], memory: MemoryRecord, chunks: Sequence[ChunkRecord]
) -> None:
    """The memory's chunks, and the session's mean vector made from them."""
    with conn.cursor() as cur:
        # Vectors in pgvector's binary form (its adapter, `configure`): neither side prints or
        # parses 384 decimals a chunk.
        cur.executemany(
            """
            INSERT INTO indexed_chunks (session_id, section, position, text,
                embedding, embedding_model, embedding_dim)
            VALUES (%s, %s, %s, %s, %b, %s, %s)
            """,
            [
                (
                    memory.session_id, c.section, c.position, c.text,
                    np.asarray(c.embedding, dtype=np.float32),
                    memory.embedding_model, len(c.embedding),
                )
                for c in chunks
            ],
        )  # fmt: skip
    conn.execute(_WRITE_SESSION_VECTORS, {"session": memory.session_id})


def _insert_touches(
    conn: psycopg.Connection[Any], session_id: str, touches: Sequence[FileTouch]
) -> None:
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO session_files (session_id, path, name, edits, reads)"
            " VALUES (%s, %s, %s, %s, %s)",
            [(session_id, t.path, file_name(t.path), t.edits, t.reads) for t in touches],
        )


def _has_chunks(conn: psycopg.Connection[Any], session_id: str) -> bool:
    found = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM indexed_chunks WHERE session_id = %s) AS held",
        (session_id,),
    ).fetchone()
    return bool(found and found["held"])


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
    if sign < 0:
        # A word no chunk holds any more is not kept as a row: a forgotten session's names
        # must not stay readable in the statistics.
        conn.execute(
            """
            DELETE FROM lexeme_df WHERE df <= 0 AND lexeme IN (
                SELECT u.lexeme FROM indexed_chunks c, unnest(c.text_search) u
                WHERE c.session_id = %(session)s)
            """,
            params,
        )


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
