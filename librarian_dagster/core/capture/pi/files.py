"""Which files are Pi sessions: discovery under `~/.pi/agent/sessions/`, the header, the head.

Pi writes each session to `~/.pi/agent/sessions/--<cwd with / as ->--/<time>_<id>.jsonl`, whose
first line is the header `{type: "session", version, id, timestamp, cwd}`. A session is one file
(branches live in it as a tree). Every function here reads at most a file's first lines.

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

__all__ = ["AGENT", "claims", "discover_sessions", "header", "session_files_for", "session_head"]

AGENT = "pi"
# `<time>_<uuid>.jsonl`, or a copy named by the id alone.
_NAME_RE = re.compile(
    r"(?:^|_)([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", re.I
)


def header(path: Path) -> dict[str, Any] | None:
    """The session header, if the file's first record is one."""
    records = head_records(path, 1)
    if not records:
        return None
    first = records[0]
    kind, sid, cwd = first.get("type"), first.get("id"), first.get("cwd")
    return first if kind == "session" and isinstance(sid, str) and isinstance(cwd, str) else None


def claims(path: Path) -> bool:
    """Whether the file begins with Pi's session header (a `session` record with id and cwd)."""
    return header(path) is not None


def _session_id(path: Path) -> str:
    m = _NAME_RE.search(path.stem)
    if m:
        return m.group(1)
    head = header(path)
    return head["id"] if head and head["id"] else path.stem


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    by_id: dict[str, Path] = {}
    for path in distinct_files(files):
        by_id.setdefault(_session_id(path), path)
    return [SessionFiles(sid, main, agent=AGENT) for sid, main in sorted(by_id.items())]


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every `.jsonl` under `root` (Pi keeps one folder per working directory)."""
    return _collect(p for p in Path(root).rglob("*.jsonl") if p.is_file())


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """The sessions of these files and folders (a folder is searched as `discover_sessions`)."""
    return _collect(given_files(paths, discover_sessions))


def session_head(files: SessionFiles, known_cwds: Iterable[str] = ()) -> SessionHead:
    """The project (from the header's cwd) and the header's time."""
    head = header(files.main) if files.main is not None else None
    cwd = head.get("cwd") if head else None
    started = parse_ts(head.get("timestamp")) if head else None
    return SessionHead(project=project_from(cwd, files.main), started_at=started)
