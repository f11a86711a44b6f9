"""What the checkout's git says of a line: whether the files its sessions changed changed again
after the newest of them, and since which commit. No git, or not a checkout: nothing is said."""

import subprocess
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from librarian_dagster.core.consolidation.mining import COMMAND, Line

GIT_TIMEOUT_S = 30


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True,
            timeout=GIT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def is_checkout(repo: Path) -> bool:
    return (_git(repo, "rev-parse", "--is-inside-work-tree") or "").strip() == "true"


def changed_since(repo: Path, when: datetime, files: Sequence[str]) -> str | None:
    """The first commit after `when` that changed one of `files` (short hash), or None."""
    out = _git(repo, "log", "--reverse", "--format=%h", f"--since={when.isoformat()}", "--",
               *files)  # fmt: skip
    commits = (out or "").split()
    return commits[0] if commits else None


def stale(repo: Path, lines: Sequence[Line]) -> dict[str, str]:
    """A line's key -> the commit since which it may be stale, for the lines git says so of."""
    if not is_checkout(repo):
        return {}
    marks = {}
    for line in lines:
        if line.kind == COMMAND:  # a command many sessions ran holds until one sees it fail
            continue
        newest = max((when for _, when in line.sessions if when), default=None)
        since = changed_since(repo, newest, line.files) if newest and line.files else None
        if since:
            marks[line.key] = since
    return marks
