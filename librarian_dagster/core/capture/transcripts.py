"""Parse Claude Code session transcripts (JSONL) into `Session` / `Turn` dataclasses.

The transcript format is internal to Claude Code and changes between releases (see
`shared/data/transcripts/FORMATS.md`), so this module is tolerant by construction:

* files are read line by line in binary mode, so memory is bounded by the largest record (plus
  the text the session keeps), and every line is decoded on its own: bad UTF-8 is replaced, NUL
  bytes are dropped;
* a line that is not one JSON object is retried as several records glued together (`}{`), and
  after a cut record reading resumes at the next real record; what is lost is counted as
  malformed with its line number and a reason, never its content;
* unknown record types and content blocks are counted, and text they carry is kept as "other";
* `parse_session` never raises on bad content (an unreadable file becomes a `skip_reason`).

What the turns mean:

* Turn order: the main dialogue first, in file order, then each subagent's turns (agents sorted
  by their first timestamp, each agent's turns in file order). Subagent turns carry `agent_id`;
  their "prompt" is the task the parent agent gave, not something the user typed.
* Assistant records that share `message.id` (one per content block) make one turn; token usage
  is counted once per `message.id`. A record seen twice (same `uuid`) counts once.
* User text is a "prompt" when typed (slash commands become `/name args`, `!` shell input
  `! cmd`); `isMeta` records, command caveats and stdout, interrupts, task notifications and
  IDE/system reminders are "meta"; `tool_result` blocks are "tool_result" turns.
* Thinking is left out unless `include_thinking`. Images and documents become `[image: <type>]`
  / `[document: <type>]`: base64 never leaves the parser.
* Compaction appends to the same file, so the turns before a `compact_boundary` are still here;
  the summary message that follows it is kept as kind "compact_summary" (a restatement of those
  turns: skip it when reading the dialogue, use it when only the tail is wanted). Boundaries are
  counted in `stats.compactions`.
* Subagents: new layout `<session>/subagents/agent-*.jsonl`, old layout `agent-*.jsonl` beside
  the session (attached by the `sessionId` in its records), and 2.1.x `agent_progress` records
  in the parent (only `data.message` is read; `normalizedMessages` repeats the history).
* The title comes from a `summary` whose `leafUuid` is in this session, else `custom-title`.
  Older versions wrote a session's summary into a later session's file: there it is counted
  in `stats.summaries_unmatched`, and titles nothing.
* `toolUseResult` (a structured copy of the tool's output) is not decoded on long lines and
  not passed on; the `tool_result` block is. `progress` records other than agent_progress and
  `file-history-snapshot` records are only counted and timed.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ParseStats",
    "Session",
    "SessionFiles",
    "ToolUse",
    "Turn",
    "discover_sessions",
    "iter_records",
    "parse_session",
    "project_of",
    "session_files_for",
    "session_head",
]

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_AGENT_FILE_RE = re.compile(r"^agent-([0-9A-Za-z_-]+)\.jsonl$")
# How many leading lines of an old-layout agent file we read to find its parent's sessionId.
_HEAD_LINES = 20
_MAX_MALFORMED_EXAMPLES = 20
_READ_BUFFER = 1 << 20
_SUMMARY_WIDTH = 100


# --------------------------------------------------------------------------------------------
# Files on disk
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFiles:
    """One session as found on disk: its main file and the subagent files attached to it."""

    session_id: str
    main: Path | None
    subagents: tuple[Path, ...] = ()

    @property
    def paths(self) -> tuple[Path, ...]:
        return ((self.main,) if self.main else ()) + self.subagents

    def fingerprint(self) -> str:
        """Changes when any file's size or mtime_ns changes (stat only, never reads content)."""
        digest = hashlib.sha1()
        for path in self.paths:
            try:
                st = path.stat()
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            except OSError:
                # A file that vanished is a change too.
                digest.update(f"{path}\0missing\n".encode())
        return digest.hexdigest()[:16]


def _first_session_id(path: Path) -> str | None:
    """The sessionId of the first record that has one (old-layout agent files name the parent)."""
    try:
        with path.open("rb") as fh:
            for i, raw in enumerate(fh):
                if i >= _HEAD_LINES:
                    break
                for rec in _decode_line(raw)[0]:
                    sid = rec.get("sessionId")
                    if isinstance(sid, str) and sid:
                        return sid
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class SessionHead:
    """What the head of a session's main file says about where and when it began."""

    project: str
    started_at: datetime | None


# Enough leading lines to pass the summary and file-history records that may come first.
_HEAD_SCAN_LINES = 100


def session_head(files: SessionFiles) -> SessionHead:
    """The project (as `Session.project` names it) and the first timestamp, from the head of
    the main file alone: cheap, and both stay the same as the file grows."""
    path = files.main or (files.subagents[0] if files.subagents else None)
    cwd: str | None = None
    first: str | None = None
    if path is not None:
        try:
            with path.open("rb") as fh:
                for i, raw in enumerate(fh):
                    if i >= _HEAD_SCAN_LINES or (cwd and first):
                        break
                    for rec in _decode_line(raw)[0]:
                        if cwd is None and isinstance(rec.get("cwd"), str) and rec["cwd"]:
                            cwd = rec["cwd"]
                        ts = rec.get("timestamp")
                        if first is None and isinstance(ts, str) and ts:
                            first = ts
        except OSError:
            pass
    return SessionHead(project=_project_from(cwd, path), started_at=_parse_ts(first))


def _is_hidden_or_spill(path: Path, root: Path) -> bool:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = path.parts
    # tool-results/ holds spilled tool outputs, memory/ the auto-memory: neither is a transcript.
    return any(p in ("tool-results", "memory") for p in parts[:-1])


def _distinct_files(files: Iterable[Path]) -> list[Path]:
    """Each file once, however many names it has in the mirror (symlinks, hard links).

    Told apart by device and inode; a name that is not a symlink is kept over one that is. Two
    names of one file would otherwise be two sessions, and the same memory twice.
    """
    kept: dict[tuple[int, int], Path] = {}
    for path in sorted(set(files), key=lambda p: (p.is_symlink(), p)):
        try:
            st = path.stat()
        except OSError:
            continue  # gone since it was listed
        kept.setdefault((st.st_dev, st.st_ino), path)
    return sorted(kept.values())


def _collect(files: Iterable[Path]) -> list[SessionFiles]:
    """Group transcript files into sessions (shared by discover_sessions and session_files_for)."""
    mains: dict[str, Path] = {}
    subs: dict[str, set[Path]] = {}
    for path in _distinct_files(files):
        name = path.name
        if path.parent.name == "subagents" and name.startswith("agent-"):
            # New layout: <session>/subagents/agent-<id>.jsonl
            subs.setdefault(path.parent.parent.name, set()).add(path)
            continue
        if _AGENT_FILE_RE.match(name):
            # Old layout: agent-<8hex>.jsonl next to the sessions; its records name the parent.
            parent = _first_session_id(path) or path.stem
            subs.setdefault(parent, set()).add(path)
            continue
        stem = path.stem
        sid = stem if _UUID_RE.match(stem) else (_first_session_id(path) or stem)
        if sid in mains and mains[sid] != path:
            # Two different files claim one id (e.g. checkpoint copies named full.jsonl): keep
            # partition keys unique and stable by suffixing a hash of the path.
            sid = f"{sid}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        mains[sid] = path
    out = [SessionFiles(sid, main, tuple(sorted(subs.pop(sid, ())))) for sid, main in mains.items()]
    out.extend(SessionFiles(sid, None, tuple(sorted(paths))) for sid, paths in subs.items())
    out.sort(key=lambda s: s.session_id)
    return out


def discover_sessions(root: Path) -> list[SessionFiles]:
    """Every session under a mirror of ~/.claude/projects (or a folder of loose .jsonl files)."""
    root = Path(root)
    if not root.is_dir():
        return []
    files = [p for p in root.rglob("*.jsonl") if p.is_file() and not _is_hidden_or_spill(p, root)]
    return _collect(files)


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """Sessions for `librarian ingest PATH...`: folders are discovered, files taken as given.

    A main file also picks up its subagents: `<stem>/subagents/agent-*.jsonl` and old-layout
    `agent-*.jsonl` siblings whose records name it.
    """
    files: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.update(f for s in discover_sessions(p) for f in s.paths)
        elif p.is_file():
            files.add(p)
            if not _AGENT_FILE_RE.match(p.name):
                sub_dir = p.parent / p.stem / "subagents"
                if sub_dir.is_dir():
                    files.update(sub_dir.glob("agent-*.jsonl"))
                for sib in p.parent.glob("agent-*.jsonl"):
                    if _first_session_id(sib) == p.stem:
                        files.add(sib)
    return _collect(files)


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


@dataclass
class ToolUse:
    name: str
    file_paths: tuple[str, ...] = ()
    command: str | None = None
    summary: str = ""
    is_error: bool = False
    id: str | None = None


@dataclass
class Turn:
    role: str  # "user" | "assistant"
    # "prompt" (user typed), "text" (assistant text), "tool_result", "meta", "compact_summary",
    # "thinking", "other"
    kind: str
    text: str
    timestamp: datetime | None
    tool_uses: tuple[ToolUse, ...] = ()
    agent_id: str | None = None
    uuid: str | None = None


@dataclass
class ParseStats:
    records_by_type: dict[str, int] = field(default_factory=dict)
    blocks_by_type: dict[str, int] = field(default_factory=dict)
    malformed_lines: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    lines: int = 0
    bytes: int = 0
    turns: int = 0
    tool_uses: int = 0
    subagents: int = 0
    compactions: int = 0
    thinking_blocks: int = 0
    duplicate_records: int = 0  # dialogue records (user, assistant, system...) seen twice
    summaries_unmatched: int = 0


@dataclass
class Session:
    session_id: str
    project: str
    cwd: str | None = None
    git_branch: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    title: str | None = None
    versions: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    turns: list[Turn] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    stats: ParseStats = field(default_factory=ParseStats)
    skip_reason: str | None = None
    files: tuple[str, ...] = ()
    fingerprint: str = ""
    """The files' fingerprint (`SessionFiles.fingerprint`) taken before they were read: a file
    that grows while it is parsed then differs from it, and is taken again later."""


# --------------------------------------------------------------------------------------------
# Line framing
# --------------------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()


_ENVELOPE_TYPES = frozenset({"user", "assistant", "system", "progress", "attachment"})


def _looks_top_level(value: Any) -> bool:
    """Whether an object found by resynchronising inside a bad line is a record of its own.

    A cut record leaves its nested objects behind (content blocks, the subagent messages of
    agent_progress); those must not be read as records. Real records carry their envelope.
    """
    if not isinstance(value, dict):
        return False
    rtype = value.get("type")
    if rtype in _ENVELOPE_TYPES:
        return "sessionId" in value or "parentUuid" in value
    if rtype == "summary":
        return "leafUuid" in value or "summary" in value
    if rtype == "file-history-snapshot":
        return "snapshot" in value or "messageId" in value
    return isinstance(rtype, str) and "sessionId" in value


def _split_glued(text: str) -> tuple[list[Any], str | None]:
    """Decode JSON values written back to back on one line; reason for anything unreadable.

    After a value that does not parse, reading resumes at the next `{"` that starts a complete
    record (anthropics/claude-code#52387: a cut record followed by the next append).
    """
    values: list[Any] = []
    reason: str | None = None
    pos, end = 0, len(text)
    resyncing = False
    while pos < end:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            break
        try:
            value, new_pos = _DECODER.raw_decode(text, pos)
        except ValueError as exc:
            if reason is None:
                reason = f"invalid JSON at column {getattr(exc, 'pos', pos)}"
            resyncing = True
            nxt = text.find('{"', pos + 1)
            if nxt == -1:
                break
            pos = nxt
            continue
        if resyncing and not _looks_top_level(value):
            # A nested object of the cut record: skip over it as a whole.
            nxt = text.find('{"', new_pos)
            if nxt == -1:
                break
            pos = nxt
            continue
        values.append(value)
        pos = new_pos
        resyncing = False
    return values, reason


_USER_TAG = b'"type":"user"'
_TOOL_USE_RESULT_TAG = b',"toolUseResult":'
_GLUE = b'}{"'


def _user_without_tool_use_result(raw: bytes) -> dict[str, Any] | None:
    """A tool-result `user` record decoded up to its `toolUseResult`, or None.

    `toolUseResult` repeats the tool's output in structured form (a Read's whole file, again):
    43% of the dev corpus' bytes. The parser uses the `tool_result` block instead, so the line is
    decoded only up to that key, which in every version seen follows `message`, `uuid` and
    `timestamp`. Whatever does not fit (a string result, glued records, another key order, a
    nested match) returns None and the whole line is decoded.
    """
    if raw.find(_USER_TAG, 0, 4096) < 0 or raw.find(b'"type":"progress"', 0, 4096) >= 0:
        return None
    cut = raw.find(_TOOL_USE_RESULT_TAG)
    if (
        cut < 0
        or raw[cut + len(_TOOL_USE_RESULT_TAG) : cut + len(_TOOL_USE_RESULT_TAG) + 1] == b'"'
    ):
        return None
    if not raw.rstrip().endswith(b"}") or raw.find(_GLUE, cut) >= 0:
        return None
    try:
        text = raw[:cut].decode() + "}"
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    if end != len(text) or not isinstance(value, dict) or value.get("type") != "user":
        return None
    if "uuid" not in value or "message" not in value:
        return None
    return value


def _decode_line(raw: bytes) -> tuple[list[dict[str, Any]], str | None]:
    """Records on one physical line and, if some of it could not be read, why (no content)."""
    if len(raw) > 4096:
        short = _user_without_tool_use_result(raw)
        if short is not None:
            return [short], None
    # Fast path: strict UTF-8 and one object filling the line. raw_decode on the decoded str
    # skips json.loads' encoding sniffing and whitespace regex (~15% of parse time).
    try:
        text = raw.decode()
        value, end = _DECODER.raw_decode(text)
        if end == len(text) or not text[end:].strip():
            if isinstance(value, dict):
                return [value], None
            return [], f"JSON value is a {type(value).__name__}, not an object"
    except (ValueError, RecursionError):
        pass
    # Slow path only for bad lines: repair bytes, then try glued records.
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return [], None
    try:
        values, reason = _split_glued(text)
    except RecursionError:
        return [], "JSON nested too deeply"
    records = [v for v in values if isinstance(v, dict)]
    if not records and reason is None:
        kinds = ", ".join(sorted({type(v).__name__ for v in values}))
        reason = f"JSON value is a {kinds}, not an object"
    elif len(values) > 1 and reason is None:
        reason = f"{len(values)} records on one line (recovered)"
    return records, reason


def iter_records(path: Path, stats: ParseStats | None = None) -> Iterator[dict[str, Any]]:
    """Stream the JSON object records of one file; malformed lines are counted in `stats`."""
    stats = stats if stats is not None else ParseStats()
    # A 1 MiB buffer: with the default 8 KiB, splitting multi-megabyte lines took 0.6 s on the
    # dev corpus against 0.07 s (constant memory either way).
    with Path(path).open("rb", buffering=_READ_BUFFER) as fh:
        lineno = 0
        for raw in fh:
            lineno += 1
            stats.lines += 1
            stats.bytes += len(raw)
            # Only short lines can be blank: avoid copying multi-megabyte lines to test it.
            if len(raw) < 64 and not raw.strip(b" \t\r\n\x00"):
                continue
            records, reason = _decode_line(raw)
            if reason is not None:
                recovered = reason.endswith("(recovered)")
                if not raw.endswith(b"\n") and not records:
                    reason = "incomplete last line (truncated, or the file is still being written)"
                if not recovered:
                    stats.malformed_lines += 1
                if len(stats.malformed_examples) < _MAX_MALFORMED_EXAMPLES:
                    stats.malformed_examples.append(f"{path.name}:{lineno}: {reason}")
            yield from records


# --------------------------------------------------------------------------------------------
# Content helpers
# --------------------------------------------------------------------------------------------


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


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


def _one_line(text: str, width: int = _SUMMARY_WIDTH) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _tool_use(block: dict[str, Any]) -> ToolUse:
    name = str(block.get("name") or "?")
    inp = block.get("input")
    inp = inp if isinstance(inp, dict) else {}
    paths: list[str] = []
    for key in ("file_path", "notebook_path", "path"):
        val = inp.get(key)
        if isinstance(val, str) and val:
            paths.append(val)
    edits = inp.get("edits")
    if isinstance(edits, list):
        for e in edits:
            if isinstance(e, dict) and isinstance(e.get("file_path"), str):
                paths.append(e["file_path"])
    command = inp.get("command") if isinstance(inp.get("command"), str) else None
    if command is not None:
        summary = f"{name}: {_one_line(command, 80)}"
    elif paths:
        summary = f"{name} {paths[0]}"
    else:
        detail = next(
            (
                inp[k]
                for k in ("pattern", "description", "query", "url", "skill", "prompt")
                if isinstance(inp.get(k), str) and inp[k]
            ),
            "",
        )
        summary = f"{name}: {_one_line(detail, 80)}" if detail else name
    return ToolUse(
        name=name,
        file_paths=tuple(dict.fromkeys(paths)),
        command=command,
        summary=_one_line(summary, 120),
        id=block.get("id") if isinstance(block.get("id"), str) else None,
    )


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


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


class _Builder:
    """Accumulates one file's (or one agent's) turns; assistant records merge by message.id."""

    def __init__(self, session: "_SessionState", agent_id: str | None) -> None:
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
            s.input_tokens += _int(usage.get("input_tokens"))
            s.output_tokens += _int(usage.get("output_tokens"))
            s.cache_read_tokens += _int(usage.get("cache_read_input_tokens"))
            s.cache_creation_tokens += _int(usage.get("cache_creation_input_tokens"))
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
        turn = Turn("assistant", kind, text, _parse_ts(ts), tools, self.agent_id, uuid)
        self.turns.append(turn)
        if mid:
            index[mid] = turn

    def _user(self, rec: dict[str, Any]) -> None:
        s = self.s
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        ts = _parse_ts(rec.get("timestamp"))
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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _SessionState:
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


def _project_from(cwd: str | None, main: Path | None) -> str:
    if cwd:
        parts = [p for p in re.split(r"[\\/]+", cwd) if p]
        # Worktrees (.claude/worktrees/agent-x, .worktrees/x) belong to the repository above.
        for marker in (".claude", ".worktrees", "worktrees"):
            if marker in parts[:-1]:
                idx = parts.index(marker)
                if idx > 0:
                    parts = parts[:idx]
                    break
        if parts:
            return parts[-1]
    if main is not None:
        return main.parent.name or "unknown"
    return "unknown"


def _process(
    state: _SessionState,
    rec: dict[str, Any],
    builder: _Builder,
    main: bool,
    agents: dict[str, _Builder],
) -> None:
    rtype = rec.get("type")
    rtype_s = rtype if isinstance(rtype, str) else "<missing>"
    state.types[rtype_s] += 1
    data = rec.get("data") if rtype == "progress" else None
    if rtype == "file-history-snapshot" or (
        rtype == "progress" and (not isinstance(data, dict) or data.get("type") != "agent_progress")
    ):
        # A third of all records, and nothing for the dialogue: only their time counts (a
        # session can end on a hook's progress). Skipping the rest saves ~10% of parse time.
        state.note_time(rec)
        return
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        if uuid in state.uuids_seen:
            # Resumed or forked sessions can repeat records: count each once.
            state.stats.duplicate_records += 1
            return
        state.uuids_seen.add(uuid)
    state.envelope(rec, main)
    if rtype in ("user", "assistant"):
        state.conversation_records += 1
        if main and rec.get("isSidechain") and isinstance(rec.get("agentId"), str):
            # Old files occasionally inline sidechain records: route them to their agent.
            aid = rec["agentId"]
            agents.setdefault(aid, _Builder(state, aid)).add(rec)
        else:
            builder.add(rec)
    elif rtype == "summary":
        text = rec.get("summary")
        if isinstance(text, str) and text:
            leaf = rec.get("leafUuid")
            state.summaries.append((leaf if isinstance(leaf, str) else None, text))
    elif rtype == "custom-title":
        title = rec.get("customTitle") or rec.get("title")
        if isinstance(title, str) and title:
            state.custom_title = title
    elif rtype == "system":
        sub = rec.get("subtype")
        if sub == "compact_boundary":
            state.stats.compactions += 1
        elif sub == "away_summary" and isinstance(rec.get("content"), str):
            builder.turns.append(
                Turn(
                    "assistant",
                    "other",
                    rec["content"],
                    _parse_ts(rec.get("timestamp")),
                    (),
                    builder.agent_id,
                    uuid if isinstance(uuid, str) else None,
                )
            )
    elif rtype == "progress":
        data = rec.get("data")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            # 2.1.x streams each subagent message into the parent as data.message (the
            # normalizedMessages list repeats the whole history, so only data.message is read).
            inner = data.get("message")
            aid = data.get("agentId")
            if isinstance(inner, dict) and isinstance(aid, str) and aid:
                if aid not in agents:
                    agents[aid] = _Builder(state, aid)
                _process_inner(state, inner, agents[aid])
    # Everything else (attachment, permission-mode, last-prompt, pr-link, queue-operation: typed
    # while Claude was busy, it comes again as a user record when dequeued; unknown types) is
    # counted in records_by_type and otherwise ignored.


def _process_inner(state: _SessionState, rec: dict[str, Any], builder: _Builder) -> None:
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        if uuid in state.uuids_seen:
            return
        state.uuids_seen.add(uuid)
    if rec.get("type") in ("user", "assistant"):
        builder.add(rec)


def project_of(cwd: str) -> str | None:
    """The project a working directory belongs to, named as ingest names a session's project."""
    return _project_from(cwd, None) if cwd else None


def _agent_order(builder: _Builder) -> tuple[str, str]:
    # Agents without any timestamp sort last ("~" is after every digit).
    first = min((t.timestamp.isoformat() for t in builder.turns if t.timestamp), default="~")
    return first, builder.agent_id or ""


def parse_session(
    files: SessionFiles,
    *,
    include_thinking: bool = False,
) -> Session:
    """Parse one session (main file plus subagents). Never raises on bad content."""
    fingerprint = files.fingerprint()
    state = _SessionState(include_thinking)
    main_builder = _Builder(state, None)
    agents: dict[str, _Builder] = {}
    skip: str | None = None
    total_bytes = 0
    any_records = False
    if files.main is not None:
        try:
            total_bytes += files.main.stat().st_size
            for rec in iter_records(files.main, state.stats):
                any_records = True
                _process(state, rec, main_builder, True, agents)
        except OSError as exc:
            skip = f"unreadable file ({exc.strerror or type(exc).__name__})"
    for path in files.subagents:
        m = _AGENT_FILE_RE.match(path.name)
        aid = m.group(1) if m else path.stem
        builder = agents.get(aid) or _Builder(state, aid)
        agents[aid] = builder
        try:
            total_bytes += path.stat().st_size
            for rec in iter_records(path, state.stats):
                any_records = True
                if isinstance(rec.get("agentId"), str) and builder.agent_id != rec["agentId"]:
                    # Agent ids in records are authoritative (file names can be renamed copies).
                    builder.agent_id = rec["agentId"]
                _process(state, rec, builder, False, agents)
        except OSError:
            state.stats.malformed_examples.append(f"{path.name}: unreadable file")
    state.stats.subagents = sum(1 for b in agents.values() if b.turns)

    turns = list(main_builder.turns)
    for b in sorted((b for b in agents.values() if b.turns), key=_agent_order):
        turns.extend(b.turns)

    title = None
    matched = [text for leaf, text in state.summaries if leaf in state.uuids_seen]
    state.stats.summaries_unmatched = len(state.summaries) - len(matched)
    if matched:
        title = matched[-1]
    elif state.custom_title:
        title = state.custom_title

    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.blocks_by_type = dict(state.blocks)
    stats.turns = len(turns)
    stats.tool_uses = sum(len(t.tool_uses) for t in turns)

    if skip is None:
        if files.main is None and not files.subagents:
            skip = "no files"
        elif total_bytes == 0:
            skip = "empty file"
        elif not any_records:
            skip = "not a transcript (no JSON records)"
        elif state.conversation_records == 0:
            present = set(state.types) - {"<missing>"}
            if present and present <= {"summary"}:
                skip = "no conversation (summary-only)"
            elif present and present <= {"file-history-snapshot"}:
                skip = "no conversation (file-history snapshots only)"
            elif present and present <= {"summary", "file-history-snapshot"}:
                skip = "no conversation (summaries and file-history snapshots only)"
            else:
                skip = "no conversation (no user or assistant records)"
        elif not any(t.kind in ("prompt", "text", "tool_result") for t in turns):
            skip = "no conversation (only injected or empty messages)"

    return Session(
        session_id=files.session_id,
        project=_project_from(
            state.cwd, files.main or (files.subagents[0] if files.subagents else None)
        ),
        cwd=state.cwd,
        git_branch=state.git_branch,
        started_at=_parse_ts(state.first_ts_raw),
        ended_at=_parse_ts(state.last_ts_raw),
        title=title,
        versions=tuple(state.versions),
        models=tuple(state.models),
        turns=turns,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        cache_creation_tokens=state.cache_creation_tokens,
        stats=stats,
        skip_reason=skip,
        files=tuple(str(p) for p in files.paths),
        fingerprint=fingerprint,
    )
