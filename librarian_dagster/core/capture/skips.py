"""The skip list (`librarian skip`): sessions never ingested, by id or by last activity.

Beside LIBRARIAN_EXCLUDE (globs over project folders or paths, a setting): the skip list is data,
changed from the command line while Librarian runs, kept in the store (docs/decisions/0014). The
sensor, `librarian ingest` and every backfill ask the same `SkipList.reason`.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from librarian_dagster.core.capture.files import SessionFiles

BEFORE = "before:"
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def valid_session_id(text: str) -> bool:
    """A session id as Claude Code names its files (a UUID), or any name of that alphabet."""
    return _SESSION_ID.fullmatch(text) is not None


def before_entry(moment: datetime) -> str:
    """How a date rule is named on the list: `before:2026-01-01`, or the full instant."""
    moment = moment.astimezone(UTC)
    if moment == moment.replace(hour=0, minute=0, second=0, microsecond=0):
        return BEFORE + moment.date().isoformat()
    return BEFORE + moment.isoformat()


@dataclass(frozen=True)
class SkipList:
    session_ids: frozenset[str] = frozenset()
    before: datetime | None = None
    """Sessions whose files were all last changed before this instant are skipped."""

    def reason(self, session_id: str, last_active: float | None) -> str | None:
        """Why the session is skipped, or None. `last_active`: its files' newest mtime."""
        if session_id in self.session_ids:
            return f"on the skip list (librarian skip --undo {session_id})"
        if (
            self.before is not None
            and last_active is not None
            and last_active < self.before.timestamp()
        ):
            return (
                f"last active before {self.before.date().isoformat()} "
                f"(librarian skip --undo {before_entry(self.before)})"
            )
        return None

    def skips(self, files: SessionFiles) -> bool:
        return self.reason(files.session_id, last_active(files)) is not None


def last_active(files: SessionFiles) -> float | None:
    """The newest mtime among the session's files; None when none of them is there."""
    mtimes = []
    for path in files.paths:
        try:
            mtimes.append(path.stat().st_mtime)
        except OSError:
            continue
    return max(mtimes) if mtimes else None
