"""A line held against the code and the sessions after it: retired when the files it is about
are gone from the checkout, superseded when a later session reversed it (a `git revert` that
changed its files, or a prompt that switched away from the command it names)."""

import re
from collections.abc import Sequence
from pathlib import Path

from librarian_dagster.core.consolidation.evidence import Evidence
from librarian_dagster.core.consolidation.mining import COMMAND, Line, code

_SWITCHED_FROM = "(?:switch(?:ed|ing)? (?:away )?from|instead of|replace|stop using|drop)"


def retired(line: Line, repo: Path) -> str | None:
    """Why `line` is retired, if every file it is about is gone from the checkout `repo`."""
    if line.kind == COMMAND or not line.files or any((repo / f).exists() for f in line.files):
        return None
    gone = ", ".join(code(f) for f in line.files[:3])
    return f"retired: {gone}{' and more' if len(line.files) > 3 else ''} gone from the code"


def superseded(line: Line, evidence: Sequence[Evidence]) -> str | None:
    """Why `line` is superseded, by the first session after its newest that reversed it."""
    last = line.newest
    if last is None:
        return None
    command = line.quotes[0]
    switched = re.compile(rf"\b{_SWITCHED_FROM}\s+`?{re.escape(command)}\b", re.IGNORECASE)
    later = sorted((e.started_at, e.session_id, e) for e in evidence
                   if e.started_at and e.started_at > last)  # fmt: skip
    for when, _, e in later:
        by = f"superseded by {e.session_id[:8]} {when.date().isoformat()}"
        if e.reverted and line.kind != COMMAND and set(e.changed) & set(line.files):
            return f"{by}, which reverted a change to its files"
        if any(switched.search(asked) for asked in e.asked):
            return f"{by}, which switched away from {code(command)}"
    return None
