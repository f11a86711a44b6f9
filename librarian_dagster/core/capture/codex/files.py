"""Which files make a Codex session: discovery, claims, threads attached to their parent, the head.

Codex writes one rollout per thread, `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`
(moved to `~/.codex/archived_sessions/` when archived), whose first record is the thread's
`session_meta`. A thread that a session spawned (a review, a helper agent) names its parent
there: `parent_thread_id`, or `source.subagent.thread_spawn.parent_thread_id`. Such a thread is
remembered as part of its root session (its file one of the session's `subagents`); one whose
parent is not found is a session of its own. Every function here reads at most a file's first
line.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import (
    SessionFiles,
    SessionHead,
    distinct_files,
    project_from,
)
from librarian_dagster.core.capture.records import head_records, parse_ts

__all__ = [
    "AGENT",
    "Meta",
    "claims",
    "discover_sessions",
    "parent_of",
    "read_meta",
    "session_files_for",
    "session_head",
]

AGENT = "codex"


@dataclass(frozen=True)
class Meta:
    """What a rollout's first record says about its thread."""

    thread_id: str
    parent_id: str | None
    cwd: str | None
    timestamp: str | None


def parent_of(payload: dict[str, Any]) -> str | None:
    """The thread that spawned this one, from its `session_meta` payload; None for a thread
    the user started (a plain `codex fork` has a `forked_from_id` but is the user's own)."""
    parent = payload.get("parent_thread_id")
    if isinstance(parent, str) and parent:
        return parent
    source = payload.get("source")
    sub = source.get("subagent") if isinstance(source, dict) else None
    spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
    parent = spawn.get("parent_thread_id") if isinstance(spawn, dict) else None
    return parent if isinstance(parent, str) and parent else None


def read_meta(path: Path) -> Meta | None:
    """The thread a rollout holds, from its first record; None when that is no session_meta."""
    records = head_records(path, 1)
    if not records:
        return None
    first = records[0]
    payload = first.get("payload")
    if first.get("type") != "session_meta" or not isinstance(payload, dict):
        return None
    tid = payload.get("id") or payload.get("session_id")
    if not isinstance(tid, str) or not tid:
        return None
    cwd = payload.get("cwd")
    ts = payload.get("timestamp") or first.get("timestamp")
    return Meta(
        tid,
        parent_of(payload),
        cwd if isinstance(cwd, str) and cwd else None,
        ts if isinstance(ts, str) else None,
    )


def claims(path: Path) -> bool:
    """Whether the file is a Codex rollout: its first record is a `session_meta` (with or
    without the `ordinal` of 0.169 and later)."""
    return read_meta(path) is not None


def session_head(files: SessionFiles) -> SessionHead:
    """The project and the start, from the first record of the main file alone."""
    path = files.main or (files.subagents[0] if files.subagents else None)
    meta = read_meta(path) if path is not None else None
    if meta is None:
        return SessionHead(project=project_from(None, path), started_at=None)
    return SessionHead(project=project_from(meta.cwd, path), started_at=parse_ts(meta.timestamp))


def _root(tid: str, metas: dict[str, Meta]) -> str:
    """The thread at the top of `tid`'s chain of parents among `metas` (cycles stop)."""
    seen = {tid}
    while True:
        parent = metas[tid].parent_id
        if parent is None or parent not in metas or parent in seen:
            return tid
        seen.add(parent)
        tid = parent


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    """Group rollouts into sessions: each root thread with the threads under it."""
    metas: dict[str, Meta] = {}
    paths: dict[str, Path] = {}
    for path in distinct_files(files):
        meta = read_meta(path)
        if meta is None:
            continue
        tid = meta.thread_id
        if tid in paths:
            # Two files claim one thread (copies): keep both, the second under its own key.
            tid = f"{tid}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
            meta = Meta(tid, meta.parent_id, meta.cwd, meta.timestamp)
        metas[tid], paths[tid] = meta, path
    children: dict[str, list[Path]] = {}
    roots: list[str] = []
    for tid in metas:
        root = _root(tid, metas)
        if root == tid:
            roots.append(tid)
        else:
            children.setdefault(root, []).append(paths[tid])
    out = [
        SessionFiles(tid, paths[tid], tuple(sorted(children.get(tid, ()))), agent=AGENT)
        for tid in roots
    ]
    out.sort(key=lambda s: s.session_id)
    return out


def _rollouts(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.jsonl") if p.is_file()]


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session under a folder of rollouts (~/.codex/sessions, its archive, a copy)."""
    root = Path(root)
    return _collect(_rollouts(root)) if root.is_dir() else []


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """Sessions for `librarian ingest PATH...`: folders are discovered; a file is taken with
    the threads it spawned, looked for beside it and, for a file in `sessions/YYYY/MM/DD/`,
    anywhere under that `sessions/` folder."""
    files: set[Path] = set()
    for p in (Path(p) for p in paths):
        if p.is_dir():
            files.update(_rollouts(p))
        elif p.is_file():
            files.add(p)
            files.update(_spawned(p))
    return _collect(files)


def _spawned(path: Path) -> list[Path]:
    """Rollouts near `path` whose thread descends from its thread."""
    meta = read_meta(path)
    if meta is None:
        return []
    folder = path.parent
    dated = folder.parent.parent.parent if len(folder.parts) >= 4 else None
    near = _rollouts(dated) if dated is not None and dated.name == "sessions" else []
    near = near or [p for p in folder.glob("*.jsonl") if p.is_file()]
    found = [(p, m) for p in near if (m := read_meta(p)) is not None]
    metas = {m.thread_id: m for _, m in found}
    metas[meta.thread_id] = meta
    return [
        p
        for p, m in found
        if m.thread_id != meta.thread_id and _root(m.thread_id, metas) == meta.thread_id
    ]
