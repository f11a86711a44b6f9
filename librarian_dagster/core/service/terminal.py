"""What `librarian up` shows a person, and where the rest of what its processes say goes.

The terminal gets the address block, then one line per event that matters: the journal's
(core/service/journal.py: a session remembered, skipped or failed, a capture gap) and `up`'s own
(the watch's alerts and recoveries, a process started again). Everything its children print
(Dagster's webserver, daemon, code servers and runs, the recall server) goes to a file of its own
under `LIBRARIAN_HOME/logs`, rotated, and to the terminal too only when asked (`--verbose`).
"""

import logging
import logging.handlers
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from librarian_dagster.core.service.journal import Event, Kind, Tail

LOG_BYTES = 10 * 2**20
LOG_BACKUPS = 3
"""Each child's log keeps 40 MB at most: its file and three rotated ones."""
JOURNAL_POLL_S = 0.5


def say(kind: Kind, text: str, now: float | None = None) -> None:
    """One line on the terminal, as the journal's events are printed."""
    print(
        Event(kind, text, time.time() if now is None else now).line(), file=sys.stderr, flush=True
    )


class _LogFile(logging.handlers.RotatingFileHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        # A log that cannot be written (a full disk, which `up`'s watch says) costs its lines,
        # never a traceback in the terminal per line.
        pass


_loggers: dict[Path, logging.Logger] = {}
_loggers_lock = threading.Lock()


def _log_of(path: Path) -> logging.Logger:
    """One rotating file per child log, however often the child is started again."""
    with _loggers_lock:
        if path not in _loggers:
            path.parent.mkdir(parents=True, exist_ok=True)
            logger = logging.getLogger(f"librarian.up.{path.stem}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            handler = _LogFile(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
            _loggers[path] = logger
        return _loggers[path]


def keep_output(stream: IO[bytes], path: Path, echo: bool) -> threading.Thread:
    """Copy what a child prints on `stream` to the log at `path` (and to the terminal when
    `echo`), line by line, until the child and every process that inherited the stream end."""
    log = _log_of(path)

    def copy() -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                log.info(line)
                if echo:
                    print(line, file=sys.stderr, flush=True)

    thread = threading.Thread(target=copy, name=f"log {path.name}", daemon=True)
    thread.start()
    return thread


def print_journal(path: Path, stopping: threading.Event, show: Callable[[str], None]) -> None:
    """Show each event written to the journal at `path` from now on, until `stopping`."""
    tail = Tail(path)
    while True:
        stopped = stopping.wait(JOURNAL_POLL_S)
        for event in tail.read():
            show(event.line())
        if stopped:
            return
