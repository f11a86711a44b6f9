"""What the checkout's git says of a line: whether the files its sessions changed changed again
after the newest of them, and since which commit. No git, or not a checkout: nothing is said."""

import hashlib
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


HISTORY_PATHS = 200
"""Paths asked of git's history at once, at most."""


def ever_held(repo: Path, paths: Sequence[str]) -> bool:
    """Whether the checkout's history holds one of `paths`."""
    if not paths or not is_checkout(repo):
        return False
    return bool(
        (_git(repo, "log", "-1", "--format=%h", "--", *paths[:HISTORY_PATHS]) or "").strip()
    )


def changed_since(repo: Path, when: datetime, files: Sequence[str]) -> str | None:
    """The first commit after `when` that changed one of `files` (short hash), or None."""
    out = _git(repo, "log", "--reverse", "--format=%h", f"--since={when.isoformat()}", "--",
               *files)  # fmt: skip
    commits = (out or "").split()
    return commits[0] if commits else None


def stale(repo: Path, lines: Sequence[Line]) -> dict[str, str]:
    """A line's key -> the commit since which it may be stale, for the lines git says so of;
    `repo` is a git checkout (`is_checkout`)."""
    marks = {}
    for line in lines:
        if line.kind == COMMAND:  # a command many sessions ran holds until one sees it fail
            continue
        newest = line.newest
        since = changed_since(repo, newest, line.files) if newest and line.files else None
        if since:
            marks[line.key] = since
    return marks


def commits(repo: Path, lines: Sequence[Line]) -> dict[str, str | None]:
    """A line's key -> the commit its newest session worked on (the last before it began);
    `repo` is a git checkout (`is_checkout`)."""
    found: dict[str, str | None] = {}
    for line in lines:
        newest = line.newest
        out = _git(repo, "rev-list", "-1", "--abbrev-commit", f"--before={newest.isoformat()}",
                   "HEAD") if newest else None  # fmt: skip
        found[line.key] = (out or "").strip() or None
    return found


def head(repo: Path) -> str | None:
    """The checkout's commit (short hash), or None."""
    return (_git(repo, "rev-parse", "--short", "HEAD") or "").strip() or None


def blob(path: Path) -> str | None:
    """A file's content as git names it (`git hash-object`), or None when there is none: the
    hook compares the same of the file as it finds it (hooks/librarian_recurring.py)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
