"""A session's key among the sessions' Dagster partitions: `<project>/<yyyy-mm>/<agent>/<id>`.

Pure, so that what links to a partition (the recall server's page) need not import Dagster; the
partitions themselves are in defs/partitions.py (docs/decisions/0014 for the key's shape).
"""

import re
from datetime import UTC, datetime
from pathlib import Path

# A project label keeps to what the UI's selection text reads as one term: no `/` (the key's
# separator), `,` (between terms), `*` (the wildcard), `[`, `]` or `...` (ranges), no spaces.
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
UNDATED = "undated"
# A staged file's name is its session id: only ids of this alphabet become file names.
_STAGEABLE_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


def session_id_of(partition_key: str) -> str:
    """The session id a partition key names: its last segment (a bare id is its own)."""
    return partition_key.rsplit("/", 1)[-1]


def partition_key(session_id: str, project: str, started_at: datetime | None, agent: str) -> str:
    month = started_at.astimezone(UTC).strftime("%Y-%m") if started_at else UNDATED
    return f"{_label(project)}/{month}/{_label(agent)}/{session_id}"


def is_current(partition_key: str) -> bool:
    """Whether a key has today's shape; a store's older keys (a bare session id, then
    `<project>/<yyyy-mm>/<id>` before sessions had an agent) are re-keyed once."""
    return partition_key.count("/") == 3


def _label(text: str) -> str:
    return re.sub(r"\.{2,}", ".", _NOT_LABEL.sub("-", text)).strip("-.") or "unknown"


def staging_dir(home: Path) -> Path:
    """Where the stages hand their values on (defs/staging.py): `<home>/staging/<stage>/`."""
    return home / "staging"


def staged_file(home: Path, stage: str, session_id: str) -> Path:
    """A session's value of one stage: `<home>/staging/<stage>/<session>.json`. ValueError for
    an id that is not safe as a file name."""
    if not _STAGEABLE_ID.fullmatch(session_id):
        raise ValueError(f"not a usable session id: {session_id!r}")
    return staging_dir(home) / stage / f"{session_id}.json"
