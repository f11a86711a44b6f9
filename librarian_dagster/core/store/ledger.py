"""The pipeline's bookkeeping: where each session's files are, what is already held of them, the
skip list, the tokens spent on model calls, the digests that wait for tomorrow's budget and the
forgotten sessions' Dagster records still to delete.

None of it is memory: the sensor, the stages and the `librarian` commands keep it so that no
session is asked for twice, none kept out is ingested, and no day spends more than its budget.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from psycopg.rows import class_row

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.skips import SkipList, before_entry
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN
from librarian_dagster.core.store.files import Files
from librarian_dagster.core.store.pool import Database


@dataclass(frozen=True)
class RememberedSource:
    """A remembered session's files, with what consolidation needs to know of it first."""

    files: SessionFiles
    cwd: str | None
    started_at: datetime | None
    shared: bool
    """Neither private to its person nor of the `private` domain: it may be cited in notes,
    which are committed with the repository."""


@dataclass(frozen=True)
class SkipEntry:
    entry: str
    """A session id, or `before:DATE`."""
    added_at: datetime


class Ledger:
    """The bookkeeping tables, over the shared pool."""

    def __init__(self, database: Database) -> None:
        self._db = database

    # -- where sessions are, and what is held of them --------------------------------------------

    def record_sources(self, sessions: Sequence[tuple[SessionFiles, str]]) -> None:
        """Remember where each (session files, fingerprint) lives; the newest record wins."""
        if not sessions:
            return
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                """
                INSERT INTO session_sources
                    (session_id, main_path, subagent_paths, fingerprint, agent, version)
                VALUES (%s, %s, %s, %s, %s, %s)
                ON CONFLICT (session_id) DO UPDATE SET main_path = EXCLUDED.main_path,
                    subagent_paths = EXCLUDED.subagent_paths,
                    fingerprint = EXCLUDED.fingerprint, agent = EXCLUDED.agent,
                    version = EXCLUDED.version, recorded_at = now()
                """,
                [
                    (
                        files.session_id,
                        str(files.main) if files.main else None,
                        [str(p) for p in files.subagents],
                        fingerprint,
                        files.agent,
                        files.version,
                    )
                    for files, fingerprint in sessions
                ],
            )

    def known_cwds(self) -> list[str]:
        """Every folder a stored session ran in: a transcript that names none (Gemini CLI's keep
        a hash of it) is placed by these (`parse_session`'s `known_cwds`)."""
        return Files(self._db).worked_in()

    def session_source(self, session_id: str) -> SessionFiles | None:
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT main_path, subagent_paths, agent, version FROM session_sources"
                " WHERE session_id = %s",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        return SessionFiles(
            session_id=session_id,
            main=Path(row["main_path"]) if row["main_path"] else None,
            subagents=tuple(Path(p) for p in row["subagent_paths"]),
            agent=row["agent"],
            version=row["version"],
        )

    def remembered_sources(
        self, project: str, before: datetime | None = None
    ) -> list[RememberedSource]:
        """The remembered sessions of `project` (begun before `before`) and their files, oldest
        first."""
        with self._db.connection() as conn:
            rows = conn.execute(
                """
                SELECT m.session_id, m.cwd, m.started_at, s.main_path, s.subagent_paths,
                       s.agent, s.version, NOT m.private AND m.domain <> %s AS shared
                FROM memories m JOIN session_sources s USING (session_id)
                WHERE m.project = %s AND (%s::timestamptz IS NULL OR m.started_at < %s)
                ORDER BY m.started_at, m.session_id
                """,
                (PRIVATE_DOMAIN, project, before, before),
            ).fetchall()
        return [
            RememberedSource(
                SessionFiles(
                    session_id=row["session_id"],
                    main=Path(row["main_path"]) if row["main_path"] else None,
                    subagents=tuple(Path(p) for p in row["subagent_paths"]),
                    agent=row["agent"],
                    version=row["version"],
                ),
                cwd=row["cwd"],
                started_at=row["started_at"],
                shared=row["shared"],
            )
            for row in rows
        ]

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
        with self._db.connection() as conn:
            return [row["session_id"] for row in conn.execute(query, params).fetchall()]

    def record_nothing_to_remember(self, session_id: str, fingerprint: str) -> None:
        """The session's files at `fingerprint` hold nothing to remember (empty, summary-only)."""
        with self._db.connection() as conn:
            conn.execute(
                "UPDATE session_sources SET nothing_at_fingerprint = %s WHERE session_id = %s",
                (fingerprint, session_id),
            )

    def nothing_to_remember(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Session id -> the fingerprint its files had when they held nothing to remember."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id, nothing_at_fingerprint FROM session_sources"
                " WHERE session_id = ANY(%s) AND nothing_at_fingerprint IS NOT NULL",
                (list(session_ids),),
            ).fetchall()
        return {row["session_id"]: row["nothing_at_fingerprint"] for row in rows}

    def held_fingerprints(self) -> set[tuple[str, str]]:
        """(session id, fingerprint) of transcript files whose outcome the store already holds.

        A memory made from them, or the note that they hold nothing to remember: asking for
        such a session again while its files are unchanged would only repeat the work.
        """
        with self._db.connection() as conn:
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

    def forget_sources(self, session_ids: Sequence[str]) -> None:
        """Drop what the ledger knows of these sessions: where their files were, what they held
        last time, a deferral (`librarian forget`)."""
        with self._db.connection() as conn, conn.transaction():
            conn.execute(
                "DELETE FROM session_sources WHERE session_id = ANY(%s)", (list(session_ids),)
            )
            conn.execute(
                "DELETE FROM deferred_digests WHERE session_id = ANY(%s)", (list(session_ids),)
            )

    def queue_run_history(self, session_ids: Sequence[str]) -> None:
        """Forgotten sessions whose Dagster runs and partitions are still to delete."""
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO run_history_to_forget (session_id) VALUES (%s)"
                " ON CONFLICT (session_id) DO NOTHING",
                [(s,) for s in session_ids],
            )

    def queued_run_history(self) -> list[str]:
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id FROM run_history_to_forget ORDER BY forgotten_at, session_id"
            ).fetchall()
        return [r["session_id"] for r in rows]

    def run_history_forgotten(self, session_ids: Sequence[str]) -> None:
        with self._db.connection() as conn, conn.transaction():
            conn.execute(
                "DELETE FROM run_history_to_forget WHERE session_id = ANY(%s)",
                (list(session_ids),),
            )

    # -- the skip list --------------------------------------------------------------------------

    def skip_list(self) -> SkipList:
        """The skip list as the sensor, ingest and backfills apply it (core/capture/skips.py)."""
        with self._db.connection() as conn:
            rows = conn.execute("SELECT entry, skip_before FROM skip_list").fetchall()
        befores = [r["skip_before"] for r in rows if r["skip_before"] is not None]
        return SkipList(
            session_ids=frozenset(r["entry"] for r in rows if r["skip_before"] is None),
            # Every session before the latest date is before the earlier ones too.
            before=max(befores) if befores else None,
        )

    def skip_entries(self) -> list[SkipEntry]:
        with self._db.connection() as conn, conn.cursor(row_factory=class_row(SkipEntry)) as cur:
            return cur.execute(
                "SELECT entry, added_at FROM skip_list ORDER BY added_at, entry"
            ).fetchall()

    def skip_sessions(self, session_ids: Sequence[str]) -> None:
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO skip_list (entry) VALUES (%s) ON CONFLICT (entry) DO NOTHING",
                [(s,) for s in session_ids],
            )

    def skip_before(self, moment: datetime) -> str:
        """Skip every session last active before `moment`; returns the list's entry for it."""
        entry = before_entry(moment)
        with self._db.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO skip_list (entry, skip_before) VALUES (%s, %s)"
                " ON CONFLICT (entry) DO NOTHING",
                (entry, moment),
            )
        return entry

    def remove_skip(self, entry: str) -> bool:
        """Take one entry (a session id or `before:DATE`) off the list; False if it was not on."""
        with self._db.connection() as conn, conn.transaction():
            return conn.execute("DELETE FROM skip_list WHERE entry = %s", (entry,)).rowcount > 0

    # -- tokens spent, and digests deferred to a later day's budget -----------------------------

    def record_usage(self, model: str, input_tokens: int, output_tokens: int, calls: int) -> None:
        """Add tokens spent today (UTC) on `model`."""
        with self._db.connection() as conn, conn.transaction():
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

    def tokens_spent_today(self) -> int:
        """Tokens (in + out) spent today (UTC) on every model."""
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) AS n FROM llm_usage"
                " WHERE day = (now() AT TIME ZONE 'UTC')::date"
            ).fetchone()
        return int(row["n"]) if row else 0

    def defer_digest(self, session_id: str) -> None:
        """Remember that this session's digest waits for tomorrow's (UTC) token budget."""
        with self._db.connection() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO deferred_digests (session_id, deferred_on)"
                " VALUES (%s, (now() AT TIME ZONE 'UTC')::date)"
                " ON CONFLICT (session_id) DO UPDATE SET deferred_on = EXCLUDED.deferred_on",
                (session_id,),
            )

    def clear_deferral(self, session_id: str) -> None:
        with self._db.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM deferred_digests WHERE session_id = %s", (session_id,))

    def deferred(self, session_ids: Sequence[str]) -> set[str]:
        """Which of these sessions' digests wait for a later day's token budget."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id FROM deferred_digests WHERE session_id = ANY(%s)",
                (list(session_ids),),
            ).fetchall()
        return {r["session_id"] for r in rows}

    def due_deferrals(self) -> list[str]:
        """Sessions deferred on an earlier day (UTC): their digest may be tried again now."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT session_id FROM deferred_digests"
                " WHERE deferred_on < (now() AT TIME ZONE 'UTC')::date ORDER BY session_id"
            ).fetchall()
        return [r["session_id"] for r in rows]
