"""Where a Gemini CLI session ran: its working folder, found back from the project hash it keeps.

A Gemini CLI chat names no working folder, only `projectHash`: the SHA-256 of the project root
(packages/core/src/utils/paths.ts `getProjectHash`). The folder is found, in this order:

1. from what Gemini CLI keeps beside its chats: the `.project_root` file in the project's folder
   under `~/.gemini/tmp/<short id>/` (written by its ProjectRegistry), or the registry itself,
   `~/.gemini/projects.json` (`{"projects": {root: short id}}`);
2. from working folders known elsewhere (other sessions, other agents): the one whose hash is
   `projectHash`;
3. from the absolute paths the session itself names (tool arguments and results): the folder
   among their ancestors whose hash is `projectHash`.

Every candidate of 2 and 3 is checked against the hash, so none is a guess. When none is found
the project is named `gemini-<hash[:8]>` and the cwd stays unknown.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "cwd_from_markers",
    "cwd_from_paths",
    "cwd_with_hash",
    "paths_in_text",
    "project_name",
    "resolve_cwd",
]

_PROJECT_ROOT_FILE = ".project_root"
_REGISTRY = "projects.json"
_MAX_CANDIDATES = 4096
# POSIX absolute paths inside free text (tool output): "/Users/me/app/src/x.ts".
_ABS_PATH = re.compile(r"(?<![\w.~/-])(/[A-Za-z0-9._@+-][^\s\"'`<>|*?:;,()\[\]{}]*)")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def _hash(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()


def cwd_with_hash(cwds: Iterable[str], project_hash: str) -> str | None:
    """The folder among `cwds` whose hash is `project_hash` (a trailing separator ignored)."""
    if not project_hash:
        return None
    for cwd in cwds:
        if not isinstance(cwd, str) or not cwd:
            continue
        for spelling in dict.fromkeys((cwd, cwd.rstrip("/\\") or cwd)):
            if _hash(spelling) == project_hash:
                return spelling
    return None


def _read_small(path: Path, limit: int = 1 << 20) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def _project_folder(main: Path) -> Path | None:
    """`~/.gemini/tmp/<project>/` of a chat at `<project>/chats/[<parent id>/]<file>`."""
    for folder in (main.parent, main.parent.parent):
        if folder.name == "chats":
            return folder.parent
    return None


def cwd_from_markers(main: Path | None, project_hash: str) -> str | None:
    """The project root Gemini CLI wrote beside the chats (`.project_root`), else the one its
    registry (`projects.json` beside `tmp/`) maps to this project's folder or hash."""
    project = _project_folder(main) if main is not None else None
    if project is None:
        return None
    marker = _read_small(project / _PROJECT_ROOT_FILE)
    if marker and marker.strip():
        # Gemini's own word for whose folder this is (verified by it, not by the hash: on
        # Windows the marker is lower-cased, the hashed root is not).
        return marker.strip()
    text = _read_small(project.parent.parent / _REGISTRY)
    if not text:
        return None
    try:
        projects = json.loads(text).get("projects")
    except (ValueError, AttributeError):
        return None
    if not isinstance(projects, dict):
        return None
    for root, short_id in projects.items():
        if short_id == project.name and isinstance(root, str):
            return root
    return cwd_with_hash(projects, project_hash)


def _ancestors(path: str) -> Iterable[str]:
    sep = "\\" if _WINDOWS_DRIVE.match(path) else "/"
    parts = path.rstrip(sep).split(sep)
    for end in range(len(parts) - 1, 0, -1):
        folder = sep.join(parts[:end])
        if folder and folder != path:
            yield folder + (sep if folder.endswith(":") else "")


def cwd_from_paths(paths: Iterable[str], project_hash: str) -> str | None:
    """The folder among the ancestors of these absolute paths whose hash is `project_hash`."""
    if not project_hash:
        return None
    tried: set[str] = set()
    for path in paths:
        if not (path.startswith("/") or _WINDOWS_DRIVE.match(path)):
            continue
        for folder in _ancestors(path):
            if folder in tried:
                continue
            if len(tried) >= _MAX_CANDIDATES:
                return None
            tried.add(folder)
            if _hash(folder) == project_hash:
                return folder
    return None


def paths_in_text(text: str) -> list[str]:
    """The POSIX absolute paths written in free text (a tool's output, a file's head)."""
    return _ABS_PATH.findall(text)


def resolve_cwd(
    main: Path | None, project_hash: str, known_cwds: Iterable[str], paths: Iterable[str]
) -> str | None:
    """The session's working folder by the three ways above, in order; None if none finds it."""
    return (
        cwd_from_markers(main, project_hash)
        or cwd_with_hash(known_cwds, project_hash)
        or cwd_from_paths(paths, project_hash)
    )


def project_name(project_hash: str) -> str:
    """The project of a session whose folder is unknown: named by its hash, stable."""
    return f"gemini-{project_hash[:8]}" if project_hash else "gemini-unknown"
