"""What the sessions sensor should ingest: a pure function of the agents' folders and its cursor.

A session is requested when its files have settled (unchanged for `settle_seconds`, so a session
Claude Code is still writing waits) and its fingerprint (sizes and mtimes of all its files)
differs from the one last requested. The cursor is the map session id -> fingerprint requested,
so an unchanged file is never requested twice and a grown (resumed) one exactly once more.
What the store already holds at the same fingerprint (ingested by `librarian ingest`, a backfill
or an earlier sensor whose cursor is gone) is not requested either.
"""

import json
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from librarian_dagster.core.capture.files import SessionFiles


def unreadable(folder: os.PathLike[str] | str) -> str | None:
    """Why an agent's folder cannot be listed, or None: also when it is not made yet (a new
    machine's `~/.claude/projects` appears with Claude Code's first session)."""
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


@dataclass(frozen=True)
class Snapshot:
    files: SessionFiles
    fingerprint: str
    last_modified: float
    """Newest mtime (seconds since the epoch) among the session's files."""


@dataclass(frozen=True)
class IngestPlan:
    requests: list[Snapshot]
    cursor: str
    waiting: int
    """Sessions changed but not settled yet: asked again on a later tick."""


def snapshot(sessions: Iterable[SessionFiles]) -> list[Snapshot]:
    result = []
    for files in sessions:
        mtimes = []
        for path in files.paths:
            try:
                mtimes.append(path.stat().st_mtime)
            except OSError:
                continue  # vanished between discovery and now: the fingerprint says so
        result.append(Snapshot(files, files.fingerprint(), max(mtimes, default=0.0)))
    return result


def is_excluded(files: SessionFiles, patterns: Sequence[str]) -> bool:
    """Whether a glob of LIBRARIAN_EXCLUDE matches the session's project folder name (the slug
    Claude Code names it by, e.g. `-Users-me-private`) or the full path of one of its files."""
    if not patterns:
        return False
    names = {p.parent.name for p in files.paths[:1]}
    names.update(str(p) for p in files.paths)
    return any(fnmatchcase(name, pattern) for pattern in patterns for name in names)


def plan_ingest(
    snapshots: Sequence[Snapshot],
    cursor: str | None,
    now: float,
    settle_seconds: float,
    held: Collection[tuple[str, str]] = (),
) -> IngestPlan:
    """`held`: (session id, fingerprint) pairs the store already holds the outcome of."""
    requested = parse_cursor(cursor)
    requests: list[Snapshot] = []
    waiting = 0
    for snap in snapshots:
        sid = snap.files.session_id
        if requested.get(sid) == snap.fingerprint:
            continue
        if (sid, snap.fingerprint) in held:
            requested[sid] = snap.fingerprint
            continue
        if now - snap.last_modified < settle_seconds:
            waiting += 1
            continue
        requests.append(snap)
        requested[snap.files.session_id] = snap.fingerprint
    return IngestPlan(requests, json.dumps(requested, sort_keys=True), waiting)


def parse_cursor(cursor: str | None) -> dict[str, str]:
    if not cursor:
        return {}
    try:
        value = json.loads(cursor)
    except json.JSONDecodeError:
        return {}  # an unreadable cursor means "nothing requested yet": runs are keyed, so safe
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def run_key(snap: Snapshot) -> str:
    return f"{snap.files.session_id}:{snap.fingerprint}"
