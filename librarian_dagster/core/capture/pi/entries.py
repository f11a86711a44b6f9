"""Parse one Pi session (a JSONL tree of entries) into the session model: the branch that was kept.

Pi's entries form a tree through `parentId`; `/tree` and `/fork` start new branches in the same
file. The session is the branch Pi itself resumes: from the leaf, which on loading is the last
entry appended (SessionManager._buildIndex), back to the root. Entries on other branches are
counted in `stats.skipped_by_kind["abandoned branch"]` and become no turns. Version 1 files have
no ids: their entries are one line, in file order (as Pi migrates them).

What becomes a turn, along the kept branch:

* `message` entries by role: "user" is a "prompt", "assistant" gives "text" turns with its
  `toolCall`s (thinking only with include_thinking; signatures are never read), "toolResult" a
  "tool_result" that marks its tool use `is_error`; "bashExecution" (the user's `!cmd`) a
  prompt `! cmd` and its output; "custom" (extensions) "meta"; "branchSummary" and
  "compactionSummary" a "compact_summary". Images become `[image: <type>]`.
* `compaction` and `branch_summary` entries: "compact_summary" (a compaction keeps the turns
  before it in the file, so they stay too); `custom_message`: "meta".
* `model_change`, `thinking_level_change`, `custom`, `label`: counted only; `session_info`
  names the session (its latest name, as Pi shows it). Unknown types: `stats.skipped_by_kind`.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.pi.tools import tool_use
from librarian_dagster.core.capture.records import (
    ParseStats,
    count_of,
    iter_records,
    parse_ts,
    text_of,
)
from librarian_dagster.core.capture.session import (
    UNREADABLE,
    Session,
    ToolUse,
    Turn,
    nothing_to_remember,
)

__all__ = ["parse_session"]

ABANDONED = "abandoned branch"
_PASSED = frozenset({"model_change", "thinking_level_change", "custom", "label", "session_info"})


@dataclass
class _State:
    include_thinking: bool
    stats: ParseStats = field(default_factory=ParseStats)
    types: Counter[str] = field(default_factory=Counter)
    turns: list[Turn] = field(default_factory=list)
    tools: dict[str, ToolUse] = field(default_factory=dict)
    models: dict[str, None] = field(default_factory=dict)
    chosen_models: dict[str, None] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    messages: int = 0

    def add(self, entry: dict[str, Any], role: str, kind: str, text: str,
            tools: tuple[ToolUse, ...] = ()) -> None:  # fmt: skip
        uuid = entry.get("id")
        self.turns.append(
            Turn(
                role,
                kind,
                text,
                parse_ts(entry.get("timestamp")),
                tools,
                None,
                uuid if isinstance(uuid, str) else None,
            )
        )


def _text(content: Any) -> str:
    """The text of a content value (a string, or text and image items); base64 never leaves."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for item in content if isinstance(content, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            parts.append(text_of(item.get("text")))
        elif item.get("type") == "image":
            parts.append(f"[image: {text_of(item.get('mimeType')) or 'unknown'}]")
    return "\n".join(p for p in parts if p)


def _assistant(state: _State, entry: dict[str, Any], msg: dict[str, Any]) -> None:
    if text_of(msg.get("model")):
        state.models.setdefault(msg["model"], None)
    usage = msg.get("usage")
    if isinstance(usage, dict):
        for i, key in enumerate(("input", "output", "cacheRead", "cacheWrite")):
            state.tokens[i] += count_of(usage.get(key))
    texts: list[str] = []
    thinking: list[str] = []
    uses: list[ToolUse] = []
    content = msg.get("content")
    for item in content if isinstance(content, list) else ():
        kind = item.get("type") if isinstance(item, dict) else None
        state.stats.blocks_by_type[str(kind)] = state.stats.blocks_by_type.get(str(kind), 0) + 1
        if kind == "text":
            texts.append(text_of(item.get("text")))
        elif kind == "thinking":
            state.stats.thinking_blocks += 1
            thinking.append(text_of(item.get("thinking")))
        elif kind == "toolCall":
            use = tool_use(item)
            uses.append(use)
            if use.id:
                state.tools[use.id] = use
    if isinstance(content, str):
        texts.append(content)
    if state.include_thinking and any(t.strip() for t in thinking):
        state.add(entry, "assistant", "thinking", "\n".join(t for t in thinking if t.strip()))
    text = "\n".join(t for t in texts if t)
    if text.strip() or uses:
        state.add(entry, "assistant", "text", text, tuple(uses))
    elif text_of(msg.get("errorMessage")):
        # A failed or aborted call: what went wrong is all it said.
        state.add(entry, "assistant", "other", f"[error: {msg['errorMessage']}]")


def _tool_result(state: _State, entry: dict[str, Any], msg: dict[str, Any]) -> None:
    use = state.tools.get(text_of(msg.get("toolCallId")))
    if use is not None and msg.get("isError") is True:
        use.is_error = True
    text = _text(msg.get("content"))
    if text.strip():
        state.add(entry, "user", "tool_result", text)


def _message(state: _State, entry: dict[str, Any]) -> bool:
    msg = entry.get("message")
    if not isinstance(msg, dict):
        return False
    role = msg.get("role")
    if role in ("user", "assistant", "toolResult", "bashExecution"):
        state.messages += 1
    if role == "assistant":
        _assistant(state, entry, msg)
    elif role == "toolResult":
        _tool_result(state, entry, msg)
    elif role == "user" and _text(msg.get("content")).strip():
        state.add(entry, "user", "prompt", _text(msg.get("content")))
    elif role == "bashExecution" and text_of(msg.get("command")):
        state.add(entry, "user", "prompt", f"! {msg['command']}")
        if text_of(msg.get("output")).strip():
            state.add(entry, "user", "tool_result", msg["output"])
    elif role == "custom" and _text(msg.get("content")).strip():
        state.add(entry, "user", "meta", _text(msg.get("content")))
    elif role in ("branchSummary", "compactionSummary") and text_of(msg.get("summary")).strip():
        state.add(entry, "user", "compact_summary", msg["summary"])
    return role in (
        "user",
        "assistant",
        "toolResult",
        "bashExecution",
        "custom",
        "branchSummary",
        "compactionSummary",
    )


def _entry(state: _State, entry: dict[str, Any], rtype: str) -> bool:
    """One entry of the kept branch into turns; False for a shape this reader does not know."""
    if rtype == "message":
        return _message(state, entry)
    if rtype in ("compaction", "branch_summary"):
        state.stats.compactions += int(rtype == "compaction")
        if text_of(entry.get("summary")).strip():
            state.add(entry, "user", "compact_summary", entry["summary"])
    elif rtype == "custom_message":
        if _text(entry.get("content")).strip():
            state.add(entry, "user", "meta", _text(entry.get("content")))
    elif rtype == "model_change":
        if text_of(entry.get("modelId")):
            state.chosen_models.setdefault(entry["modelId"], None)
    else:
        return rtype in _PASSED
    return True


def _kept_branch(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries from the root to the leaf (the last entry appended), in that order."""
    by_id = {e["id"]: e for e in entries if isinstance(e.get("id"), str)}
    if not by_id:
        return entries  # version 1: no tree, one line of entries
    leaf = next((e for e in reversed(entries) if isinstance(e.get("id"), str)), None)
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while leaf is not None and leaf["id"] not in seen:
        seen.add(leaf["id"])
        path.append(leaf)
        parent = leaf.get("parentId")
        leaf = by_id.get(parent) if isinstance(parent, str) else None
    path.reverse()
    return path


def _read(path: Path, state: _State) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The header and the entries, in file order; every record's type counted."""
    head: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    for rec in iter_records(path, state.stats):
        rtype = rec.get("type")
        state.types[rtype if isinstance(rtype, str) else "<missing>"] += 1
        if rtype == "session" and head is None:
            head = rec
        else:
            entries.append(rec)
    return head, entries


def _walk(state: _State, entries: list[dict[str, Any]]) -> None:
    kept = _kept_branch(entries)
    skipped = state.stats.skipped_by_kind
    if len(kept) < len(entries):
        skipped[ABANDONED] = len(entries) - len(kept)
    for entry in kept:
        rtype = entry.get("type")
        rtype = rtype if isinstance(rtype, str) else "<missing>"
        if not _entry(state, entry, rtype):
            skipped[rtype] = skipped.get(rtype, 0) + 1


def _title(entries: list[dict[str, Any]]) -> str | None:
    """The latest `session_info` name in the file (an empty one clears it), as Pi lists it."""
    for entry in reversed(entries):
        if entry.get("type") == "session_info":
            return text_of(entry.get("name")).strip() or None
    return None


def _skip_reason(size: int, state: _State) -> str | None:
    none = "no user or assistant messages" if state.messages == 0 else None
    return nothing_to_remember(state.turns, size, bool(state.types), none)


def _times(head: dict[str, Any] | None, entries: list[dict[str, Any]]) -> tuple[Any, Any]:
    stamps = [e["timestamp"] for e in entries if isinstance(e.get("timestamp"), str)]
    first = head.get("timestamp") if head and isinstance(head.get("timestamp"), str) else None
    first = first or (stamps[0] if stamps else None)
    return parse_ts(first), parse_ts(stamps[-1] if stamps else first)


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """Parse one Pi session (the branch it kept). Never raises on bad content."""
    fingerprint = files.fingerprint()
    state = _State(include_thinking)
    head: dict[str, Any] | None = None
    entries: list[dict[str, Any]] = []
    skip: str | None = "no files" if files.main is None else None
    if files.main is not None:
        try:
            size = files.main.stat().st_size
            head, entries = _read(files.main, state)
            _walk(state, entries)
            skip = _skip_reason(size, state)
        except OSError as exc:
            skip = f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
    cwd = text_of(head.get("cwd")) or None if head else None
    started, ended = _times(head, entries)
    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.turns = len(state.turns)
    stats.tool_uses = sum(len(t.tool_uses) for t in state.turns)
    return Session.of(
        files,
        fingerprint,
        project=project_from(cwd, files.main),
        cwd=cwd,
        started_at=started,
        ended_at=ended,
        title=_title(entries),
        models=tuple(state.models or state.chosen_models),
        turns=state.turns,
        input_tokens=state.tokens[0],
        output_tokens=state.tokens[1],
        cache_read_tokens=state.tokens[2],
        cache_creation_tokens=state.tokens[3],
        stats=stats,
        skip_reason=skip,
    )
