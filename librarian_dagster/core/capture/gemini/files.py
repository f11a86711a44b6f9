"""Which files make a Gemini CLI session: discovery under `~/.gemini/tmp`, claims, the head.

Gemini CLI keeps each project's chats in `~/.gemini/tmp/<project>/chats/` (`<project>` the
project's short name, or the SHA-256 of its root in versions before the projects registry): a
session is `session-<time>-<id[:8]>.jsonl` (`.json` in older versions), and the subagents it ran
are `chats/<session id>/<subagent id>.jsonl` (header `kind: "subagent"`), remembered as part of
it. The session id is the one its header gives. Copies elsewhere (a folder of `<id>.json`) are
found by their content. Every function here reads at most a file's first 64 KiB.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from librarian_dagster.core.capture.files import (
    SessionFiles,
    SessionHead,
    distinct_files,
    project_from,
)
from librarian_dagster.core.capture.gemini.conversation import is_header
from librarian_dagster.core.capture.gemini.project import paths_in_text, project_name, resolve_cwd
from librarian_dagster.core.capture.records import decode_line, parse_ts

__all__ = [
    "AGENT",
    "Header",
    "claims",
    "discover_sessions",
    "read_header",
    "session_files_for",
    "session_head",
]

AGENT = "gemini"
_HEAD_BYTES = 1 << 16
_SUFFIXES = frozenset({".json", ".jsonl"})
# Beside the chats, Gemini CLI keeps files that are no chat: never read.
_NOT_CHATS = frozenset({"checkpoints", "tool-outputs", "logs", "plans", "tracker", "tasks"})
# The header's fields before `messages` in the older form, in its first lines either way.
_FIELD = re.compile(r'"(sessionId|projectHash|startTime|kind)"\s*:\s*"((?:[^"\\]|\\.){0,300})"')


@dataclass(frozen=True)
class Header:
    """What the head of a chat file says: whose session it is, where and when it began."""

    session_id: str
    project_hash: str
    start_time: str | None
    kind: str | None
    text: str
    """The head's text (64 KiB at most), for the absolute paths it names."""


def _fields(text: str) -> dict[str, str]:
    """The header's string fields in a head that is not one whole line (the older form,
    pretty-printed): each first occurrence before the messages begin."""
    cut = text.find('"messages"')
    found: dict[str, str] = {}
    for match in _FIELD.finditer(text if cut < 0 else text[:cut]):
        found.setdefault(match.group(1), match.group(2))
    return found


def read_header(path: Path) -> Header | None:
    """The header of a Gemini CLI chat file, or None for any other file (or none readable)."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(_HEAD_BYTES)
            records, reason = decode_line(first)
            whole = bool(records) and reason is None
            if whole and not is_header(records[0]):
                return None  # another agent's JSONL: its first line is enough to say so
            rest = fh.read(max(_HEAD_BYTES - len(first), 0))
    except OSError:
        return None
    text = (first + rest).decode("utf-8", errors="replace")
    if whole:
        fields = {k: v for k, v in records[0].items() if isinstance(v, str)}
    elif text.lstrip().startswith("{"):
        fields = _fields(text)
    else:
        return None
    if "sessionId" not in fields or "projectHash" not in fields or not fields["sessionId"]:
        return None
    return Header(
        session_id=fields["sessionId"],
        project_hash=fields["projectHash"],
        start_time=fields.get("startTime"),
        kind=fields.get("kind"),
        text=text,
    )


def claims(path: Path) -> bool:
    """Whether the file's head is a Gemini CLI chat's: a `sessionId` beside a `projectHash`."""
    return path.suffix in _SUFFIXES and read_header(path) is not None


def session_head(files: SessionFiles, known_cwds: Iterable[str] = ()) -> SessionHead:
    """The project (as `Session.project` names it), the start and the working folder, from the
    head of the main file alone; `known_cwds`: folders where sessions of any agent ran."""
    path = files.main or (files.subagents[0] if files.subagents else None)
    header = read_header(path) if path is not None else None
    if header is None:
        return SessionHead(project=project_from(None, path), started_at=None)
    cwd = resolve_cwd(path, header.project_hash, known_cwds, paths_in_text(header.text))
    project = project_from(cwd, None) if cwd else project_name(header.project_hash)
    return SessionHead(project=project, started_at=parse_ts(header.start_time), cwd=cwd)


def _parent_id(path: Path, header: Header) -> str | None:
    """The session a subagent's chat belongs to: the folder it is kept in, `chats/<id>/`."""
    if path.parent.parent.name == "chats" or (
        header.kind == "subagent" and path.parent.name != "chats"
    ):
        return path.parent.name
    return None


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    """Group chat files into sessions (shared by discover_sessions and session_files_for)."""
    mains: dict[str, Path] = {}
    subs: dict[str, set[Path]] = {}
    for path in distinct_files(files):
        header = read_header(path)
        if header is None:
            continue
        parent = _parent_id(path, header)
        if parent is not None:
            subs.setdefault(parent, set()).add(path)
            continue
        sid = header.session_id
        kept = mains.get(sid)
        if kept is not None and kept != path:
            if kept.suffix == ".json" and path.suffix == ".jsonl" and kept.stem == path.stem:
                mains[sid] = path  # the older file, carried on in the newer form when resumed
                continue
            if path.suffix == ".json" and kept.suffix == ".jsonl" and kept.stem == path.stem:
                continue
            # Two chats claim one id (copies): keep partition keys unique and stable.
            sid = f"{sid}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        mains[sid] = path
    out = [
        SessionFiles(sid, main, tuple(sorted(subs.pop(sid, ()))), agent=AGENT)
        for sid, main in mains.items()
    ]
    out.extend(SessionFiles(sid, None, tuple(sorted(p)), agent=AGENT) for sid, p in subs.items())
    return sorted(out, key=lambda s: s.session_id)


def _chat_files(root: Path) -> list[Path]:
    found = []
    for suffix in _SUFFIXES:
        for path in root.rglob(f"*{suffix}"):
            try:
                parts = path.relative_to(root).parts[:-1]
            except ValueError:
                parts = ()
            if not _NOT_CHATS & set(parts) and path.is_file():
                found.append(path)
    return found


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session under a copy of `~/.gemini/tmp` (or a folder of loose chat files)."""
    root = Path(root)
    if not root.is_dir():  # as every reader's: the same two lines, kept (a guard, no logic)
        return []
    return _collect(_chat_files(root))


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """Sessions for `librarian ingest PATH...`: folders are discovered, files taken as given,
    each main chat with its subagents' (`chats/<session id>/*.jsonl`)."""
    files: set[Path] = set()
    for p in (Path(p) for p in paths):
        if p.is_dir():
            files.update(_chat_files(p))
        elif p.is_file():
            files.add(p)
            header = read_header(p)
            if header is not None and _parent_id(p, header) is None:
                sub_dir = p.parent / header.session_id
                if sub_dir.is_dir():
                    files.update(sub_dir.glob("*.jsonl"))
    return _collect(files)
