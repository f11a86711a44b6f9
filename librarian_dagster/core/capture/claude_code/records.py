"""How Claude Code's transcript lines are decoded beyond plain JSON (core/capture/records.py
reads them): its records' envelope, by which a record is told from the nested objects a cut
record leaves behind, and the shortcut past `toolUseResult` on long lines.

The transcript format is internal to Claude Code and changes between releases (see
`shared/data/transcripts/FORMATS.md`): `toolUseResult` (a structured copy of the tool's output)
is not decoded on long lines, since the `tool_result` block carries the same text.

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture import records
from librarian_dagster.core.capture.records import Decoding, ParseStats

__all__ = ["CLAUDE_CODE", "decode_line", "head_records", "iter_records"]

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


CLAUDE_CODE = Decoding(top_level=_looks_top_level, shortcut=_user_without_tool_use_result)


def decode_line(raw: bytes) -> tuple[list[dict[str, Any]], str | None]:
    return records.decode_line(raw, CLAUDE_CODE)


def iter_records(path: Path, stats: ParseStats | None = None) -> Iterator[dict[str, Any]]:
    return records.iter_records(path, stats, CLAUDE_CODE)


def head_records(path: Path, lines: int = 20) -> list[dict[str, Any]]:
    return records.head_records(path, lines, CLAUDE_CODE)
