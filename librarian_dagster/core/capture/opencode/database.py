"""OpenCode's SQLite database (`opencode.db`, or `opencode-<channel>.db`), read only.

Tables `project`, `session`, `message` and `part` (packages/opencode/src/session/session.sql.ts;
`message.data` and `part.data` are the JSON of a message's info and a part, less their ids).
OpenCode writes it while it runs (WAL journal, its own busy timeout of 5 s), so it is opened
read-only (`mode=ro`), with a short busy timeout, and each read is one short read transaction:
a database locked past the timeout is a fault of the moment (`session.UNREADABLE`), taken again
later, never an exception.

One database holds every session, so a session's `SessionFiles.version` says when it changed:
the newest `time_updated` and the number of messages and parts, over it and its child sessions.

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.opencode.thread import Thread

__all__ = [
    "BUSY_SECONDS",
    "database_head",
    "database_sessions",
    "is_database",
    "is_sqlite",
    "load_database",
]

BUSY_SECONDS = 1.0
"""How long a read waits for a writer's lock before the session is left for later."""
_MAGIC = b"SQLite format 3\x00"
_TABLES = {"session", "message", "part"}
AGENT = "opencode"


@contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_SECONDS, isolation_level=None)
    try:
        # query_only: even a bug here cannot write to OpenCode's database.
        conn.execute("PRAGMA query_only = ON")
        yield conn
    finally:
        conn.close()


def is_sqlite(path: Path) -> bool:
    """Whether the file begins as a SQLite database does (its header alone, no lock taken)."""
    try:
        with Path(path).open("rb") as fh:
            return fh.read(16) == _MAGIC
    except OSError:
        return False


def is_database(path: Path) -> bool:
    """Whether the file is a SQLite database with OpenCode's session, message and part tables."""
    if not is_sqlite(path):
        return False
    try:
        with _connect(path) as conn:
            names = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
    except (OSError, sqlite3.Error):
        return False
    return names >= _TABLES


def _roots(parents: dict[str, str | None]) -> dict[str, str]:
    """Each session's topmost ancestor in the database (itself where its parent is not there)."""
    roots: dict[str, str] = {}
    for sid in parents:
        seen = {sid}
        top = sid
        parent = parents.get(top)
        while parent and parent in parents and parent not in seen:
            seen.add(parent)
            top = parent
            parent = parents.get(top)
        roots[sid] = top
    return roots


def _ms(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def database_sessions(path: Path) -> list[SessionFiles]:
    """One `SessionFiles` per top session in the database (child sessions are read with their
    parent); [] for a database that cannot be read now (it is listed again later)."""
    try:
        with _connect(path) as conn:
            conn.execute("BEGIN")
            rows = conn.execute("SELECT id, parent_id, time_updated FROM session").fetchall()
            counts = {
                table: {
                    r[0]: (r[1], r[2] or 0)
                    for r in conn.execute(
                        f"SELECT session_id, count(*), max(time_updated) FROM {table}"
                        " GROUP BY session_id"
                    )
                }
                for table in ("message", "part")
            }
            conn.execute("COMMIT")
    except sqlite3.Error:
        return []
    parents = {str(r[0]): (str(r[1]) if r[1] else None) for r in rows}
    roots = _roots(parents)
    versions: dict[str, list[int]] = {}
    for sid, _parent, updated in rows:
        messages, message_time = counts["message"].get(sid, (0, 0))
        parts, part_time = counts["part"].get(sid, (0, 0))
        v = versions.setdefault(roots[str(sid)], [0, 0, 0])
        v[0] = max(v[0], _ms(updated), _ms(message_time), _ms(part_time))
        v[1] += messages
        v[2] += parts
    return [
        SessionFiles(sid, Path(path), agent=AGENT, version=f"{t}.{m}.{p}")
        for sid, (t, m, p) in sorted(versions.items())
    ]


def database_head(path: Path, session_id: str) -> tuple[str | None, int | None]:
    """The session's directory and creation time (ms); Nones where it cannot be read."""
    try:
        with _connect(path) as conn:
            row = conn.execute(
                "SELECT directory, time_created FROM session WHERE id = ?", (session_id,)
            ).fetchone()
    except sqlite3.Error:
        return None, None
    if row is None:
        return None, None
    return (row[0] if isinstance(row[0], str) else None), (
        row[1] if isinstance(row[1], int) else None
    )


_SESSION_COLUMNS = (
    "id, project_id, parent_id, slug, directory, title, version, time_created, time_updated"
)


def _info(row: tuple[Any, ...]) -> dict[str, Any]:
    """A session row in the shape of an export's `info`."""
    sid, project, parent, slug, directory, title, version, created, updated = row
    info: dict[str, Any] = {
        "id": sid,
        "projectID": project,
        "slug": slug,
        "directory": directory,
        "title": title,
        "version": version,
        "time": {"created": created, "updated": updated},
    }
    if parent:
        info["parentID"] = parent
    return info


class _Decoder:
    """Decodes the JSON `data` of rows; a row that does not decode is counted, not raised."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.malformed: list[str] = []
        self.bytes = 0

    def data(self, table: str, row_id: Any, raw: Any) -> dict[str, Any] | None:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", errors="replace")
        if not isinstance(raw, str):
            self.malformed.append(f"{self.name}: {table} {row_id}: data is not text")
            return None
        self.bytes += len(raw)
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            self.malformed.append(f"{self.name}: {table} {row_id}: invalid JSON")
            return None
        if not isinstance(value, dict):
            self.malformed.append(f"{self.name}: {table} {row_id}: JSON is not an object")
            return None
        return value


def _messages(conn: sqlite3.Connection, sid: str, dec: _Decoder) -> list[dict[str, Any]]:
    parts: dict[str, list[dict[str, Any]]] = {}
    for pid, mid, raw in conn.execute(
        "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id",
        (sid,),
    ):
        data = dec.data("part", pid, raw)
        if data is not None:
            parts.setdefault(mid, []).append(
                {**data, "id": pid, "sessionID": sid, "messageID": mid}
            )
    messages: list[dict[str, Any]] = []
    for mid, raw in conn.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (sid,)
    ):
        data = dec.data("message", mid, raw)
        if data is not None:
            info = {**data, "id": mid, "sessionID": sid}
            messages.append({"info": info, "parts": parts.get(mid, [])})
    return messages


def load_database(path: Path, session_id: str) -> tuple[Thread | None, list[str], int]:
    """The session and its child sessions (nested), from one read transaction; with the rows
    that did not decode (ids and reasons only) and the bytes read. None: no such session.

    Raises sqlite3.Error (a locked or damaged database): the caller names it unreadable.
    """
    dec = _Decoder(Path(path).name)
    with _connect(path) as conn:
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM session WHERE id = ?",
                (session_id,),
            ).fetchone()
            thread = _thread(conn, row, dec, {session_id}) if row else None
        finally:
            conn.execute("ROLLBACK")
    return thread, dec.malformed, dec.bytes


def _thread(
    conn: sqlite3.Connection, row: tuple[Any, ...], dec: _Decoder, seen: set[str]
) -> Thread:
    info = _info(row)
    thread = Thread(info, _messages(conn, str(info["id"]), dec))
    children = conn.execute(
        f"SELECT {_SESSION_COLUMNS} FROM session WHERE parent_id = ? ORDER BY time_created, id",
        (info["id"],),
    ).fetchall()
    for child in children:
        if child[0] not in seen:  # a cycle of parents would otherwise never end
            seen.add(child[0])
            thread.children.append(_thread(conn, child, dec, seen))
    return thread
