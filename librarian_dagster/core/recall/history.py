"""A file's history: the earlier sessions that changed it (or read it), and why.

The one way to it for every caller: the PreToolUse hook's `POST /history`, the MCP tool
`file_history` and `librarian history` all call `file_history`. The store keeps every file each
session touched (`session_files`); a file is looked up by its name, then matched as a whole path
of the same repository (core/recall/file_match.py), so a session run from the root, a subfolder,
a worktree or another machine's checkout is found alike.

What comes first is the most recent session that changed the file: the state the code is in
now; then the most recent that changed it in the asker's own checkout. The others are the ones
that bear most on the task at hand (the asker's latest prompt, compared with each session's mean
vector), those that changed the file before those that only read it. Where the repository is
on this machine, git says whether the file changed since each session ended, and which names the
file had before (`git log --follow`): those are looked up too.
"""

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from librarian_dagster.core.capture.repository import git_output, project_of_remote
from librarian_dagster.core.capture.touches import components, file_name, normal_path
from librarian_dagster.core.digest.distil import cut
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.file_match import below, root_of, same_file
from librarian_dagster.core.recall.results import HIGHLIGHT_CHARS, highlights
from librarian_dagster.core.store.files import Files
from librarian_dagster.core.store.rows import FileHistory, FileSession

DEFAULT_SESSIONS = 3
MAX_SESSIONS = 10
NAMED_LINES = 2
"""Digest lines naming the file, per session."""
TASK_CHARS = 400
"""Of the task, what is embedded: its start says what it is about (a 1,000-character task took
the server 29 ms a file to embed, this 8)."""
TASK_VECTORS = 64
"""Tasks whose vectors are kept: the first touches of one turn share its prompt."""
GIT_TIMEOUT_S = 0.15
"""git's share of an answer: the hook waits for the whole of it (a bigger repository's history
since the oldest memory is cut short, and then git says nothing)."""
_DIGEST_SECTIONS = ("worked_on", "problem", "solution", "open_items")
_LISTING = "Files changed:"
NOTHING_TOUCHED = "no earlier session of this repository changed or read this file"


class BadFileQuestion(ValueError):
    """A path that names no file this can look up; the message is the caller's to see."""


@dataclass(frozen=True)
class FileQuestion:
    path: str
    """Absolute, or relative to `cwd`."""
    cwd: str | None = None
    """Where the asker works: which repository the file is of."""
    root: str | None = None
    """The repository's root, when the asker knows it (git)."""
    task: str | None = None
    """What the asker is doing (its latest prompt): the sessions nearest to it come next."""
    session_id: str | None = None
    """The asker's own session, never an answer."""
    limit: int = DEFAULT_SESSIONS
    include_private: bool = False
    viewer: str | None = None
    """With `include_private`, whose private sessions (None: everyone's)."""
    repository: str | None = None
    """The asker's repository by its remote (`normal_remote`), when it knows it."""


@dataclass(frozen=True)
class GitLog:
    """The file's commits since the oldest memory: when, and each name it had in each
    (relative to the root; a rename's commit gives both)."""

    commits: tuple[tuple[float, str], ...]

    def former_names(self, name: str) -> list[str]:
        return list(dict.fromkeys(n for _, n in self.commits if n != name))

    def since(self, when: datetime | None) -> str | None:
        if when is None:
            return None
        count = len({t for t, _ in self.commits if t > when.timestamp()})
        if count == 0:
            return "unchanged since"
        return f"{count} commit{'s' if count > 1 else ''} since"


def file_history(
    files: Files,
    embedder: Embedder | None,
    question: FileQuestion,
    git_timeout: float = GIT_TIMEOUT_S,
) -> FileHistory:
    """The earlier sessions of the file's repository that changed or read it, best first."""
    if not 1 <= question.limit <= MAX_SESSIONS:
        raise BadFileQuestion(f"limit must be between 1 and {MAX_SESSIONS}")
    cwd = normal_path(question.cwd) if question.cwd else None
    known_root = normal_path(question.root) if question.root else None
    path = normal_path(question.path, known_root or cwd)
    if path is None:
        raise BadFileQuestion("the path must be absolute, or relative to a cwd that is")
    worked_in = {p for p in map(normal_path, files.worked_in()) if p} | ({cwd} if cwd else set())
    root = known_root or root_of(cwd or os.path.dirname(path), worked_in)
    depth = below(components(path), components(root))
    if depth is None and not known_root:  # a file outside the cwd's repository: its own
        root = root_of(os.path.dirname(path), worked_in)
        depth = below(components(path), components(root))
    rel = path[len(root) + 1 :] if depth is not None else path
    log = _git_log(root, rel, files.earliest(), git_timeout) if depth is not None else None
    former = log.former_names(rel) if log else []
    asked = [path, *(f"{root}/{name}" for name in former)]
    rows = files.touching(
        sorted({file_name(p) for p in asked}),
        question.include_private,
        question.session_id,
        question.viewer,
    )
    known = _known_repositories(files, worked_in)
    if question.repository:
        known[root] = project_of_remote(question.repository).casefold()
    sessions = _matching(rows, asked, root, worked_in, known)
    if not sessions:
        return FileHistory(path=rel, results=[], former_names=former, note=NOTHING_TOUCHED)
    closeness = _closeness(files, embedder, question.task, list(sessions))
    chosen = _chosen(list(sessions.values()), closeness, question.limit, path)
    names = {os.path.basename(rel).casefold(), *(os.path.basename(n).casefold() for n in former)}
    return FileHistory(
        path=rel,
        results=[_card(s, names, closeness.get(s["session_id"]), log) for s in chosen],
        former_names=former,
    )


def _known_repositories(files: Files, worked_in: set[str]) -> dict[str, str]:
    """The repository's name at each root where a session named its remote."""
    known = {}
    for cwd, remote in files.repositories():
        folder = normal_path(cwd)
        if folder:
            known[root_of(folder, worked_in)] = project_of_remote(remote).casefold()
    return known


def _matching(
    rows: Sequence[dict[str, Any]],
    asked: Sequence[str],
    root: str,
    worked_in: set[str],
    known: dict[str, str],
) -> dict[str, dict[str, Any]]:
    """The sessions whose touches are one of `asked`, newest first, their touches added up;
    `known`: the repository's name of the roots whose remote is known."""
    sessions: dict[str, dict[str, Any]] = {}
    for row in rows:
        cwd = normal_path(row["cwd"]) if row["cwd"] else None
        # Without a cwd nothing says where its repository is: only the same path is the file.
        their_root = root_of(cwd, worked_in) if cwd else row["path"]
        if not any(same_file(p, root, row["path"], their_root, known) for p in asked):
            continue
        found = sessions.get(row["session_id"])
        if found is None:
            sessions[row["session_id"]] = dict(row)
        else:
            found["edits"] += row["edits"]
            found["reads"] += row["reads"]
    return sessions


def _closeness(
    files: Files, embedder: Embedder | None, task: str | None, sessions: list[str]
) -> dict[str, float]:
    if embedder is None or not task or not task.strip() or len(sessions) < 2:
        return {}  # one session is shown whatever its closeness
    vector = _task_vector(embedder, task[:TASK_CHARS])
    return files.closeness(sessions, vector, embedder.model_name)


@functools.lru_cache(maxsize=TASK_VECTORS)
def _task_vector(embedder: Embedder, task: str) -> tuple[float, ...]:
    return tuple(embedder.embed_query(task))


def _chosen(
    sessions: list[dict[str, Any]], closeness: dict[str, float], limit: int, path: str
) -> list[dict[str, Any]]:
    """The most recent session that changed the file; the most recent that changed it in this
    very checkout (the same path: another worktree's change may be on a branch not merged
    here); the most recent change of each other agent that changed it (a user who works with
    two agents is told what the other did); then the changers nearest the task, then the
    readers nearest it (by recency where there is no task)."""
    changed = [s for s in sessions if s["edits"] > 0]
    read = [s for s in sessions if s["edits"] == 0]
    if not changed:
        return [read[0], *_nearest(read[1:], closeness)][:limit]
    first = [changed[0]]
    here = next((s for s in changed[1:] if s["path"] == path), None)
    if here is not None:
        first.append(here)
    for session in changed:  # newest first: each agent's most recent change
        if all(session["agent"] != s["agent"] for s in first):
            first.append(session)
    rest = [s for s in changed if s not in first]
    return [*first, *_nearest(rest, closeness), *_nearest(read, closeness)][:limit]


def _nearest(group: list[dict[str, Any]], closeness: dict[str, float]) -> list[dict[str, Any]]:
    # sorted() keeps the newest-first order among equals, and where there is no task.
    return sorted(group, key=lambda s: -closeness.get(s["session_id"], -2.0))


def _card(
    row: dict[str, Any], names: set[str], relevance: float | None, log: GitLog | None
) -> FileSession:
    digest = row["digest"] if isinstance(row["digest"], dict) else {}
    return FileSession(
        session_id=row["session_id"],
        project=row["project"],
        agent=row["agent"],
        person=row["person"],
        started_at=row["started_at"],
        date=row["date"],
        git_branch=row["git_branch"],
        title=row["title"],
        summary=row["summary"],
        domain=row["domain"],
        tags=row["tags"],
        files=row["files"],
        highlights=highlights(digest, []),
        path=row["path"],
        changed=row["edits"] > 0,
        edits=row["edits"],
        reads=row["reads"],
        lines=_naming(digest, names),
        relevance=None if relevance is None else round(relevance, 3),
        changed_since=log.since(row["date"]) if log else None,
    )


def _naming(digest: dict[str, Any], names: set[str]) -> list[str]:
    """The digest's lines that name one of the file's names (as a word, in any case)."""
    pattern = re.compile(
        r"(?<![\w.-])(?:" + "|".join(map(re.escape, sorted(names))) + r")(?![\w-])", re.I
    )
    found: list[str] = []
    for section in _DIGEST_SECTIONS:
        lines = digest.get(section)
        for line in lines if isinstance(lines, list) else []:
            text = str(line)
            if not text.startswith(_LISTING) and pattern.search(text):
                found.append(cut(text, HIGHLIGHT_CHARS))
                if len(found) == NAMED_LINES:
                    return found
    return found


def changed_since(
    cwd: str | None, files: Sequence[str], since: datetime | None, timeout: float = 1.0
) -> dict[str, str | None]:
    """For each of a session's files (relative to its `cwd`, or absolute): whether it changed
    since `since` ("unchanged since", "3 commits since"), or None where git cannot say (the
    repository is not on this machine)."""
    unknown: dict[str, str | None] = dict.fromkeys(files)
    if not cwd or since is None:
        return unknown
    root = (git_output(cwd, ["rev-parse", "--show-toplevel"], timeout) or "").strip()
    if not root:
        return unknown
    said: dict[str, str | None] = {}
    for name in files:
        rel = os.path.relpath(os.path.join(cwd, name), root)
        log = None if rel.startswith("..") else _git_log(root, rel, since, timeout)
        said[name] = log.since(since) if log else None
    return said


def _git_log(root: str, rel: str, since: datetime | None, timeout: float) -> GitLog | None:
    """The file's commits since `since`, following renames; None where git cannot say (no
    repository here, no git, or not within `timeout`)."""
    if not os.path.isdir(root) or not os.path.exists(os.path.join(root, ".git")):
        return None
    command = ["log", "--follow", "--format=%x1e%ct", "--name-status"]
    if since is not None:
        command.append(f"--since={since.isoformat()}")
    said = git_output(root, [*command, "--", rel], timeout)
    if said is None:
        return None
    commits: list[tuple[float, str]] = []
    for block in said.split("\x1e")[1:]:
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or not lines[0].strip().isdigit():
            continue
        when = float(lines[0])
        for line in lines[1:]:
            # `M\tname`, or for a rename `R100\told\tnew`: each name the file had in it.
            commits += [(when, name) for name in line.split("\t")[1:]]
    return GitLog(tuple(commits))
