"""Which files are Copilot CLI sessions: discovery under `~/.copilot/session-state/`, the title.

Copilot CLI writes each session's events to `<session-state>/<sessionId>/events.jsonl`, beside
a `workspace.yaml` that holds the session's name and summary; versions before that wrote
`<session-state>/<sessionId>.jsonl`. A session's subagents write into the same file (their
events carry `agentId`), so a session is one file. Every function here reads at most a file's
first lines (and the small workspace.yaml).

Standard library only: hooks and the MCP server import this without dagster.
"""

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import (
    SessionFiles,
    SessionHead,
    distinct_files,
    given_files,
    project_from,
)
from librarian_dagster.core.capture.records import head_records, parse_ts

__all__ = [
    "AGENT",
    "claims",
    "discover_sessions",
    "session_files_for",
    "session_head",
    "start_context",
    "workspace_title",
]

AGENT = "copilot"
EVENTS = "events.jsonl"
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_HEAD_LINES = 10


def _is_event(rec: dict[str, Any]) -> bool:
    """A Copilot event's envelope: a dotted type, a `data` object, an id and its parent's."""
    rtype = rec.get("type")
    return (
        isinstance(rtype, str)
        and "." in rtype
        and isinstance(rec.get("data"), dict)
        and "id" in rec
        and "parentId" in rec
    )


def claims(path: Path) -> bool:
    """Whether the file's head reads as Copilot CLI events: a `session.start` from
    copilot-agent, or (a file whose start was cut) events in Copilot's envelope."""
    records = head_records(path, _HEAD_LINES)
    for rec in records:
        data = rec.get("data")
        if (
            rec.get("type") == "session.start"
            and isinstance(data, dict)
            and ("copilotVersion" in data or data.get("producer") == "copilot-agent")
        ):
            return True
    return bool(records) and all(_is_event(r) for r in records)


def _session_id(path: Path) -> str:
    """The id Copilot gave the session: its folder's name (events.jsonl), the file's name
    (the old layout), else the `sessionId` of its `session.start`."""
    name = path.parent.name if path.name == EVENTS else path.stem
    if _UUID_RE.match(name):
        return name
    for rec in head_records(path, _HEAD_LINES):
        data = rec.get("data")
        if rec.get("type") == "session.start" and isinstance(data, dict):
            sid = data.get("sessionId")
            if isinstance(sid, str) and sid:
                return sid
    return name


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    by_id: dict[str, Path] = {}
    for path in distinct_files(files):
        sid = _session_id(path)
        # Two files of one id (a copy beside the original): the events.jsonl layout wins.
        if sid not in by_id or path.name == EVENTS:
            by_id[sid] = path
    return [SessionFiles(sid, main, agent=AGENT) for sid, main in sorted(by_id.items())]


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session under `root`: `<id>/events.jsonl` and old-layout `<id>.jsonl` files at
    any depth (a copy of the folder, or a corpus sorted by project)."""
    root = Path(root)
    found = [p for p in root.rglob(EVENTS) if p.is_file()]
    # Files inside a session's own folder (its checkpoints, its files) are not sessions.
    folders = {p.parent for p in found}
    found += [
        p
        for p in root.rglob("*.jsonl")
        if _UUID_RE.match(p.stem) and p.is_file() and not folders.intersection(p.parents)
    ]
    return _collect(found)


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """The sessions of these files and folders (a folder is searched as `discover_sessions`)."""
    return _collect(given_files(paths, discover_sessions))


def start_context(records: Iterable[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(cwd, first timestamp) from a file's first records: `session.start`'s context."""
    cwd: str | None = None
    first: str | None = None
    for rec in records:
        ts = rec.get("timestamp")
        if first is None and isinstance(ts, str) and ts:
            first = ts
        data = rec.get("data")
        context = data.get("context") if isinstance(data, dict) else None
        if cwd is None and isinstance(context, dict) and isinstance(context.get("cwd"), str):
            cwd = context["cwd"] or None
        if cwd and first:
            break
    return cwd, first


def session_head(files: SessionFiles, known_cwds: Iterable[str] = ()) -> SessionHead:
    """The project and the first time, from the first events alone."""
    if files.main is None:
        return SessionHead(project="unknown", started_at=None)
    cwd, first = start_context(head_records(files.main, _HEAD_LINES))
    return SessionHead(project=project_from(cwd, files.main), started_at=parse_ts(first))


def _yaml_scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value


def workspace_title(main: Path) -> str | None:
    """The session's name (or, unnamed, its summary) from the workspace.yaml beside an
    events.jsonl: only its top-level one-line `name:` and `summary:` are read."""
    if main.name != EVENTS:
        return None
    try:
        text = (main.parent / "workspace.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines()[:200]:
        key, sep, value = line.partition(":")
        if sep and key in ("name", "summary") and value.strip()[:1] not in ("", "|", ">"):
            found[key] = _yaml_scalar(value)
    return found.get("name") or found.get("summary") or None
