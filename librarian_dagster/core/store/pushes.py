"""What the server records of pushed sessions (`POST /push`) and of the machines that push them.

A session id belongs to the person who first pushed it: a second person's push of the same id is
refused, never staged over theirs nor merged into it (`Owned`); a session forgotten here (on the
skip list) is refused too (`Forgotten`): forgetting it from the server is not undone by the
laptop's next push. One push of a session holds its
row's lock (an advisory lock on its id) from the check to the record, so two pushes of one
session, from any replicas of the server, are staged one after the other; pushes of other
sessions go on beside it.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from librarian_dagster.core.store.pool import Database

__all__ = ["Claim", "Forgotten", "Owned", "PushMachine", "PushedSession", "Pushes"]


class Owned(Exception):
    """The session id is another person's."""

    def __init__(self, person: str) -> None:
        super().__init__(person)
        self.person = person


class Forgotten(Exception):
    """The session was forgotten on this server (it is on the skip list): not taken again."""


@dataclass(frozen=True)
class PushedSession:
    session_id: str
    agent: str
    person: str
    machine: str
    sha256: str | None
    bytes: int
    remote: str | None
    folder: str | None
    private: bool
    pushed_at: datetime


@dataclass(frozen=True)
class PushMachine:
    person: str
    machine: str
    first_push: datetime
    last_push: datetime


@dataclass
class Claim:
    """A push's hold on one session id, for as long as its block runs."""

    conn: psycopg.Connection[Any]
    sha256: str | None
    """What was staged last (None: never)."""


class Pushes:
    """The `pushed_sessions` and `push_machines` tables, over the shared pool."""

    def __init__(self, database: Database) -> None:
        self._db = database

    @contextmanager
    def claim(self, session_id: str, person: str) -> Iterator[Claim]:
        """Hold `session_id` for `person` (Owned if it is another person's) while the block
        stages it; `record` within the block writes what was staged."""
        with self._db.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (session_id,))
            if conn.execute("SELECT 1 FROM skip_list WHERE entry = %s", (session_id,)).fetchone():
                raise Forgotten(session_id)
            row = conn.execute(
                "SELECT person, sha256 FROM pushed_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            if row is not None and row["person"] != person:
                raise Owned(row["person"])
            if row is None:
                held = conn.execute(
                    "SELECT person FROM memories WHERE session_id = %s AND person IS NOT NULL",
                    (session_id,),
                ).fetchone()
                if held is not None and held["person"] != person:
                    raise Owned(held["person"])
            yield Claim(conn, row["sha256"] if row else None)

    def record(self, claim: Claim, session: PushedSession) -> None:
        claim.conn.execute(
            """
            INSERT INTO pushed_sessions (session_id, agent, person, machine, sha256, bytes,
                                         remote, folder, private, pushed_at)
            VALUES (%(session_id)s, %(agent)s, %(person)s, %(machine)s, %(sha256)s, %(bytes)s,
                    %(remote)s, %(folder)s, %(private)s, %(pushed_at)s)
            ON CONFLICT (session_id) DO UPDATE SET agent = EXCLUDED.agent,
                machine = EXCLUDED.machine, sha256 = EXCLUDED.sha256, bytes = EXCLUDED.bytes,
                remote = COALESCE(EXCLUDED.remote, pushed_sessions.remote),
                folder = EXCLUDED.folder, private = EXCLUDED.private,
                pushed_at = EXCLUDED.pushed_at
            """,
            session.__dict__,
        )

    def machine_pushed(self, person: str, machine: str) -> None:
        """`machine` of `person` pushed now (a session, or found nothing new to push)."""
        with self._db.connection() as conn:
            conn.execute(
                """
                INSERT INTO push_machines (person, machine) VALUES (%s, %s)
                ON CONFLICT (person, machine) DO UPDATE SET last_push = now()
                """,
                (person, machine),
            )

    def pushed(self, session_ids: Sequence[str]) -> dict[str, PushedSession]:
        """The push records of these sessions (those pushed), by id."""
        if not session_ids:
            return {}
        rows = class_row(PushedSession)
        with self._db.connection() as conn, conn.cursor(row_factory=rows) as cur:
            cur.execute(
                "SELECT session_id, agent, person, machine, sha256, bytes, remote, folder, "
                "private, pushed_at FROM pushed_sessions WHERE session_id = ANY(%s)",
                (list(session_ids),),
            )
            return {row.session_id: row for row in cur.fetchall()}

    def recorded(self) -> dict[str, str | None]:
        """Every pushed session's id, with the SHA-256 of the bytes last recorded staged."""
        with self._db.connection() as conn:
            rows = conn.execute("SELECT session_id, sha256 FROM pushed_sessions").fetchall()
        return {r["session_id"]: r["sha256"] for r in rows}

    def machines(self) -> list[PushMachine]:
        with self._db.connection() as conn, conn.cursor(row_factory=class_row(PushMachine)) as cur:
            cur.execute(
                "SELECT person, machine, first_push, last_push FROM push_machines "
                "ORDER BY person, machine"
            )
            return cur.fetchall()

    def forget(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Drop the push records of these sessions; returns {session id: agent} of those there."""
        if not session_ids:
            return {}
        with self._db.connection() as conn:
            rows = conn.execute(
                "DELETE FROM pushed_sessions WHERE session_id = ANY(%s) "
                "RETURNING session_id, agent",
                (list(session_ids),),
            ).fetchall()
        return {row["session_id"]: row["agent"] for row in rows}
