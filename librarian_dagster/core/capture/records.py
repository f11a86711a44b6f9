"""Read a transcript file's JSONL lines as records (dicts), tolerant of what goes wrong in them.

Every agent's reader reads its JSONL through here, so reading is tolerant by construction:

* files are read line by line in binary mode, so memory is bounded by the largest record (plus
  the text the session keeps), and every line is decoded on its own: bad UTF-8 is replaced, NUL
  bytes are dropped;
* a line that is not one JSON object is retried as several records glued together (`}{`), and
  after a cut record reading resumes at the next object that is a record of its own (as its
  agent's `Decoding` tells one); what is lost is counted as malformed with its line number and a
  reason, never its content.

What only one agent's lines need (Claude Code's envelope, its `toolUseResult` shortcut) is that
agent's `Decoding`, in its own folder (claude_code/records.py).

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# The readers import these by name, so the same import lines stand in several agents' folders
# (`duplicates` pairs them): kept, for an import is no logic to share.
__all__ = [
    "PLAIN",
    "Decoding",
    "ParseStats",
    "count_of",
    "decode_line",
    "head_records",
    "iter_records",
    "parse_ts",
    "text_of",
]

_MAX_MALFORMED_EXAMPLES = 20
_READ_BUFFER = 1 << 20


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
    skipped_by_kind: dict[str, int] = field(default_factory=dict)
    """Records of a shape the reader does not know, by kind: counted and skipped."""


_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Decoding:
    """What an agent's lines need beyond plain JSON."""

    top_level: Callable[[Any], bool] = lambda value: isinstance(value, dict) and "type" in value
    """Whether an object found by resynchronising inside a bad line is a record of its own: a
    cut record leaves its nested objects behind, which must not be read as records."""
    shortcut: Callable[[bytes], dict[str, Any] | None] | None = None
    """A long line's record decoded the quick way, or None to decode it whole."""


PLAIN = Decoding()
"""A record of its own carries its `type`."""


def _split_glued(text: str, decoding: Decoding) -> tuple[list[Any], str | None]:
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
        if resyncing and not decoding.top_level(value):
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


def decode_line(raw: bytes, decoding: Decoding = PLAIN) -> tuple[list[dict[str, Any]], str | None]:
    """Records on one physical line and, if some of it could not be read, why (no content)."""
    if len(raw) > 4096 and decoding.shortcut is not None:
        short = decoding.shortcut(raw)
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
        values, reason = _split_glued(text, decoding)
    except RecursionError:
        return [], "JSON nested too deeply"
    records = [v for v in values if isinstance(v, dict)]
    if not records and reason is None:
        kinds = ", ".join(sorted({type(v).__name__ for v in values}))
        reason = f"JSON value is a {kinds}, not an object"
    elif len(values) > 1 and reason is None:
        reason = f"{len(values)} records on one line (recovered)"
    return records, reason


def iter_records(
    path: Path, stats: ParseStats | None = None, decoding: Decoding = PLAIN
) -> Iterator[dict[str, Any]]:
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
            records, reason = decode_line(raw, decoding)
            if reason is not None:
                recovered = reason.endswith("(recovered)")
                if not raw.endswith(b"\n") and not records:
                    reason = "incomplete last line (truncated, or the file is still being written)"
                if not recovered:
                    stats.malformed_lines += 1
                if len(stats.malformed_examples) < _MAX_MALFORMED_EXAMPLES:
                    stats.malformed_examples.append(f"{path.name}:{lineno}: {reason}")
            yield from records


def head_records(path: Path, lines: int = 20, decoding: Decoding = PLAIN) -> list[dict[str, Any]]:
    """The records of a file's first `lines` lines; [] for a file that cannot be read. What a
    reader looks at to tell whether a file is its agent's, and whose session it is."""
    found: list[dict[str, Any]] = []
    try:
        with Path(path).open("rb", buffering=_READ_BUFFER) as fh:
            for i, raw in enumerate(fh):
                if i >= lines:
                    break
                found.extend(decode_line(raw, decoding)[0])
    except OSError:
        return []
    return found


def parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def count_of(value: Any) -> int:
    """A count a record gives (tokens): an int that is not a bool, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def text_of(value: Any) -> str:
    """A string a record gives, else "" (a field of another type, or missing)."""
    return value if isinstance(value, str) else ""
