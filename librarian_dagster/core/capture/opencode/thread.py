"""One OpenCode session as read from any of its three forms (`Thread`), and its messages into
turns.

OpenCode keeps a session as messages (`info`: role user or assistant) each made of parts
(packages/opencode/src/session/message-v2.ts). What they become:

* user `text` parts are the prompt; `synthetic` ones (a file's content read in for an @-mention,
  editor context, "Continue if you have next steps") and `ignored` ones are "meta"; `file` parts
  are `[file: <mime> <name>]` (a data: URL never leaves the parser); a `subtask` part is "meta";
  a `compaction` part marks a compaction, and the assistant message that answers it
  (`summary: true`) is the "compact_summary";
* an assistant message is one "text" turn with its tool uses, then one "tool_result" turn per
  finished tool (its output, or its error); `reasoning` is a "thinking" turn when asked for;
* `step-start`, `step-finish`, `snapshot`, `retry` and `agent` parts say nothing to remember;
  any other part type is counted in `skipped_by_kind` and skipped.

Standard library only: hooks and the MCP server import this without dagster.
"""

import posixpath
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from librarian_dagster.core.capture.opencode.tools import as_dict, patch_use, tool_use
from librarian_dagster.core.capture.records import ParseStats
from librarian_dagster.core.capture.session import CHANGE, ToolUse, Turn

__all__ = ["Thread", "ThreadState", "ms_time", "turns_of"]

_QUIET_PARTS = frozenset({"step-start", "step-finish", "snapshot", "retry", "agent"})


@dataclass
class Thread:
    """A session's info and its messages (`{info, parts}`, as `opencode export` writes them),
    with the child sessions its task tool spawned."""

    info: dict[str, Any]
    messages: list[Any]
    children: list["Thread"] = field(default_factory=list)


def ms_time(value: Any) -> datetime | None:
    """OpenCode's milliseconds since the epoch as an aware datetime."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


class ThreadState:
    """What a session's threads add up to beyond their turns: counts, tokens, models, times."""

    def __init__(self, include_thinking: bool) -> None:
        self.include_thinking = include_thinking
        self.stats = ParseStats()
        self.types: Counter[str] = Counter()
        self.parts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.models: dict[str, None] = {}
        self.versions: dict[str, None] = {}
        self.first: int | float | None = None
        self.last: int | float | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0
        self.cache_creation_tokens = 0
        self.cwd: str | None = None
        """The directory of the thread being read: tools name files relative to it."""

    def note_time(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return
        self.first = value if self.first is None else min(self.first, value)
        self.last = value if self.last is None else max(self.last, value)

    def note_info(self, info: dict[str, Any]) -> None:
        self.types["session"] += 1
        directory = info.get("directory")
        self.cwd = directory if isinstance(directory, str) and directory else None
        version = info.get("version")
        if isinstance(version, str) and version:
            self.versions.setdefault(version, None)
        time = as_dict(info.get("time"))
        self.note_time(time.get("created"))
        self.note_time(time.get("updated"))

    def note_assistant(self, info: dict[str, Any]) -> None:
        model = info.get("modelID")
        if isinstance(model, str) and model:
            self.models.setdefault(model, None)
        tokens = as_dict(info.get("tokens"))
        cache = as_dict(tokens.get("cache"))
        self.input_tokens += _int(tokens.get("input"))
        self.output_tokens += _int(tokens.get("output"))
        self.cache_read_tokens += _int(cache.get("read"))
        self.cache_creation_tokens += _int(cache.get("write"))


def turns_of(state: ThreadState, thread: Thread, agent_id: str | None) -> list[Turn]:
    """The turns of one thread's messages, in order; `agent_id` for a child session's."""
    state.note_info(thread.info)
    turns: list[Turn] = []
    after_compaction = False
    for message in thread.messages:
        if not isinstance(message, dict):
            state.skipped["message:<not an object>"] += 1
            continue
        info = as_dict(message.get("info"))
        parts = message.get("parts")
        parts = parts if isinstance(parts, list) else []
        role = info.get("role")
        state.types[role if isinstance(role, str) else "<missing>"] += 1
        time = as_dict(info.get("time"))
        state.note_time(time.get("created"))
        state.note_time(time.get("completed"))
        ts = ms_time(time.get("created"))
        mid = info.get("id") if isinstance(info.get("id"), str) else None
        if role == "user":
            after_compaction = _user(state, parts, ts, agent_id, mid, turns)
        elif role == "assistant":
            state.note_assistant(info)
            summary = info.get("summary") is True or after_compaction
            _assistant(state, parts, ts, agent_id, mid, turns, summary)
            after_compaction = False
        else:
            state.skipped[f"message:{role}"] += 1
    return turns


def _file_placeholder(part: dict[str, Any]) -> str:
    name = part.get("filename")
    source = as_dict(part.get("source"))
    name = name if isinstance(name, str) and name else source.get("path")
    mime = part.get("mime") if isinstance(part.get("mime"), str) else "unknown"
    return f"[file: {mime} {name}]" if isinstance(name, str) and name else f"[file: {mime}]"


def _user(
    state: ThreadState,
    parts: list[Any],
    ts: datetime | None,
    agent_id: str | None,
    mid: str | None,
    turns: list[Turn],
) -> bool:
    """Add a user message's turns; whether it asked for a compaction."""
    typed: list[str] = []
    meta: list[str] = []
    compaction = False
    for part in parts:
        ptype = _ptype(state, part)
        if ptype == "text":
            text = part.get("text") if isinstance(part.get("text"), str) else ""
            (meta if part.get("synthetic") or part.get("ignored") else typed).append(text)
        elif ptype == "file":
            typed.append(_file_placeholder(part))
        elif ptype == "subtask":
            desc = " ".join(
                str(part[k])
                for k in ("agent", "description", "prompt")
                if isinstance(part.get(k), str)
            )
            meta.append(f"[subtask] {desc}".strip())
        elif ptype == "compaction":
            state.stats.compactions += 1
            compaction = True
        elif ptype is not None and ptype not in _QUIET_PARTS:
            state.skipped[ptype] += 1
    text = "\n".join(t for t in typed if t)
    if text:
        turns.append(Turn("user", "prompt", text, ts, (), agent_id, mid))
    text = "\n".join(t for t in meta if t)
    if text:
        turns.append(Turn("user", "meta", text, ts, (), agent_id, mid))
    return compaction


def _ptype(state: ThreadState, part: Any) -> str | None:
    if not isinstance(part, dict):
        state.skipped["<not an object>"] += 1
        return None
    ptype = part.get("type")
    ptype = ptype if isinstance(ptype, str) else "<missing>"
    state.parts[ptype] += 1
    return ptype


def _assistant(
    state: ThreadState,
    parts: list[Any],
    ts: datetime | None,
    agent_id: str | None,
    mid: str | None,
    turns: list[Turn],
    summary: bool,
) -> None:
    texts: list[str] = []
    thinking: list[str] = []
    tools: list[ToolUse] = []
    results: list[Turn] = []
    patches: list[dict[str, Any]] = []
    for part in parts:
        ptype = _ptype(state, part)
        if ptype == "text":
            texts.append(part["text"] if isinstance(part.get("text"), str) else "")
        elif ptype == "reasoning":
            state.stats.thinking_blocks += 1
            if state.include_thinking and isinstance(part.get("text"), str):
                thinking.append(part["text"])
        elif ptype == "tool":
            tu = tool_use(part)
            tools.append(tu)
            result = _result(part, ts, agent_id)
            if result is not None:
                results.append(result)
        elif ptype == "patch":
            patches.append(part)
        elif ptype == "file":
            texts.append(_file_placeholder(part))
        elif ptype is not None and ptype not in _QUIET_PARTS:
            state.skipped[ptype] += 1
    changed = {
        posixpath.join(state.cwd or "", p)
        for t in tools
        if t.action == CHANGE
        for p in t.file_paths
    }
    for part in patches:
        tu = patch_use(part, changed)
        if tu is not None:
            tools.append(tu)
            changed.update(tu.file_paths)
    if thinking:
        turns.append(Turn("assistant", "thinking", "\n".join(thinking), ts, (), agent_id, mid))
    text = "\n".join(t for t in texts if t)
    if text or tools:
        kind = "compact_summary" if summary and text and not tools else "text"
        turns.append(Turn("assistant", kind, text, ts, tuple(tools), agent_id, mid))
    turns.extend(results)


def _result(part: dict[str, Any], ts: datetime | None, agent_id: str | None) -> Turn | None:
    state = as_dict(part.get("state"))
    status = state.get("status")
    if status == "completed":
        text = state.get("output")
    elif status == "error":
        text = state.get("error")
    else:
        return None  # pending or running: interrupted before it had a result
    time = as_dict(state.get("time"))
    when = ms_time(time.get("end")) or ts
    pid = part.get("id") if isinstance(part.get("id"), str) else None
    text = text if isinstance(text, str) else ""
    return Turn("user", "tool_result", text, when, (), agent_id, pid)
