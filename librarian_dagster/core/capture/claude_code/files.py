"""Which files make a Claude Code session: discovery under its folder, grouping, the head.

A session is its main file plus the subagent files attached to it: new layout
`<session>/subagents/agent-*.jsonl`, old layout `agent-*.jsonl` beside the session (attached by
the `sessionId` in its records). Every function here reads at most a file's first lines.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from librarian_dagster.core.capture.claude_code.records import decode_line, head_records
from librarian_dagster.core.capture.files import (
    SessionFiles,
    SessionHead,
    distinct_files,
    project_from,
)
from librarian_dagster.core.capture.records import parse_ts

__all__ = [
    "agent_file_id",
    "claims",
    "discover_sessions",
    "session_files_for",
    "session_head",
]

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_AGENT_FILE_RE = re.compile(r"^agent-([0-9A-Za-z_-]+)\.jsonl$")
# How many leading lines of an old-layout agent file we read to find its parent's sessionId.
_HEAD_LINES = 20


def _first_session_id(path: Path) -> str | None:
    """The sessionId of the first record that has one (old-layout agent files name the parent)."""
    try:
        with path.open("rb") as fh:
            for i, raw in enumerate(fh):
                if i >= _HEAD_LINES:
                    break
                for rec in decode_line(raw)[0]:
                    sid = rec.get("sessionId")
                    if isinstance(sid, str) and sid:
                        return sid
    except OSError:
        return None
    return None


# Enough leading lines to pass the summary and file-history records that may come first.
_HEAD_SCAN_LINES = 100


def session_head(files: SessionFiles, known_cwds: Iterable[str] = ()) -> SessionHead:
    """The project (as `Session.project` names it), the first timestamp and the cwd, from the
    head of the main file alone: cheap, and all stay the same as the file grows. `known_cwds`
    is not needed: every record names its cwd."""
    path = files.main or (files.subagents[0] if files.subagents else None)
    cwd: str | None = None
    first: str | None = None
    if path is not None:
        try:
            with path.open("rb") as fh:
                for i, raw in enumerate(fh):
                    if i >= _HEAD_SCAN_LINES or (cwd and first):
                        break
                    for rec in decode_line(raw)[0]:
                        if cwd is None and isinstance(rec.get("cwd"), str) and rec["cwd"]:
                            cwd = rec["cwd"]
                        ts = rec.get("timestamp")
                        if first is None and isinstance(ts, str) and ts:
                            first = ts
        except OSError:
            pass
    return SessionHead(project=project_from(cwd, path), started_at=parse_ts(first), cwd=cwd)


_DIALOGUE = frozenset({"user", "assistant", "system", "progress", "attachment"})


def claims(path: Path) -> bool:
    """Whether the file's head reads as a Claude Code transcript: records in its envelope (a
    `sessionId` beside a dialogue type), or the summary and file-history records it begins with."""
    for rec in head_records(path, _HEAD_LINES):
        rtype = rec.get("type")
        if rtype in _DIALOGUE and isinstance(rec.get("sessionId"), str):
            return True
        if rtype == "summary" and "leafUuid" in rec:
            return True
        if rtype == "file-history-snapshot" and "messageId" in rec:
            return True
    return False


def _is_hidden_or_spill(path: Path, root: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = path.parts
    # tool-results/ holds spilled tool outputs, memory/ the auto-memory: neither is a transcript.
    return any(p in ("tool-results", "memory") for p in parts[:-1])


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    """Group transcript files into sessions (shared by discover_sessions and session_files_for)."""
    mains: dict[str, Path] = {}
    subs: dict[str, set[Path]] = {}
    for path in distinct_files(files):
        name = path.name
        if path.parent.name == "subagents" and name.startswith("agent-"):
            # New layout: <session>/subagents/agent-<id>.jsonl
            subs.setdefault(path.parent.parent.name, set()).add(path)
            continue
        if _AGENT_FILE_RE.match(name):
            # Old layout: agent-<8hex>.jsonl next to the sessions; its records name the parent.
            parent = _first_session_id(path) or path.stem
            subs.setdefault(parent, set()).add(path)
            continue
        stem = path.stem
        sid = stem if _UUID_RE.match(stem) else (_first_session_id(path) or stem)
        if sid in mains and mains[sid] != path:
            # Two different files claim one id (e.g. checkpoint copies named full.jsonl): keep
            # partition keys unique and stable by suffixing a hash of the path.
            sid = f"{sid}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        mains[sid] = path
    out = [SessionFiles(sid, main, tuple(sorted(subs.pop(sid, ())))) for sid, main in mains.items()]
    out.extend(SessionFiles(sid, None, tuple(sorted(paths))) for sid, paths in subs.items())
    out.sort(key=lambda s: s.session_id)
    return out


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session under ~/.claude/projects, a copy of it, or a folder of loose .jsonl files."""
    root = Path(root)
    if not root.is_dir():
        return []
    files = [p for p in root.rglob("*.jsonl") if p.is_file() and not _is_hidden_or_spill(p, root)]
    return _collect(files)


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """Sessions for `librarian ingest PATH...`: folders are discovered, files taken as given.

    A main file also picks up its subagents: `<stem>/subagents/agent-*.jsonl` and old-layout
    `agent-*.jsonl` siblings whose records name it.
    """
    files: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.update(f for s in discover_sessions(p) for f in s.paths)
        elif p.is_file():
            files.add(p)
            if not _AGENT_FILE_RE.match(p.name):
                sub_dir = p.parent / p.stem / "subagents"
                if sub_dir.is_dir():
                    files.update(sub_dir.glob("agent-*.jsonl"))
                for sib in p.parent.glob("agent-*.jsonl"):
                    if _first_session_id(sib) == p.stem:
                        files.add(sib)
    return _collect(files)


def agent_file_id(path: Path) -> str:
    """The agent id a subagent file's name gives (`agent-<id>.jsonl`), else its stem."""
    m = _AGENT_FILE_RE.match(path.name)
    return m.group(1) if m else path.stem
