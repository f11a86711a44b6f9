"""What the store holds, read for the alerts and the asset checks (no writes here).

Kept apart from the memories and search: these are a monitor's queries, one round trip each, on
the store's pool, so a gap tick or a check costs milliseconds.
"""

from dataclasses import dataclass

from librarian_dagster.core.store.pool import Database


def ingested_at(database: Database) -> dict[str, float]:
    """Session id -> when its memory was written (seconds since the epoch)."""
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT session_id, EXTRACT(EPOCH FROM ingested_at)::float8 AS at FROM memories"
        ).fetchall()
    return {r["session_id"]: r["at"] for r in rows}


def requested_at(database: Database) -> dict[str, tuple[str, float]]:
    """Session id -> (fingerprint, when) the sessions sensor or `librarian ingest` recorded it."""
    with database.connection() as conn:
        rows = conn.execute(
            "SELECT session_id, fingerprint, EXTRACT(EPOCH FROM recorded_at)::float8 AS at"
            " FROM session_sources"
        ).fetchall()
    return {r["session_id"]: (r["fingerprint"], r["at"]) for r in rows}


@dataclass(frozen=True)
class SessionIntegrity:
    """One session's rows as stored, for the checks on the `memory` asset."""

    memories: int
    """Rows in `memories` for the session: exactly one after a write."""
    chunks_by_section: dict[str, int]
    dimensions: dict[int, int]
    """Declared `embedding_dim` -> chunks; a session's vectors share one dimension."""
    mismatched_vectors: int
    """Chunks whose stored vector's length differs from their declared `embedding_dim`."""
    position_gaps: int
    """Sections whose positions are not 0..n-1: rows left from an older, longer version."""
    indexed_dimensions: frozenset[int]
    """Dimensions that have their HNSW index (one partial index per dimension)."""
    orphan_chunks: int
    """Chunks in the whole store whose session has no memory row."""

    @property
    def chunks(self) -> int:
        return sum(self.chunks_by_section.values())


def session_integrity(database: Database, session_id: str) -> SessionIntegrity:
    with database.connection() as conn:
        memories = conn.execute(
            "SELECT COUNT(*) AS n FROM memories WHERE session_id = %s", (session_id,)
        ).fetchone()
        sections = conn.execute(
            """
            SELECT section, COUNT(*) AS n, MIN(position) AS lo, MAX(position) AS hi
            FROM indexed_chunks WHERE session_id = %s GROUP BY section
            """,
            (session_id,),
        ).fetchall()
        dims = conn.execute(
            """
            SELECT embedding_dim AS dim, COUNT(*) AS n,
                   COUNT(*) FILTER (WHERE vector_dims(embedding) <> embedding_dim) AS bad
            FROM indexed_chunks WHERE session_id = %s GROUP BY embedding_dim
            """,
            (session_id,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'indexed_chunks'"
            " AND indexname LIKE 'indexed\\_chunks\\_%%\\_hnsw'"
        ).fetchall()
        orphans = conn.execute(
            "SELECT COUNT(*) AS n FROM indexed_chunks c"
            " WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.session_id = c.session_id)"
        ).fetchone()
    # A dimension is indexed when both its layers are (store migration 4:
    # indexed_chunks_<dim>_exchange_hnsw and indexed_chunks_<dim>_bullets_hnsw).
    layers: dict[int, set[str]] = {}
    for row in indexes:
        dim, _, layer = row["indexname"].removeprefix("indexed_chunks_").partition("_")
        if dim.isdigit():
            layers.setdefault(int(dim), set()).add(layer)
    indexed = {d for d, found in layers.items() if {"exchange_hnsw", "bullets_hnsw"} <= found}
    return SessionIntegrity(
        memories=memories["n"] if memories else 0,
        chunks_by_section={r["section"]: r["n"] for r in sections},
        dimensions={r["dim"]: r["n"] for r in dims},
        mismatched_vectors=sum(r["bad"] for r in dims),
        position_gaps=sum(1 for r in sections if (r["lo"], r["hi"]) != (0, r["n"] - 1)),
        indexed_dimensions=frozenset(indexed),
        orphan_chunks=orphans["n"] if orphans else 0,
    )
