"""The one way to any agent's sessions, by its reader.

Every caller (the sensor, `librarian ingest` and `parse`, the stages) goes through here and never
names an agent's folder: a session's `SessionFiles.agent` picks its reader, from the agents
core/capture/agents.py lists.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.agents import AGENTS as _AGENTS
from librarian_dagster.core.capture.files import SessionFiles, SessionHead
from librarian_dagster.core.capture.own_context import without_own_context
from librarian_dagster.core.capture.reader import Reader
from librarian_dagster.core.capture.session import Session, ToolUse

__all__ = [
    "AGENTS",
    "LABELS",
    "READERS",
    "Found",
    "UnknownAgent",
    "agent_of",
    "check_agent",
    "discover",
    "find",
    "known_cwds",
    "label",
    "live_task",
    "live_tool",
    "named_folders",
    "not_a_transcript",
    "parse_session",
    "session_files_for",
    "session_head",
    "session_heads",
]

# A file is told to be an agent's by the first reader, in the list's order, that claims it.
READERS: dict[str, Reader] = {name: agent.reader for name, agent in _AGENTS.items()}
AGENTS = tuple(READERS)
NO_READER = "no reader for agent"
FALLBACK = "claude-code"
"""The agent that takes a `.jsonl` file no other reader claims (empty, cut short, not JSON): its
folder has always been read so, every `*.jsonl` a session, and its parse says why such a file
holds nothing to remember. Any other file no reader claims is not ingested."""

LABELS: dict[str, str] = {agent: reader.label for agent, reader in READERS.items()}
"""Every agent, as people name it: what filters accept and answers show, the hooks' text too."""


class UnknownAgent(ValueError):
    """An agent filter naming no agent Librarian knows; the message lists the known ones."""


def not_a_transcript() -> str:
    """Why a file no reader claims is not ingested: one line, naming what is read."""
    names = ", ".join(reader.label for reader in READERS.values())
    return f"not a transcript of any agent Librarian reads ({names})"


def label(agent: str) -> str:
    """How people name an agent ("Codex"); an unknown name as it is."""
    return LABELS.get(agent, agent)


def named_folders(folders: Mapping[str, Path]) -> str:
    """Agents' folders as people read them: "Claude Code's /a, Codex's /b"."""
    return ", ".join(f"{label(agent)}'s {folder}" for agent, folder in folders.items())


def check_agent(agent: str) -> str:
    """`agent` when it is a known agent's name; else UnknownAgent saying which names are."""
    if agent not in LABELS:
        known = ", ".join(LABELS)
        shown = agent if len(agent) <= 40 else agent[:40] + "..."
        raise UnknownAgent(f"unknown agent {shown!r}: one of {known}")
    return agent


def agent_of(path: Path) -> str | None:
    """The agent whose transcript this file is, from its first lines; None for no known one."""
    claimed = _claimed_by(path)
    if claimed is None and path.suffix == ".jsonl":
        return FALLBACK
    return claimed


def _claimed_by(path: Path) -> str | None:
    return next((r.agent for r in READERS.values() if r.claims(path)), None)


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """The session model of these files, by their agent's reader. Never raises on bad content.
    `known_cwds`: folders where sessions ran, for a transcript that does not name its own."""
    reader = READERS.get(files.agent)
    if reader is None:
        return Session(
            session_id=files.session_id,
            project="unknown",
            agent=files.agent,
            skip_reason=f"{NO_READER} {files.agent!r}",
            files=tuple(str(p) for p in files.paths),
            fingerprint=files.fingerprint(),
        )
    session = reader.parse(files, include_thinking=include_thinking, known_cwds=known_cwds)
    return _without_own_context(session)


def _without_own_context(session: Session) -> Session:
    """The session without what Librarian itself handed the agent (own_context.py): a turn
    that was nothing else is gone."""
    turns = []
    for turn in session.turns:
        text = without_own_context(turn.text)
        if text == turn.text:
            turns.append(turn)
        elif text or turn.tool_uses:
            turns.append(replace(turn, text=text))
    session.turns = turns
    return session


def session_head(files: SessionFiles, known_cwds: Iterable[str] = ()) -> SessionHead:
    reader = READERS.get(files.agent)
    if reader is None:
        return SessionHead(project="unknown", started_at=None)
    return reader.head(files, known_cwds=known_cwds)


def session_heads(
    sessions: Sequence[SessionFiles], known_cwds: Iterable[str] = ()
) -> list[SessionHead]:
    """The heads of these sessions, in order. A session whose head names no cwd is headed with
    `known_cwds` and the cwds the others' heads name: one call places a Gemini CLI session by
    the Codex or Claude Code sessions found beside it."""
    known = list(known_cwds)
    heads = [session_head(files, known) for files in sessions]
    found = [h.cwd for h in heads if h.cwd]
    if not found:
        return heads
    cwds = list(dict.fromkeys(found + known))
    return [
        h if h.cwd else session_head(files, cwds) for files, h in zip(sessions, heads, strict=True)
    ]


def known_cwds(sessions: Sequence[SessionFiles]) -> list[str]:
    """The distinct folders these sessions ran in, as their heads name them."""
    return list(dict.fromkeys(h.cwd for h in session_heads(sessions) if h.cwd))


def discover(roots: Mapping[str, Path]) -> list[SessionFiles]:
    """Every session under each agent's folder ({agent: folder}); a folder not there is none."""
    found: list[SessionFiles] = []
    for agent, root in roots.items():
        reader = READERS.get(agent)
        if reader is not None and Path(root).is_dir():
            found.extend(reader.discover(Path(root)))
    return found


@dataclass(frozen=True)
class Found:
    """What `session_files_for` made of the paths it was given."""

    sessions: list[SessionFiles]
    unknown: list[Path]
    """Files given by name that are no known agent's transcript: not ingested."""


def session_files_for(paths: Iterable[Path]) -> list[SessionFiles]:
    """The sessions of these files and folders (`find`), leaving out files no agent claims."""
    return find(paths).sessions


def find(paths: Iterable[Path]) -> Found:
    """Sessions for `librarian ingest PATH...`, each file's agent told from its content.

    A folder is searched by every reader, each keeping the sessions it claims; a file is taken
    by the reader that claims it, with its subagents' files (a `.jsonl` no reader claims, by
    FALLBACK's).
    """
    by_agent: dict[str, list[Path]] = {}
    sessions: list[SessionFiles] = []
    unknown: list[Path] = []
    for path in (Path(p) for p in paths):
        if path.is_dir():
            sessions.extend(_claimed_in(path))
        elif path.is_file():
            agent = agent_of(path)
            if agent is None:
                unknown.append(path)
            else:
                by_agent.setdefault(agent, []).append(path)
    for agent, files in by_agent.items():
        sessions.extend(READERS[agent].files_for(files))
    distinct = {(s.agent, s.session_id): s for s in sessions}
    return Found(sorted(distinct.values(), key=lambda s: (s.session_id, s.agent)), unknown)


def _claimed_in(folder: Path) -> list[SessionFiles]:
    found = []
    for reader in READERS.values():
        for files in reader.discover(folder):
            first = files.main or (files.subagents[0] if files.subagents else None)
            if first is not None and agent_of(first) == reader.agent:
                found.append(files)
    return found


# What the hooks ask of a session still going on. The hooks run without this package, so the
# recall server answers for them (mcp_server's /touches and /history): what a tool call is about
# to touch, and what the session is doing now, each by the agent's own reader.

LIVE_TASK_MAX_BYTES = 16 * 1024 * 1024
"""A live session's files read for its task at most: about 0.15 s of parsing, within a hook's
deadline; a longer session has no task, and its file history comes in recency order alone."""


def live_tool(
    agent: str, name: str, tool_input: Mapping[str, Any], cwd: str | None = None
) -> ToolUse | None:
    """What a tool call that `agent`'s hook shows will do, and to which files; None for an
    agent whose hooks are not read."""
    reader = READERS.get(agent)
    if reader is None or reader.live_tool is None:
        return None
    return reader.live_tool(name, tool_input, cwd)


def _asks(prompt: str) -> bool:
    """Whether a prompt says what the work is: a bare command (`/exit`, `/clear`) does not."""
    words = prompt.split()
    return bool(words) and not (len(words) == 1 and words[0].startswith("/"))


def _bare(agent_id: str) -> str:
    return agent_id.removeprefix("agent-")


def live_task(transcript: Path, subagent: str | None = None) -> str | None:
    """What the session of this transcript is doing now: the latest prompt its user typed, or a
    subagent's task (its own first prompt, as its parent gave it). None for a file no reader
    claims, one too long to read within a hook's deadline, or one with no prompt yet."""
    try:
        if not transcript.is_file():
            return None
    except OSError:
        return None
    agent = _claimed_by(transcript)
    if agent is None:
        return None
    sessions = READERS[agent].files_for([transcript])
    if not sessions:
        return None
    files = sessions[0]
    try:
        size = sum(p.stat().st_size for p in files.paths)
    except OSError:
        return None
    if size > LIVE_TASK_MAX_BYTES:
        return None
    session = parse_session(files)
    prompts = [t for t in session.turns if t.role == "user" and t.kind == "prompt"]
    prompts = [t for t in prompts if _asks(t.text)]
    if subagent:
        own = [t for t in prompts if t.agent_id and _bare(t.agent_id) == _bare(subagent)]
        if own:
            return own[0].text
    main = [t for t in prompts if not t.agent_id]
    return main[-1].text if main else None
