"""How a Claude Code session's records become turns: content blocks, tool uses, what the user
typed.

* Assistant records that share `message.id` (one per content block) make one turn; token usage
  is counted once per `message.id`.
* User text is a "prompt" when typed (slash commands become `/name args`, `!` shell input
  `! cmd`); `isMeta` records, command caveats and stdout, interrupts, task notifications and
  IDE/system reminders are "meta"; `tool_result` blocks are "tool_result" turns.
* Thinking is left out unless `include_thinking`. Images and documents become `[image: <type>]`
  / `[document: <type>]`: base64 never leaves the parser.
* Unknown content blocks are counted, and text they carry is kept as "other".
* What each tool use did (`ToolUse.action`) is decided here, from Claude Code's tool names.

Standard library only: hooks and the MCP server import this without dagster.
"""

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from librarian_dagster.core.capture.records import ParseStats, count_of, parse_ts
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse, Turn
from librarian_dagster.core.capture.tool_summary import detail_of, strings_of, summary_of

__all__ = ["SessionState", "TurnBuilder"]

_SUMMARY_WIDTH = 100


def _placeholder(block: dict[str, Any]) -> str:
    src = block.get("source")
    media = src.get("media_type") if isinstance(src, dict) else None
    return f"[{block.get('type', 'attachment')}: {media or 'unknown'}]"


def _blocks_text(content: Any) -> str:
    """Text of a content value (string or list of blocks); base64 becomes a placeholder."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text":
            parts.append(str(block.get("text") or ""))
        elif btype in ("image", "document"):
            parts.append(_placeholder(block))
        elif btype == "tool_reference":
            parts.append(f"[tool: {block.get('tool_name', '?')}]")
        elif btype == "tool_result":
            parts.append(_blocks_text(block.get("content")))
        elif isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(p for p in parts if p)


_ACTIONS = {
    **dict.fromkeys(("Edit", "Write", "MultiEdit", "NotebookEdit"), CHANGE),
    # Glob, Grep and LS name folders, not the file that was worked on: searches.
    **dict.fromkeys(("Read", "NotebookRead"), READ),
    **dict.fromkeys(("Glob", "Grep", "LS", "WebSearch", "WebFetch", "ToolSearch"), SEARCH),
    **dict.fromkeys(("Bash", "BashOutput", "PowerShell"), RUN),
}


def _tool_use(block: dict[str, Any]) -> ToolUse:
    name = str(block.get("name") or "?")
    inp = block.get("input")
    inp = inp if isinstance(inp, dict) else {}
    paths = strings_of(inp, ("file_path", "notebook_path", "path"))
    edits = inp.get("edits")
    if isinstance(edits, list):
        paths += [p for e in edits if isinstance(e, dict) for p in strings_of(e, ("file_path",))]
    command = inp.get("command") if isinstance(inp.get("command"), str) else None
    detail = detail_of(inp, ("pattern", "description", "query", "url", "skill", "prompt"))
    return ToolUse(
        action=_ACTIONS.get(name, ""),
        name=name,
        file_paths=tuple(dict.fromkeys(paths)),
        command=command,
        summary=summary_of(name, command, paths[0] if paths else None, detail),
        id=block.get("id") if isinstance(block.get("id"), str) else None,
    )


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as Claude Code's hooks show it (`tool_name`, `tool_input`): as transcripts."""
    return _tool_use({"name": name, "input": dict(tool_input)})


_COMMAND_NAME_RE = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_COMMAND_ARGS_RE = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_BASH_INPUT_RE = re.compile(r"<bash-input>(.*?)</bash-input>", re.S)
# User-role text that Claude Code injected rather than the user typing it.
_INJECTED_PREFIXES = (
    "<local-command-caveat>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<system-reminder>",
    "<ide_opened_file>",
    "<ide_selection>",
    "<user-prompt-submit-hook>",
    "[Request interrupted by user",
    "Caveat: The messages below were generated",
)


def _classify_user_text(text: str) -> tuple[str, str]:
    """(kind, text) for user-role text: typed prompt, slash command, or injected meta."""
    stripped = text.lstrip()
    if stripped.startswith(_INJECTED_PREFIXES):
        return "meta", text
    if stripped.startswith(("<command-name>", "<command-message>")):
        # A slash command the user typed: keep it as "/name args", drop the XML wrapper.
        name = _COMMAND_NAME_RE.search(stripped)
        args = _COMMAND_ARGS_RE.search(stripped)
        cmd = (name.group(1).strip() if name else "").strip()
        arg = args.group(1).strip() if args else ""
        return "prompt", f"{cmd} {arg}".strip() or text
    if stripped.startswith("<bash-input>"):
        m = _BASH_INPUT_RE.search(stripped)
        return "prompt", f"! {m.group(1).strip()}" if m else text
    return "prompt", text


class TurnBuilder:
    """Accumulates one file's (or one agent's) turns; assistant records merge by message.id."""

    def __init__(self, session: "SessionState", agent_id: str | None) -> None:
        self.s = session
        self.agent_id = agent_id
        self.turns: list[Turn] = []
        self._msg_turn: dict[str, Turn] = {}
        self._msg_thinking: dict[str, Turn] = {}

    def add(self, rec: dict[str, Any]) -> None:
        rtype = rec.get("type")
        if rtype == "assistant":
            self._assistant(rec)
        elif rtype == "user":
            self._user(rec)

    def _assistant(self, rec: dict[str, Any]) -> None:
        s = self.s
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        ts = rec.get("timestamp")
        mid = msg.get("id") if isinstance(msg.get("id"), str) else None
        model = msg.get("model")
        if isinstance(model, str) and model and model != "<synthetic>":
            s.models.setdefault(model, None)
        usage = msg.get("usage")
        if mid and isinstance(usage, dict) and mid not in s.usage_seen:
            s.usage_seen.add(mid)
            s.input_tokens += count_of(usage.get("input_tokens"))
            s.output_tokens += count_of(usage.get("output_tokens"))
            s.cache_read_tokens += count_of(usage.get("cache_read_input_tokens"))
            s.cache_creation_tokens += count_of(usage.get("cache_creation_input_tokens"))
        content = msg.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        texts: list[str] = []
        thinking: list[str] = []
        tools: list[ToolUse] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = str(block.get("type"))
            s.blocks[btype] += 1
            if btype == "text":
                texts.append(str(block.get("text") or ""))
            elif btype in ("thinking", "redacted_thinking"):
                s.stats.thinking_blocks += 1
                if s.include_thinking and isinstance(block.get("thinking"), str):
                    thinking.append(block["thinking"])
            elif btype in ("tool_use", "server_tool_use"):
                tu = _tool_use(block)
                tools.append(tu)
                if tu.id:
                    s.tool_by_id[tu.id] = tu
            elif btype in ("image", "document"):
                texts.append(_placeholder(block))
            elif isinstance(block.get("text"), str):
                texts.append(block["text"])
        if thinking:
            self._merge(self._msg_thinking, mid, "thinking", "\n".join(thinking), ts, (), rec)
        if texts or tools:
            self._merge(
                self._msg_turn, mid, "text", "\n".join(t for t in texts if t), ts, tuple(tools), rec
            )

    def _merge(
        self,
        index: dict[str, Turn],
        mid: str | None,
        kind: str,
        text: str,
        ts: Any,
        tools: tuple[ToolUse, ...],
        rec: dict[str, Any],
    ) -> None:
        turn = index.get(mid) if mid else None
        if turn is not None:
            if text:
                turn.text = f"{turn.text}\n{text}" if turn.text else text
            turn.tool_uses = turn.tool_uses + tools
            return
        uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
        turn = Turn("assistant", kind, text, parse_ts(ts), tools, self.agent_id, uuid)
        self.turns.append(turn)
        if mid:
            index[mid] = turn

    def _user(self, rec: dict[str, Any]) -> None:
        s = self.s
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        ts = parse_ts(rec.get("timestamp"))
        uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
        content = msg.get("content")
        is_meta = bool(rec.get("isMeta"))
        if rec.get("isCompactSummary"):
            text = _blocks_text(content)
            self.turns.append(Turn("user", "compact_summary", text, ts, (), self.agent_id, uuid))
            return
        if isinstance(content, str):
            kind, text = ("meta", content) if is_meta else _classify_user_text(content)
            if text:
                self.turns.append(Turn("user", kind, text, ts, (), self.agent_id, uuid))
            return
        if not isinstance(content, list):
            return
        prompt_parts: list[str] = []
        kinds: set[str] = set()
        for block in content:
            if not isinstance(block, dict):
                if isinstance(block, str):
                    prompt_parts.append(block)
                continue
            btype = str(block.get("type"))
            s.blocks[btype] += 1
            if btype == "tool_result":
                text = _blocks_text(block.get("content"))
                if not text and isinstance(rec.get("toolUseResult"), str):
                    text = rec["toolUseResult"]
                tu = s.tool_by_id.get(str(block.get("tool_use_id")))
                if tu is not None and block.get("is_error"):
                    tu.is_error = True
                self.turns.append(Turn("user", "tool_result", text, ts, (), self.agent_id, uuid))
            elif btype == "text":
                text = str(block.get("text") or "")
                kind, text = ("meta", text) if is_meta else _classify_user_text(text)
                kinds.add(kind)
                prompt_parts.append(text)
            elif btype in ("image", "document"):
                prompt_parts.append(_placeholder(block))
            elif isinstance(block.get("text"), str):
                kinds.add("other")
                prompt_parts.append(block["text"])
        text = "\n".join(p for p in prompt_parts if p)
        if text:
            # A prompt with any typed text is a prompt; only all-injected text is meta.
            kind = (
                "meta"
                if is_meta
                else ("prompt" if "prompt" in kinds or not kinds else sorted(kinds)[0])
            )
            self.turns.append(Turn("user", kind, text, ts, (), self.agent_id, uuid))


class SessionState:
    """What the records of one session add up to beyond its turns, shared by its builders:
    counts, tokens, models, the cwd and branch, the first and last time, titles."""

    def __init__(self, include_thinking: bool) -> None:
        self.include_thinking = include_thinking
        self.stats = ParseStats()
        self.types: Counter[str] = Counter()
        self.blocks: Counter[str] = Counter()
        self.usage_seen: set[str] = set()
        # Records seen, to count a repeated record once and match a summary to its session.
        self.uuids_seen: set[str] = set()
        self.tool_by_id: dict[str, ToolUse] = {}
        self.models: dict[str, None] = {}
        self.versions: dict[str, None] = {}
        self.summaries: list[tuple[str | None, str]] = []
        self.custom_title: str | None = None
        self.cwd: str | None = None
        self.git_branch: str | None = None
        self.first_ts_raw: str | None = None
        self.last_ts_raw: str | None = None
        self.conversation_records = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0
        self.cache_creation_tokens = 0

    def envelope(self, rec: dict[str, Any], main: bool) -> None:
        v = rec.get("version")
        if isinstance(v, str) and v:
            self.versions.setdefault(v, None)
        if main:
            if self.cwd is None and isinstance(rec.get("cwd"), str) and rec["cwd"]:
                self.cwd = rec["cwd"]
            b = rec.get("gitBranch")
            if isinstance(b, str) and b:
                # The last branch seen is the one the work ended on.
                self.git_branch = b
        self.note_time(rec)

    def note_time(self, rec: dict[str, Any]) -> None:
        """Widen the session's first/last time to this record's timestamp."""
        ts = rec.get("timestamp")
        if isinstance(ts, str) and ts:
            # ISO-8601 UTC strings of one format compare correctly as strings: parse only two.
            if self.first_ts_raw is None or ts < self.first_ts_raw:
                self.first_ts_raw = ts
            if self.last_ts_raw is None or ts > self.last_ts_raw:
                self.last_ts_raw = ts
