"""Where a session is on disk, whatever agent wrote it: its files, their fingerprint, its project.

Each agent's reader (core/capture/readers.py) finds its sessions and fills a `SessionFiles`; what
is said here holds for all of them. Every function here reads no file's content.

Standard library only: hooks and the MCP server import this without dagster.
"""

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# The readers import these by name, so the same import lines stand in several agents' folders
# (`duplicates` pairs them): kept, for an import is no logic to share.
__all__ = [
    "SessionFiles",
    "SessionHead",
    "distinct_files",
    "given_files",
    "project_from",
    "project_of_cwd",
    "worktrees_of",
]


_WORKTREES_BESIDE = re.compile(r"(.+?)(?:\.|__|-)worktrees", re.IGNORECASE)


@dataclass(frozen=True)
class SessionFiles:
    """One session as found on disk: its main file, and the files of the subagents (threads,
    helpers) it spawned, which are remembered as part of it."""

    session_id: str
    main: Path | None
    subagents: tuple[Path, ...] = ()
    agent: str = "claude-code"
    """The reader that reads these files (core/capture/readers.py)."""
    version: str = ""
    """Where the files alone cannot tell that the session changed (one database holds many
    sessions), what the reader found that does: it is part of the fingerprint."""

    @property
    def paths(self) -> tuple[Path, ...]:
        return ((self.main,) if self.main else ()) + self.subagents

    def fingerprint(self) -> str:
        """Changes when any file's size or mtime_ns changes, or the version (stat only, never
        reads content). Where there is a version it stands for the files' stat: a database that
        holds many sessions changes size and mtime with each of them."""
        digest = hashlib.sha1()
        for path in self.paths:
            if self.version:
                digest.update(f"{path}\n".encode())
                continue
            try:
                st = path.stat()
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            except OSError:
                # A file that vanished is a change too.
                digest.update(f"{path}\0missing\n".encode())
        if self.version:
            # Only where there is one: a session without keeps the fingerprint it had before.
            digest.update(f"version\0{self.version}\n".encode())
        return digest.hexdigest()[:16]


@dataclass(frozen=True)
class SessionHead:
    """What the head of a session's main file says about where and when it began."""

    project: str
    started_at: datetime | None
    cwd: str | None = None
    """The folder the session ran in, where the head says: other sessions' heads lend it to
    those that keep none (Gemini CLI's keep a hash of it)."""


def distinct_files(files: Iterable[Path]) -> list[Path]:
    """Each file once, however many names it has (symlinks, hard links).

    Told apart by device and inode; a name that is not a symlink is kept over one that is. Two
    names of one file would otherwise be two sessions, and the same memory twice.
    """
    kept: dict[tuple[int, int], Path] = {}
    for path in sorted(set(files), key=lambda p: (p.is_symlink(), p)):
        try:
            st = path.stat()
        except OSError:
            continue  # gone since it was listed
        kept.setdefault((st.st_dev, st.st_ino), path)
    return sorted(kept.values())


def given_files(paths: Iterable[Path], discover: Callable[[Path], list[SessionFiles]]) -> set[Path]:
    """The files `librarian ingest PATH...` was given: each file as it is, and every file of the
    sessions `discover` finds in each folder."""
    files: set[Path] = set()
    for p in (Path(p) for p in paths):
        if p.is_dir():
            files.update(f for s in discover(p) for f in s.paths)
        elif p.is_file():
            files.add(p)
    return files


def project_from(cwd: str | None, main: Path | None) -> str:
    """A session's project: the last folder of its cwd (a worktree's repository), else the
    folder its main file is in. The same repository is one project whichever agent worked in it."""
    if cwd:
        parts = [p for p in re.split(r"[\\/]+", cwd) if p]
        # Worktrees (.claude/worktrees/agent-x, .worktrees/x) belong to the repository above.
        for marker in (".claude", ".worktrees", "worktrees"):
            if marker in parts[:-1]:
                idx = parts.index(marker)
                if idx > 0:
                    parts = parts[:idx]
                    break
        for part in parts[:-1]:
            repository = worktrees_of(part)
            if repository:
                return repository
        if parts:
            return parts[-1]
    if main is not None:
        return main.parent.name or "unknown"
    return "unknown"


def worktrees_of(folder: str) -> str | None:
    """The repository whose worktrees a folder beside it holds (`app.worktrees`,
    `app__worktrees`, `app-worktrees` -> `app`), else None."""
    beside = _WORKTREES_BESIDE.fullmatch(folder)
    return beside.group(1) if beside else None


def project_of_cwd(cwd: str) -> str | None:
    """The project a working directory belongs to, named as ingest names a session's project."""
    return project_from(cwd, None) if cwd else None
