"""The JSON `opencode export <id>` writes: `{info, messages}`, one session to a file.

`info` is the session (id, slug, projectID, directory, parentID, title, version, time in ms),
each message `{info, parts}` (packages/opencode/src/cli/cmd/export.ts). The export is written
pretty-printed with `info` first, so a file's head tells whose session it is.

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
import re
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.opencode.thread import Thread

__all__ = ["export_info", "is_export", "load_export"]

_HEAD_BYTES = 1 << 16
_INFO_RE = re.compile(rb'^\s*\{\s*"info"\s*:\s*\{')
_ID_RE = re.compile(rb'"id"\s*:\s*"ses_')
_DECODER = json.JSONDecoder()


def _head(path: Path, size: int = _HEAD_BYTES) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def is_export(path: Path) -> bool:
    """Whether a file begins as an OpenCode export: `{"info": {` and a session id in it."""
    head = _head(path, 4096)
    match = _INFO_RE.match(head)
    return match is not None and _ID_RE.search(head, match.end()) is not None


def export_info(path: Path) -> dict[str, Any] | None:
    """The `info` of an export, read from the file's head (the whole file only where the head
    does not hold all of it); None for a file that is not one."""
    head = _head(path)
    match = _INFO_RE.match(head)
    if match is None:
        return None
    text = head.decode("utf-8", errors="replace")
    # The match is on bytes; in the decoded text the object starts at the first "{" after "info".
    start = text.find("{", text.find('"info"'))
    try:
        info, _ = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        data = _load(path)
        info = data.get("info") if isinstance(data, dict) else None
    return info if isinstance(info, dict) else None


def _load(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return json.loads(fh.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def load_export(path: Path) -> tuple[Thread | None, str | None]:
    """The session an export holds, or why it could not be read (no content in the reason).

    Raises OSError for a file that cannot be opened: the caller names it unreadable.
    """
    with path.open("rb") as fh:
        raw = fh.read()
    if not raw.strip():
        return None, "empty file"
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError as exc:
        return None, f"invalid JSON at line {getattr(exc, 'lineno', '?')}"
    except RecursionError:
        return None, "JSON nested too deeply"
    if not isinstance(data, dict) or not isinstance(data.get("info"), dict):
        return None, "not an OpenCode export (no session info)"
    messages = data.get("messages")
    if not isinstance(messages, list):
        return None, "not an OpenCode export (no messages list)"
    return Thread(data["info"], messages), None
