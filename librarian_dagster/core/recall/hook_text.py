"""What an agent's hook hands its model: the past sessions that bear on a prompt (`POST /recall`)
and the earlier sessions of a file at its first touch (`POST /history`), written here once for
every agent's hooks and plugins, which only print it.

Whole lines within the caller's budget, or nothing: a line cut in half can read as a different
fact. Each text starts with its header, on which Librarian cuts its own context out of a
transcript it reads back (core/capture/own_context.py). Every value from the store is made one
line of printable characters (`clean`): a memory must not reshape the context around it.

A session is named with its agent where that is not Claude Code, the agent most sessions are by
("Codex session ..."), and with its person where that is not the asker ("alice's session ...").
For the sessions of the asker's repository, git (where that checkout is on this machine) says
how many of their files changed since they ended, and in how many commits: a memory of code that
has moved on is marked, not trusted blindly.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from librarian_dagster.core.capture.readers import label
from librarian_dagster.core.capture.repository import git_output
from librarian_dagster.core.store.rows import ChunkResult, FileHistory, FileSession

__all__ = [
    "HISTORY_BUDGET",
    "HISTORY_HEADER",
    "RECALL_BUDGET",
    "RECALL_HEADER",
    "history_text",
    "recall_text",
    "skip_reason",
    "typed",
]

RECALL_HEADER = (
    "Librarian remembers past sessions that may bear on this prompt (from memory, possibly out "
    "of date; the MCP tool get_digest with a session_id returns the whole session):"
)
HISTORY_HEADER = (
    "Librarian remembers earlier sessions that worked on {path} (from memory, possibly out of "
    "date; the MCP tool get_digest with a session_id returns the whole session):"
)
RECALL_BUDGET = 1500
HISTORY_BUDGET = 1200
MIN_BUDGET = 200
MAX_BUDGET = 10000
"""Claude Code spills hook output strings above 10,000 characters to a file."""
MIN_WORDS = 4
HOOK_CONTEXT = ("<hook_context>", "</hook_context>")
MAX_QUERY = 2000
"""Characters of a prompt looked up (search_chunks' limit): its start says what it is about."""
USUAL_AGENT = "claude-code"
"""The agent whose sessions are named plainly, "session ...": most sessions are by it."""
SHOWN_FILES = 3
"""Of a session's changed files, named in its context."""
MAX_FILES = 20
MIN_GIT_S = 0.04
"""git is not started with less than this left of the deadline: a check cut short says nothing,
at the price of a process."""
MAX_GIT_COMMITS = 1000
"""Commits read since a session ended: enough to say "1000+"."""
HISTORY_LINES = 2
"""Of a file's earlier session: its digest lines that name the file, and its highlights."""


def typed(prompt: str) -> str:
    """The words the user typed, at most MAX_QUERY: Gemini CLI, headless, puts its SessionStart
    hooks' context (`<hook_context>...</hook_context>\\n\\n`) before the prompt it hands
    BeforeAgent."""
    opening, closing = HOOK_CONTEXT
    rest = prompt.lstrip()
    if not rest.startswith(opening):
        return prompt[:MAX_QUERY]
    while rest.startswith(opening) and closing in rest:
        rest = rest[rest.index(closing) + len(closing) :].lstrip()
    return rest[:MAX_QUERY]


def skip_reason(prompt: str) -> str | None:
    """Why a prompt is not asked about: a slash command, or too short to say what it is about."""
    if not prompt.strip():
        return "no prompt"
    if prompt.lstrip().startswith("/"):
        return "slash command"
    if len(prompt.split()) < MIN_WORDS:
        return "short prompt"
    return None


def budget_of(asked: int | None, default: int) -> int:
    """The caller's budget, within what a hook can hand on; theirs to set, never a refusal."""
    return default if asked is None else max(MIN_BUDGET, min(MAX_BUDGET, asked))


def clean(value: object, limit: int = 2000) -> str:
    """One line, no control characters."""
    if not isinstance(value, str):
        return ""
    text = " ".join(value.split())
    return "".join(c for c in text[:limit] if c.isprintable())


def _iso(when: datetime | None) -> str:
    return when.isoformat() if when is not None else ""


def dates(started: str, ended: str) -> str:
    """`2026-01-10 to 2026-01-11` from two ISO instants, one day when they share it."""
    started, ended = started[:10], ended[:10]
    return f"{started} to {ended}" if started and ended and started != ended else ended


def session_word(agent: str, person: str | None, asker: str | None) -> str:
    """ "session", "Codex session", "alice's Codex session", "alice's session"."""
    name = label(agent)
    if agent == USUAL_AGENT or not (name.replace("-", "").replace(" ", "").isalnum()):
        word = "session"  # the usual agent, or a name that does not look like one
    else:
        word = f"{clean(name, 40)} session"
    who = clean(person, 64)
    return f"{who}'s {word}" if who and who != asker else word


@dataclass
class _Recalled:
    """One session of a recall answer, as its context names it."""

    id: str
    first: ChunkResult
    files: list[str]
    bullets: list[str] = field(default_factory=list)
    stale: str = ""

    @property
    def here(self) -> bool:
        return self.first.context in ("project", "branch")

    def head(self, asker: str | None, with_summary: bool) -> str:
        first = self.first
        where = ", ".join(
            x for x in (clean(first.project, 100), dates(_iso(first.started_at), _iso(first.date)))
            if x
        )  # fmt: skip
        branch = clean(first.git_branch, 200)
        if branch:
            where += (", " if where else "") + "branch " + branch
        if self.stale:
            where += f"; {self.stale}"
        head = f"- {session_word(first.agent, first.person, asker)} {self.id}"
        head += f" ({where})" if where else ""
        title = clean(first.title, 200).replace('"', "'")
        if title:
            head += f' "{title}"'
        summary = clean(first.summary, 400)
        return head + (f": {summary}" if with_summary and summary else "")


def _recalled(results: Sequence[ChunkResult]) -> list[_Recalled]:
    """The results grouped by session, best first. A session's lines are its highlights (the
    digest's distilled lines), never the matched chunk's text, which may be an exchange window
    (the past prompt's own words)."""
    sessions: dict[str, _Recalled] = {}
    for hit in results:
        sid, text = clean(hit.session_id, 200), clean(hit.text)
        if not sid or not text:
            continue
        if sid not in sessions:  # the session's facts are its best chunk's
            files = [n for n in (clean(f, 300) for f in hit.files[:MAX_FILES]) if n]
            sessions[sid] = _Recalled(sid, hit, files)
        session = sessions[sid]
        summary = clean(session.first.summary, 400)
        for line in (clean(h, 400) for h in hit.highlights):
            if line and line != summary and line not in session.bullets:
                session.bullets.append(line)
    for session in sessions.values():
        if session.files:
            more = len(session.files) - SHOWN_FILES
            session.bullets.append(
                "files: "
                + ", ".join(session.files[:SHOWN_FILES])
                + (f" (+{more} more)" if more > 0 else "")
            )
    return list(sessions.values())


def _mark_stale(sessions: list[_Recalled], cwd: str | None, deadline: float) -> None:
    """For each session of the asker's repository that changed files: how many of them changed
    since it ended, in how many commits. One `git log` each, within what is left before
    `deadline` (a perf_counter time); silent where git cannot say (not on this machine)."""
    for session in sessions:
        ended = _iso(session.first.date)
        if not (cwd and session.here and session.files and ended):
            continue
        left = deadline - time.perf_counter()
        if left < MIN_GIT_S:
            return
        output = git_output(cwd, ["log", f"--since={ended}", f"--max-count={MAX_GIT_COMMITS}",
                                  "--format=%x1e", "--name-only", "--relative", "HEAD", "--"],
                            left)  # fmt: skip
        if output is None:
            return
        commits = output.count("\x1e")
        touched = {line.strip() for line in output.splitlines()} - {"", "\x1e"}
        changed = sum(f in touched for f in session.files)
        if commits:
            many = f"{commits}+" if commits >= MAX_GIT_COMMITS else str(commits)
            session.stale = (
                f"{changed} of its {len(session.files)} files changed since, {many} commits"
            )
        else:
            session.stale = "no commits since"


def recall_text(
    results: Sequence[ChunkResult],
    budget: int,
    asker: str | None,
    cwd: str | None = None,
    deadline: float | None = None,
) -> tuple[str | None, int]:
    """The context for a prompt, at most `budget` characters, and how many sessions it names.

    The budget goes first to naming the sessions (best first), then to their summaries, then to
    their bullets one round at a time: a second session named beats a third bullet about the
    first. `cwd`: where the prompt was typed, whose sessions' files git checks until `deadline`.
    """
    sessions = _recalled(results)
    if deadline is not None:
        _mark_stale(sessions, cwd, deadline)
    used = len(RECALL_HEADER)
    heads: list[str] = []
    for session in sessions:
        line = session.head(asker, False)
        if used + 1 + len(line) > budget:
            break  # later sessions are less relevant anyway
        heads.append(line)
        used += 1 + len(line)
    if not heads:
        return None, 0
    named = sessions[: len(heads)]
    for i, session in enumerate(named):
        fuller = session.head(asker, True)
        if used + len(fuller) - len(heads[i]) <= budget:
            used += len(fuller) - len(heads[i])
            heads[i] = fuller
    shown = _rounds([s.bullets for s in named], budget - used)
    lines = [RECALL_HEADER]
    for head, bullets in zip(heads, shown, strict=True):
        lines += [head, *bullets]
    return "\n".join(lines), len(heads)


def _rounds(extras: list[list[str]], room: int) -> list[list[str]]:
    """Each session's lines as "  - " bullets, a round at a time, as many as fit in `room`."""
    shown: list[list[str]] = [[] for _ in extras]
    for row in range(max((len(e) for e in extras), default=0)):
        for i, lines in enumerate(extras):
            if row < len(lines) and 5 + len(lines[row]) <= room:
                shown[i].append("  - " + lines[row])
                room -= 5 + len(lines[row])
    return shown


def _history_line(entry: FileSession, asker: str | None) -> str | None:
    sid = clean(entry.session_id, 200)
    if not sid:
        return None
    where = [dates(_iso(entry.started_at), _iso(entry.date))]
    branch = clean(entry.git_branch, 200)
    if branch:
        where.append("branch " + branch)
    plural = "s" if entry.edits != 1 else ""
    where.append(f"changed it ({entry.edits} edit{plural})" if entry.changed else "read it")
    since = clean(entry.changed_since, 60)
    if since:
        where.append(f"the file {since}")
    head = f"- {session_word(entry.agent, entry.person, asker)} {sid} ("
    head += "; ".join(w for w in where if w) + ")"
    title = clean(entry.title, 200).replace('"', "'")
    summary = clean(entry.summary, 400)
    return head + (f' "{title}"' if title else "") + (f": {summary}" if summary else "")


def history_text(
    history: FileHistory, shown_path: str, budget: int, asker: str | None
) -> tuple[str | None, int]:
    """The context for a file's first touch, at most `budget` characters of whole lines, and how
    many sessions it names: every session's line first (the most recent changer is the first),
    then their digest lines that name the file, then their highlights, a round at a time."""
    text = HISTORY_HEADER.format(path=clean(history.path, 300) or shown_path)
    used, heads, extras = len(text), [], []
    for entry in history.results:
        line = _history_line(entry, asker)
        if line is None or used + 1 + len(line) > budget:
            continue
        heads.append(line)
        used += 1 + len(line)
        lines = [clean(x, 400) for x in entry.lines[:HISTORY_LINES]]
        lines += [clean(x, 400) for x in entry.highlights[:HISTORY_LINES]]
        extras.append([x for i, x in enumerate(lines) if x and x not in lines[:i]])
    if not heads:
        return None, 0
    out = [text]
    for head, bullets in zip(heads, _rounds(extras, budget - used), strict=True):
        out += [head, *bullets]
    return "\n".join(out), len(heads)
