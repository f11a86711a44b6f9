"""Which files make an OpenCode session, in any of its three forms, and the head of one.

* its database (`opencode*.db` in OpenCode's data folder): one `SessionFiles` per top session,
  `main` the database, `version` what changed (database.py);
* the older `storage/` layout: `main` the session's info file, `subagents` its child sessions'
  info files (storage.py);
* `opencode export` JSON files (the corpus' form): `main` the export, `subagents` the exports of
  its child sessions found beside it (export.py).

A child session (spawned by the task tool: `parentID`) is read with its parent, whatever the
form; one whose parent is not there is a session of its own.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import (
    SessionFiles,
    SessionHead,
    distinct_files,
    project_from,
)
from librarian_dagster.core.capture.opencode.database import (
    database_head,
    database_sessions,
    is_database,
    is_sqlite,
)
from librarian_dagster.core.capture.opencode.export import export_info, is_export
from librarian_dagster.core.capture.opencode.storage import (
    is_storage_session,
    read_json,
    storage_sessions,
)
from librarian_dagster.core.capture.opencode.thread import ms_time
from librarian_dagster.core.capture.opencode.tools import as_dict

__all__ = ["claims", "discover_sessions", "session_files_for", "session_head"]

AGENT = "opencode"
# Folders of OpenCode's data folder that hold no session of any form this reader reads.
_NOT_EXPORTS = frozenset({"storage", "snapshot", "tool-output", "log", "bin", "node_modules"})


def claims(path: Path) -> bool:
    """Whether a file is OpenCode's: its database, a session's info in `storage/`, an export."""
    path = Path(path)
    if is_sqlite(path):
        return is_database(path)
    return is_export(path) or is_storage_session(path)


def _storage_folders(root: Path) -> list[Path]:
    return [s for s in (root / "storage", root) if (s / "session").is_dir()]


def _group_exports(paths: Iterable[Path]) -> list[SessionFiles]:
    """Exports as sessions: each child export with the topmost parent export among them."""
    infos: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in distinct_files(paths):
        info = export_info(path)
        if info is None:
            continue
        sid = info.get("id") if isinstance(info.get("id"), str) else path.stem
        infos.setdefault(str(sid), (path, info))
    groups: dict[str, list[Path]] = {}
    for sid in infos:
        top, seen = sid, {sid}
        while True:
            parent = infos[top][1].get("parentID")
            if not isinstance(parent, str) or parent not in infos or parent in seen:
                break
            top = parent
            seen.add(top)
        groups.setdefault(top, [])
        if top != sid:
            groups[top].append(infos[sid][0])
    return [
        SessionFiles(top, infos[top][0], tuple(sorted(children)), AGENT)
        for top, children in sorted(groups.items())
    ]


def _exports_under(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*.json"):
        rel = path.relative_to(root).parts[:-1]
        if not any(p in _NOT_EXPORTS for p in rel) and path.is_file() and is_export(path):
            found.append(path)
    return found


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session in OpenCode's data folder (or a copy, or a folder of exports)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found: list[SessionFiles] = []
    for db in sorted({*root.glob("*.db"), *root.glob("opencode/*.db")}):
        if is_database(db):
            found.extend(database_sessions(db))
    for storage in _storage_folders(root):
        found.extend(storage_sessions(storage))
    found.extend(_group_exports(_exports_under(root)))
    return found


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """Sessions for `librarian ingest PATH...`: folders discovered; a database gives all its
    sessions, an info or export file its session (with the children found beside it)."""
    found: list[SessionFiles] = []
    exports: set[Path] = set()
    for path in (Path(p) for p in paths):
        if path.is_dir():
            found.extend(discover_sessions(path))
        elif is_sqlite(path):
            found.extend(database_sessions(path))
        elif is_export(path):
            exports.add(path)
        elif is_storage_session(path):
            found.extend(storage_sessions(path.parent.parent.parent, only={path}))
    if exports:
        siblings = {s for p in exports for s in p.parent.glob("*.json") if is_export(s)}
        for files in _group_exports(exports | siblings):
            if exports & set(files.paths):
                found.append(files)
    return found


def session_head(files: SessionFiles) -> SessionHead:
    """The project and the first time, from the session's row or info alone."""
    main = files.main
    if main is None:
        return SessionHead(project="unknown", started_at=None)
    if is_sqlite(main):
        directory, created = database_head(main, files.session_id)
        return SessionHead(project_from(directory, main), ms_time(created))
    info = export_info(main) if is_export(main) else read_json(main)
    info = as_dict(info)
    directory = info.get("directory")
    directory = directory if isinstance(directory, str) else None
    time = as_dict(info.get("time"))
    return SessionHead(project_from(directory, main), ms_time(time.get("created")))
