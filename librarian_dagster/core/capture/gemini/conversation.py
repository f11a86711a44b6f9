"""One Gemini CLI chat file read back into its header and its messages, as Gemini CLI reads it.

Two forms (packages/core/src/services/chatRecordingService.ts):

* the older single JSON object `{sessionId, projectHash, startTime, lastUpdated, messages, kind?,
  summary?, directories?}`, rewritten whole on every change: read whole (it is one value);
* the newer JSONL, appended to: a header line (the same fields without `messages`), message
  lines (a message written again under the same `id` replaces it where it stood), `{"$set":
  {...}}` lines patching the header, and `{"$rewindTo": id}` lines, which remove that message
  and every one after it (all of them when the id is not there, as Gemini CLI does).

A `$set` of `messages` is the history as the CLI holds it in memory, written whole
(`updateMessagesFromHistory`): on a resume (after a second header line), after a compression,
after a failed or cancelled request is rolled back. Gemini CLI replaces its messages with it;
this reader merges it into those it has read, by id: a message read before stays as it was
written (its timestamp, tokens, model and `toolCalls`, which the rewrite loses: it stamps every
message with the time of the rewrite, and turns calls into `functionCall` parts), a message the
rewrite dropped stays where it was (a prompt the resumed history leaves out, the turns a
compression summarised), and a message new in it (a synthetic `<id>_response` holding a tool's
result again) comes after the message it follows in the rewrite. The session began when its
first header says: a resume writes a header of its own, with the time of the resume.

Every record's kind is counted in `types` ("session", "$set", "$rewindTo", or the message's
type); a line of no known shape is counted in `stats.skipped_by_kind` and skipped.

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.records import ParseStats, decode_line, iter_records

__all__ = ["Conversation", "is_header", "load"]


@dataclass
class Conversation:
    """What one chat file holds once its appends are replayed."""

    meta: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    invalid: str | None = None
    """Why the file could not be read as a chat at all (not JSON), or None."""


def is_header(rec: Any) -> bool:
    """A chat's header (or a whole older chat): a `sessionId` and a `projectHash`."""
    return (
        isinstance(rec, dict)
        and isinstance(rec.get("sessionId"), str)
        and isinstance(rec.get("projectHash"), str)
    )


def _message_kind(msg: dict[str, Any]) -> str:
    kind = msg.get("type")
    return kind if isinstance(kind, str) else "<missing>"


def load(path: Path, stats: ParseStats, types: Counter[str]) -> Conversation:
    """The chat in `path`, either form; raises OSError only (the caller says unreadable)."""
    with path.open("rb") as fh:
        first = fh.readline()
    records, reason = decode_line(first)
    if records and reason is None:
        return _replay(path, stats, types)
    return _whole(path, stats, types)


def _whole(path: Path, stats: ParseStats, types: Counter[str]) -> Conversation:
    """The older form: one JSON object, read whole."""
    data = path.read_bytes()
    stats.bytes += len(data)
    stats.lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        where = (
            f" at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        stats.malformed_lines += 1
        stats.malformed_examples.append(
            f"{path.name}: invalid JSON{where} (truncated, or being rewritten)"
        )
        return Conversation(invalid="not a transcript (not one JSON object)")
    del data
    conv = Conversation()
    if not is_header(value):
        kind = "JSON value without sessionId and projectHash"
        stats.skipped_by_kind[kind] = stats.skipped_by_kind.get(kind, 0) + 1
        return Conversation(invalid="not a transcript (no Gemini CLI chat in the JSON)")
    _header(conv, value, stats, types)
    return conv


def _header(
    conv: Conversation, rec: dict[str, Any], stats: ParseStats, types: Counter[str]
) -> None:
    types["session"] += 1
    conv.records += 1
    started = conv.meta.get("startTime")
    conv.meta.update((k, v) for k, v in rec.items() if k != "messages")
    if started is not None:
        conv.meta["startTime"] = started  # a resume's header: the session began before it
    messages = rec.get("messages")
    if isinstance(messages, list):
        by_id = _by_id(conv)
        _extend(by_id, messages, stats, types)
        conv.messages = list(by_id.values())


def _by_id(conv: Conversation) -> dict[str, dict[str, Any]]:
    return {str(m["id"]): m for m in conv.messages}


def _extend(
    by_id: dict[str, dict[str, Any]],
    messages: list[Any],
    stats: ParseStats,
    types: Counter[str],
) -> None:
    for msg in messages:
        if isinstance(msg, dict) and isinstance(msg.get("id"), str):
            types[_message_kind(msg)] += 1
            if msg["id"] in by_id:
                stats.duplicate_records += 1
            by_id[msg["id"]] = msg
        else:
            _skip(stats, types, "message without an id")


def _skip(stats: ParseStats, types: Counter[str], kind: str) -> None:
    types[kind] += 1
    stats.skipped_by_kind[kind] = stats.skipped_by_kind.get(kind, 0) + 1


def _replay(path: Path, stats: ParseStats, types: Counter[str]) -> Conversation:
    """The newer form: its lines replayed in order, as Gemini CLI's loadConversationRecord does."""
    conv = Conversation()
    by_id: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path, stats):
        conv.records += 1
        rewind = rec.get("$rewindTo")
        update = rec.get("$set")
        if isinstance(rewind, str):
            types["$rewindTo"] += 1
            _rewind(by_id, rewind)
        elif isinstance(rec.get("id"), str):
            _extend(by_id, [rec], stats, types)
        elif isinstance(update, dict):
            types["$set"] += 1
            if isinstance(update.get("messages"), list):
                by_id = _merge(by_id, update["messages"], stats, types)
            conv.meta.update((k, v) for k, v in update.items() if k != "messages")
        elif is_header(rec):
            conv.messages = list(by_id.values())
            _header(conv, rec, stats, types)
            conv.records -= 1
            by_id = _by_id(conv)
        else:
            kind = rec.get("type")
            _skip(stats, types, kind if isinstance(kind, str) else "record of unknown shape")
    conv.messages = list(by_id.values())
    return conv


def _merge(
    by_id: dict[str, dict[str, Any]],
    messages: list[Any],
    stats: ParseStats,
    types: Counter[str],
) -> dict[str, dict[str, Any]]:
    """The messages read so far with a rewrite of the history (`$set` of `messages`) merged in:
    those read before kept as they were and where they were, new ones after the message they
    follow in the rewrite (the first ones, following none, first)."""
    rewrite: dict[str, dict[str, Any]] = {}
    _extend(rewrite, messages, stats, types)
    after: dict[str | None, list[dict[str, Any]]] = {}
    anchor: str | None = None
    for mid, msg in rewrite.items():
        if mid in by_id:
            stats.duplicate_records += 1
            anchor = mid
        else:
            after.setdefault(anchor, []).append(msg)
    merged = {str(m["id"]): m for m in after.get(None, ())}
    for mid, msg in by_id.items():
        merged[mid] = msg
        merged.update((str(m["id"]), m) for m in after.get(mid, ()))
    return merged


def _rewind(by_id: dict[str, dict[str, Any]], message_id: str) -> None:
    """Remove `message_id` and every message after it; all of them if it is not there."""
    ids = list(by_id)
    start = ids.index(message_id) if message_id in by_id else 0
    for gone in ids[start:]:
        del by_id[gone]
