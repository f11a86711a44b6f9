"""The files a session touched: which it changed and which it only read, by absolute path.

Kept per session beside its memory (`session_files`), so the agent can be told, when it opens a
file, which earlier sessions changed it (core/recall/history.py). Paths are kept absolute, in one
spelling for every platform (`normal_path`): a session's repository root is not in its
transcript, and is only inferred when a file is looked up.
"""

import posixpath
import re
from collections import Counter
from dataclasses import dataclass

from librarian_dagster.core.capture.session import CHANGE, READ, Session

MAX_TOUCHES = 500
"""Files kept per session, most touched first: a session that read a whole tree is not worth
a row per file."""

_DRIVE = re.compile(r"^([A-Za-z]):[\\/]")


@dataclass(frozen=True)
class FileTouch:
    path: str
    """Absolute, as `normal_path` spells it."""
    edits: int
    reads: int


def normal_path(path: str, cwd: str | None = None) -> str | None:
    """`path` absolute, in one spelling: '/' between folders, '.' and '..' resolved, a Windows
    drive as `c:/...` (its letter lowered: Windows names it either way). A relative path is
    taken from `cwd`; None when it cannot be made absolute, or is not a path at all."""
    if not path or "\x00" in path or len(path) > 4096:
        return None
    text = path.strip()
    if cwd and not is_absolute(text):
        text = cwd.rstrip("/\\") + "/" + text
    if not is_absolute(text):
        return None
    drive = _DRIVE.match(text)
    if drive:
        rest = posixpath.normpath("/" + text[3:].replace("\\", "/"))
        return f"{drive.group(1).lower()}:{rest}".rstrip("/") if rest != "/" else None
    if text.startswith("\\\\"):  # a UNC share: \\server\share\...
        rest = posixpath.normpath("/" + text[2:].replace("\\", "/"))
        return "/" + rest
    normal = posixpath.normpath(text)
    if normal.startswith("//"):  # POSIX keeps a leading '//': one spelling of a path, not two
        normal = "/" + normal.lstrip("/")
    return normal if normal != "/" else None


def is_absolute(path: str) -> bool:
    return path.startswith(("/", "\\\\")) or bool(_DRIVE.match(path))


def is_windows(path: str) -> bool:
    """Whether a `normal_path` names a Windows file, whose names compare without case."""
    return bool(_DRIVE.match(path)) or path.startswith("//")


def components(path: str) -> tuple[str, ...]:
    """A `normal_path`'s folders and name, the drive first (`c:`), for comparing from the end."""
    parts = tuple(p for p in path.split("/") if p)
    return tuple(p.casefold() for p in parts) if is_windows(path) else parts


def file_name(path: str) -> str:
    """A `normal_path`'s last part as `components` compares it: what a look-up asks by."""
    return components(path)[-1]


def file_touches(session: Session) -> list[FileTouch]:
    """The files the session (its subagents too) changed or read, most touched first."""
    edits: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    for turn in session.turns:
        for use in turn.tool_uses:
            # A search names folders, not the file that was worked on.
            counted = edits if use.action == CHANGE else reads if use.action == READ else None
            if counted is None:
                continue
            for raw in use.file_paths:
                path = normal_path(raw, session.cwd)
                if path is not None:
                    counted[path] += 1
    touched = sorted(set(edits) | set(reads), key=lambda p: (-edits[p], -reads[p], p))
    return [FileTouch(p, edits[p], reads[p]) for p in touched[:MAX_TOUCHES]]
