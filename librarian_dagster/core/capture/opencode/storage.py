"""OpenCode's older JSON layout under `storage/`, read before its database existed.

`storage/session/<projectID>/<sessionID>.json` (the session's info),
`storage/message/<sessionID>/<messageID>.json` and `storage/part/<messageID>/<partID>.json`;
ids are taken from the file names, as OpenCode's own migration to SQLite does
(packages/opencode/src/storage/json-migration.ts). A session's `SessionFiles` names its info
file and its child sessions' info files; its `version` says when its messages or parts changed.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.opencode.thread import Thread

__all__ = ["is_storage_session", "load_storage", "read_json", "storage_sessions"]

AGENT = "opencode"


def read_json(path: Path) -> Any:
    """A small JSON file's value; None where it cannot be read or decoded."""
    try:
        with Path(path).open("rb") as fh:
            return json.loads(fh.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def _storage_of(info_path: Path) -> Path:
    return info_path.parent.parent.parent


def is_storage_session(path: Path) -> bool:
    """Whether the file is a session's info in the storage layout, by its place and content."""
    path = Path(path)
    if path.suffix != ".json" or path.parent.parent.name != "session":
        return False
    data = read_json(path)
    return (
        isinstance(data, dict)
        and "info" not in data
        and isinstance(data.get("id"), str)
        and data["id"].startswith("ses")
        and "projectID" in data
        and isinstance(data.get("time"), dict)
    )


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".json")
    except OSError:
        return []


def _version(storage: Path, infos: list[Path]) -> str:
    """What changes when the session or a child gains or rewrites a message or a part."""
    digest = hashlib.sha1()
    for info in infos:
        for path in [info, *_entries(storage / "message" / info.stem)]:
            parts = _entries(storage / "part" / path.stem) if path != info else []
            for p in [path, *parts]:
                try:
                    st = p.stat()
                except OSError:
                    continue
                digest.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def storage_sessions(storage: Path, only: set[Path] | None = None) -> list[SessionFiles]:
    """Every top session under a `storage/` folder, its child sessions attached (or only those
    whose info file is in `only`)."""
    infos = {p: read_json(p) for p in sorted((storage / "session").glob("*/*.json"))}
    ids = {p.stem: p for p, data in infos.items() if isinstance(data, dict)}
    parent: dict[str, str] = {}
    for p, data in infos.items():
        up = data.get("parentID") if isinstance(data, dict) else None
        if isinstance(up, str) and up in ids:
            parent[p.stem] = up
    tree: dict[str, list[Path]] = {}
    for sid, path in ids.items():
        top, seen = sid, {sid}
        while top in parent and parent[top] not in seen:
            top = parent[top]
            seen.add(top)
        tree.setdefault(top, [])
        if top != sid:
            tree[top].append(path)
    found = []
    for top, children in sorted(tree.items()):
        main = ids[top]
        if only is not None and main not in only and not (only & set(children)):
            continue
        version = _version(storage, [main, *sorted(children)])
        found.append(SessionFiles(top, main, tuple(sorted(children)), AGENT, version))
    return found


def _messages(storage: Path, sid: str, malformed: list[str]) -> tuple[list[Any], int]:
    messages: list[Any] = []
    size = 0
    for path in _entries(storage / "message" / sid):
        info = read_json(path)
        if not isinstance(info, dict):
            malformed.append(f"message/{sid}/{path.name}: unreadable or invalid JSON")
            continue
        parts: list[Any] = []
        for ppath in _entries(storage / "part" / path.stem):
            part = read_json(ppath)
            if not isinstance(part, dict):
                malformed.append(f"part/{path.stem}/{ppath.name}: unreadable or invalid JSON")
                continue
            parts.append({**part, "id": ppath.stem, "messageID": path.stem, "sessionID": sid})
            size += _size(ppath)
        size += _size(path)
        messages.append({"info": {**info, "id": path.stem, "sessionID": sid}, "parts": parts})
    messages.sort(key=lambda m: (_created(m["info"]), m["info"]["id"]))
    return messages, size


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _created(info: dict[str, Any]) -> float:
    time = info.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    return float(created) if isinstance(created, int | float) else 0.0


def load_storage(files: SessionFiles) -> tuple[Thread | None, list[str], int]:
    """The session of a storage-layout `SessionFiles`, its children nested under their parents,
    with what did not decode (names and reasons only) and the bytes read. None: the session's
    info is gone or is not one. Raises OSError where its info file cannot be opened."""
    if files.main is None:
        return None, [], 0
    Path(files.main).stat()  # an info file that is not there is a fault of the moment
    storage = _storage_of(files.main)
    malformed: list[str] = []
    threads: dict[str, Thread] = {}
    size = 0
    for path in (files.main, *files.subagents):
        info = read_json(path)
        if not isinstance(info, dict):
            malformed.append(f"session/{path.parent.name}/{path.name}: invalid JSON")
            continue
        messages, read = _messages(storage, path.stem, malformed)
        size += read + _size(path)
        threads[path.stem] = Thread({**info, "id": path.stem}, messages)
    top = threads.get(files.main.stem)
    for sid, thread in threads.items():
        parent = threads.get(str(thread.info.get("parentID")))
        if sid != files.main.stem and parent is not None and parent is not thread:
            parent.children.append(thread)
        elif sid != files.main.stem and top is not None:
            top.children.append(thread)
    return top, malformed, size
