"""The files sessions touched (`session_files`), read back for a file's history."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from librarian_dagster.core.store.pool import Database
from librarian_dagster.core.store.queries import VISIBLE, ours, vector_literal, visible


class Files:
    """Reads of `session_files` and of the sessions that touched them, over the shared pool
    (written with each memory by `Memories.replace_memory`)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def touching(
        self,
        names: Sequence[str],
        include_private: bool,
        leave_out: str | None = None,
        viewer: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every touch of a file with one of these names (`file_name`), with its session's facts
        and digest, newest session first; `leave_out`: a session never to return (the asker).
        Private sessions as `VISIBLE` says (`include_private`, `viewer`)."""
        with self._db.connection() as conn:
            return conn.execute(
                ours(f"""
                SELECT f.session_id, f.path, f.edits, f.reads, m.project, m.agent, m.person,
                       m.repository, m.cwd, m.git_branch, m.started_at,
                       COALESCE(m.ended_at, m.started_at) AS date,
                       m.title, m.summary, m.domain, m.tags, m.files, m.digest
                FROM session_files f JOIN memories m USING (session_id)
                WHERE f.name = ANY(%(names)s) AND {VISIBLE}
                      AND m.session_id IS DISTINCT FROM %(leave_out)s
                ORDER BY COALESCE(m.ended_at, m.started_at, m.ingested_at) DESC, m.session_id
                """),
                {
                    "names": list(names),
                    "leave_out": leave_out,
                    **visible(include_private, viewer),
                },
            ).fetchall()

    def worked_in(self) -> list[str]:
        """Every folder a stored session ran in, as its transcript wrote it."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT cwd FROM memories WHERE cwd IS NOT NULL AND cwd <> ''"
            ).fetchall()
        return [r["cwd"] for r in rows]

    def repositories(self) -> list[tuple[str, str]]:
        """(folder, repository remote) of every stored session that named its remote."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT cwd, repository FROM memories"
                " WHERE cwd IS NOT NULL AND cwd <> '' AND repository IS NOT NULL"
            ).fetchall()
        return [(r["cwd"], r["repository"]) for r in rows]

    def earliest(self) -> datetime | None:
        """When the oldest stored session began: how far back a file's git history matters."""
        with self._db.connection() as conn:
            row = conn.execute("SELECT MIN(started_at) AS first FROM memories").fetchone()
        return row["first"] if row else None

    def closeness(
        self, sessions: Sequence[str], vector: Sequence[float], model: str
    ) -> dict[str, float]:
        """Each session's cosine to `vector`, by its mean vector made with `model`."""
        dim = len(vector)
        with self._db.connection() as conn:
            rows = conn.execute(
                ours(f"""
                SELECT session_id,
                       1 - (embedding::vector({dim}) <=> %(vector)s::vector({dim})) AS cosine
                FROM session_vectors
                WHERE session_id = ANY(%(sessions)s) AND embedding_model = %(model)s
                      AND embedding_dim = {dim}
                """),
                {"sessions": list(sessions), "vector": vector_literal(vector), "model": model},
            ).fetchall()
        return {r["session_id"]: float(r["cosine"]) for r in rows}
