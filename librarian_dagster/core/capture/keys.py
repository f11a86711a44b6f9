"""A session's key among the sessions' Dagster partitions: `<project>/<yyyy-mm>/<session id>`.

Pure, so that what links to a partition (the recall server's page) need not import Dagster; the
partitions themselves are in defs/partitions.py (docs/decisions/0014 for the key's shape).
"""

import re
from datetime import UTC, datetime

# A project label keeps to what the UI's selection text reads as one term: no `/` (the key's
# separator), `,` (between terms), `*` (the wildcard), `[`, `]` or `...` (ranges), no spaces.
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
UNDATED = "undated"


def session_id_of(partition_key: str) -> str:
    """The session id a partition key names: its last segment (a bare id is its own)."""
    return partition_key.rsplit("/", 1)[-1]


def partition_key(session_id: str, project: str, started_at: datetime | None) -> str:
    label = re.sub(r"\.{2,}", ".", _NOT_LABEL.sub("-", project)).strip("-.") or "unknown"
    month = started_at.astimezone(UTC).strftime("%Y-%m") if started_at else UNDATED
    return f"{label}/{month}/{session_id}"
