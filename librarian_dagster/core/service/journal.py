"""What a person running `librarian up` hears of, one line per event: a session remembered,
skipped or failed, and a capture gap opening or clearing.

Each event is written where it happens (a run's process, a sensor tick in the daemon) as one JSON
line appended to `LIBRARIAN_HOME/logs/events.jsonl`, and `librarian up` prints each as it comes
(`Tail`). Dagster's own logs go to files beside it, so these lines, the watch's alerts and the
address block are all the terminal shows.

A file, not the database: a failure to hear of may be the database's. One short line per event
appended with O_APPEND, so lines written by processes at once never interleave. Writing never
raises: a journal that cannot be written costs its line, never the run. Past MAX_BYTES the file
moves to `events.jsonl.1` (one kept). Every text is redacted as it is written, as an alert is.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

Kind = Literal["remembered", "skipped", "failed", "alert", "stopped"]
KINDS: tuple[str, ...] = get_args(Kind)
JOURNAL = "events.jsonl"
MAX_BYTES = 4 * 2**20
MAX_TEXT = 400
"""Characters of one event's text: a line of a terminal or two, whatever the error said."""


@dataclass(frozen=True)
class Event:
    kind: Kind
    text: str
    at: float
    """When it happened (seconds since the epoch)."""

    def line(self) -> str:
        """The event as `librarian up` prints it: local time, kind, text."""
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))}  {self.kind:<10} {self.text}"


def journal_path(log_dir: Path) -> Path:
    return log_dir / JOURNAL


def write(path: Path, kind: Kind, text: str, now: float | None = None) -> None:
    """Append one event to the journal at `path`; never raises."""
    # Here, not at the top: `librarian up` reads the journal on every start, and never writes.
    from librarian_dagster.core.redaction.scan import redact

    clean, _findings = redact(" ".join(text.split()))
    line = json.dumps(
        {"kind": kind, "text": clean[:MAX_TEXT], "at": time.time() if now is None else now}
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > MAX_BYTES:
            path.replace(path.with_name(path.name + ".1"))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def remembered_text(project: str, agent: str, title: str, chunks: int) -> str:
    """A session's memory written: which project and agent (a teammate's: "alice's codex"), what
    it was, how many chunks."""
    return f"{project} · {agent} · {_short(title, 100)} · {chunks} chunks"


def skipped_text(session: str, why: str) -> str:
    return f"{session}: {why}"


def failed_text(session: str | None, why: str, link: str) -> str:
    """A failed run: its session (or job), the error's first line, where the run is in the UI."""
    return f"{session or 'a run'}: {_short(why, 200)} ({link})"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Tail:
    """The events written to the journal at `path` since this was made (or since `start`, a
    byte offset), as they come."""

    def __init__(self, path: Path, start: int | None = None) -> None:
        self.path = path
        self._at, self._file = self._now()
        if start is not None:
            self._at = start
        self._partial = b""

    def _now(self) -> tuple[int, int | None]:
        try:
            stat = self.path.stat()
        except OSError:
            return 0, None
        return stat.st_size, stat.st_ino

    def read(self) -> list[Event]:
        """The events written since the last read; a line cut off mid-write waits for its end."""
        size, file = self._now()
        if file != self._file or size < self._at:  # moved aside (or replaced): a new file
            self._at, self._file, self._partial = 0, file, b""
        if file is None or size == self._at:
            return []
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._at)
                data = fh.read(size - self._at)
        except OSError:
            return []
        self._at += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [e for e in map(_event, lines) if e is not None]


def _event(line: bytes) -> Event | None:
    try:
        value = json.loads(line)
        kind = value["kind"]
        if kind not in KINDS:
            return None
        return Event(kind, str(value["text"]), float(value["at"]))
    except (ValueError, KeyError, TypeError):
        return None
