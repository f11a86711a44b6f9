"""Parse one OpenCode session, from whichever of its three forms, into the session model.

Each form (database.py, storage.py, export.py) is read into a `Thread` (the session's info, its
messages with their parts, its child sessions); `session_from` alone turns a thread into the
`Session`, so the three forms mean the same. The main dialogue comes first; then each child
session's turns (children by their first time, each with `agent_id` = its session id; their
prompt is the task the parent gave). The title is OpenCode's own unless it is the placeholder it
gives a session before naming it. `parse_session` never raises on bad content.

Standard library only: hooks and the MCP server import this without dagster.
"""

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.opencode.database import is_sqlite, load_database
from librarian_dagster.core.capture.opencode.export import is_export, load_export
from librarian_dagster.core.capture.opencode.storage import load_storage
from librarian_dagster.core.capture.opencode.thread import Thread, ThreadState, ms_time, turns_of
from librarian_dagster.core.capture.opencode.tools import as_dict
from librarian_dagster.core.capture.records import ParseStats
from librarian_dagster.core.capture.session import UNREADABLE, Session, Turn, nothing_to_remember

__all__ = ["parse_session", "session_from"]

AGENT = "opencode"
# OpenCode's title for a session it has not named yet (session/index.ts: createDefaultTitle).
_PLACEHOLDER_RE = re.compile(r"^(New session|Child session) - \d{4}-\d\d-\d\dT")
_MAX_MALFORMED_EXAMPLES = 20


def _flatten(thread: Thread, seen: set[int]) -> list[Thread]:
    """A thread's descendants, each once."""
    found: list[Thread] = []
    for child in thread.children:
        if id(child) not in seen:
            seen.add(id(child))
            found.append(child)
            found.extend(_flatten(child, seen))
    return found


def _title(info: dict[str, object]) -> str | None:
    title = info.get("title")
    if isinstance(title, str) and title.strip() and not _PLACEHOLDER_RE.match(title):
        return title
    return None


def session_from(
    thread: Thread,
    files: SessionFiles,
    fingerprint: str,
    *,
    include_thinking: bool = False,
    stats: ParseStats | None = None,
) -> Session:
    """The session model of a thread read from `files` (any form), fingerprinted before."""
    state = ThreadState(include_thinking)
    if stats is not None:
        state.stats = stats
    turns = turns_of(state, thread, None)
    agents = 0
    child_turns: list[tuple[str, str, list[Turn]]] = []
    for child in _flatten(thread, {id(thread)}):
        cid = child.info.get("id")
        cid = cid if isinstance(cid, str) and cid else f"child-{len(child_turns)}"
        got = turns_of(state, child, cid)
        if got:
            agents += 1
            first = min((t.timestamp.isoformat() for t in got if t.timestamp), default="~")
            child_turns.append((first, cid, got))
    for _, _, got in sorted(child_turns, key=lambda c: (c[0], c[1])):
        turns.extend(got)
    st = state.stats
    st.records_by_type = dict(state.types)
    st.blocks_by_type = dict(state.parts)
    st.skipped_by_kind = dict(state.skipped)
    st.turns = len(turns)
    st.tool_uses = sum(len(t.tool_uses) for t in turns)
    st.subagents = agents
    info = thread.info
    cwd = info.get("directory") if isinstance(info.get("directory"), str) else None
    sid = info.get("id")
    sid = sid if isinstance(sid, str) and sid else files.session_id
    time = as_dict(info.get("time"))
    return Session.of(
        files,
        fingerprint,
        session_id=sid,
        project=project_from(cwd or None, files.main),
        cwd=cwd or None,
        started_at=ms_time(time.get("created")) or ms_time(state.first),
        ended_at=ms_time(state.last),
        title=_title(info),
        versions=tuple(state.versions),
        models=tuple(state.models),
        turns=turns,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        cache_creation_tokens=state.cache_creation_tokens,
        stats=st,
        skip_reason=_skip_reason(thread, turns),
    )


def _skip_reason(thread: Thread, turns: list[Turn]) -> str | None:
    said = thread.messages or any(c.messages for c in thread.children)
    return nothing_to_remember(turns, 1, True, None if said else "no messages")


def _skipped(files: SessionFiles, fingerprint: str, reason: str, stats: ParseStats) -> Session:
    main = files.main
    return Session.of(
        files,
        fingerprint,
        project=project_from(None, main) if main else "unknown",
        stats=stats,
        skip_reason=reason,
    )


def _read(files: SessionFiles, main: Path, stats: ParseStats) -> tuple[Thread | None, str | None]:
    """The session's thread from its form, or why there is none (raises OSError, sqlite3.Error)."""
    if is_sqlite(main):
        thread, malformed, size = load_database(main, files.session_id)
        reason = None if thread else "no conversation (session no longer in the database)"
    elif is_export(main):
        thread, reason = load_export(main)
        malformed, size = ([f"{main.name}: {reason}"] if reason and thread is None else []), 0
        size = main.stat().st_size
        for path in files.subagents:
            child, why = load_export(path)
            size += path.stat().st_size
            if child is not None and thread is not None:
                thread.children.append(child)
            elif why:
                malformed.append(f"{path.name}: {why}")
    else:
        thread, malformed, size = load_storage(files)
        reason = None if thread else "no conversation (no session info)"
    stats.bytes += size
    stats.malformed_lines += len(malformed)
    stats.malformed_examples.extend(malformed[:_MAX_MALFORMED_EXAMPLES])
    return thread, reason


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """Parse one OpenCode session (any form). Never raises on bad content."""
    fingerprint = files.fingerprint()
    stats = ParseStats()
    main = files.main
    if main is None:
        return _skipped(files, fingerprint, "no files", stats)
    try:
        if main.stat().st_size == 0:
            return _skipped(files, fingerprint, "empty file", stats)
        thread, reason = _read(files, main, stats)
    except OSError as exc:
        why = f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
        return _skipped(files, fingerprint, why, stats)
    except sqlite3.Error as exc:
        # Locked past the busy timeout, or damaged: left for a later run, never raised.
        return _skipped(files, fingerprint, f"{UNREADABLE} (database: {exc})", stats)
    if thread is None:
        return _skipped(files, fingerprint, reason or "no conversation", stats)
    return session_from(thread, files, fingerprint, include_thinking=include_thinking, stats=stats)
