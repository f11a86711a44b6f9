"""The one session model every agent's reader fills: a `Session` of `Turn`s and their `ToolUse`s.

Whatever agent wrote the transcript (core/capture/readers.py names them), its reader decides here
what each tool use meant: `action` says whether it changed a file, read one, ran a command or
searched, so nothing downstream keeps any agent's tool names.

What the turns mean:

* `role` is "user" or "assistant"; `kind` is "prompt" (what the user typed), "text" (the
  assistant's words), "tool_result", "meta" (text the agent injected in the user's name),
  "compact_summary" (a restatement of earlier turns), "thinking" or "other".
* The main dialogue comes first, in order, then each subagent's turns (subagents by their first
  timestamp). A subagent's turns carry its `agent_id`; its "prompt" is the task its parent gave.

Standard library only: hooks and the MCP server import this without dagster.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.records import ParseStats

# The readers import these by name, so the same import lines stand in several agents' folders
# (`duplicates` pairs them): kept, for an import is no logic to share.
__all__ = [
    "ACTIONS",
    "CHANGE",
    "IDENTITY",
    "READ",
    "RUN",
    "SEARCH",
    "UNREADABLE",
    "Session",
    "ToolUse",
    "Turn",
    "nothing_to_remember",
    "one_line",
]

CHANGE = "change"
"""The tool use changed the files in `file_paths` (wrote, edited, patched, deleted or moved)."""
READ = "read"
"""It read the files in `file_paths`, each a file worked on."""
RUN = "run"
"""It ran a command (`command`) that is not plainly a read."""
SEARCH = "search"
"""It searched (a pattern over a folder, the web); `file_paths` names folders, if anything."""
ACTIONS = (CHANGE, READ, RUN, SEARCH)

UNREADABLE = "unreadable file"
"""The start of the `skip_reason` of a session whose main file could not be read: a fault of the
moment (a folder away, a mount gone), not a session with nothing to remember."""


IDENTITY = "identity"
"""Marks a field (in its `metadata`) that names a thing rather than saying something: an id or a
fingerprint. Redaction passes it by; every other string field is text and is redacted."""


def _identity(default: Any = None) -> Any:
    return field(default=default, metadata={IDENTITY: True})


def nothing_to_remember(
    turns: "list[Turn]",
    size: int | None,
    records: bool = True,
    conversation: str | None = None,
    empty: str = "only injected or empty messages",
) -> str | None:
    """Why a readable session holds nothing to remember, or None: the ladder every reader
    climbs. `size`: of its files in bytes, None for no files; `records`: whether any was read;
    `conversation`: the reader's words for why there is none (no message records), None when
    there is one; `empty`: its words for turns that are all injected or empty."""
    if size is None:
        return "no files"
    if size == 0:
        return "empty file"
    if not records:
        return "not a transcript (no JSON records)"
    if conversation:
        return f"no conversation ({conversation})"
    if not any(t.kind in ("prompt", "text", "tool_result") for t in turns):
        return f"no conversation ({empty})"
    return None


def one_line(text: str, width: int = 100) -> str:
    """`text` on one line of at most `width` characters: a tool call's summary."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 3] + "..."


@dataclass
class ToolUse:
    name: str
    """The tool's name as the agent calls it, for people to read; never branched on."""
    file_paths: tuple[str, ...] = ()
    command: str | None = None
    summary: str = ""
    is_error: bool = False
    id: str | None = _identity()
    action: str = ""
    """One of ACTIONS, or "" for anything else (a subagent spawned, a plan updated)."""


@dataclass
class Turn:
    role: str
    kind: str
    text: str
    timestamp: datetime | None
    tool_uses: tuple[ToolUse, ...] = ()
    agent_id: str | None = _identity()
    uuid: str | None = _identity()


@dataclass
class Session:
    session_id: str = field(metadata={IDENTITY: True})
    project: str
    cwd: str | None = None
    git_branch: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    title: str | None = None
    """The title the agent gave the session (a summary, a thread's name), if it gave one."""
    versions: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    turns: list[Turn] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    stats: ParseStats = field(default_factory=ParseStats)
    skip_reason: str | None = None
    files: tuple[str, ...] = ()
    fingerprint: str = _identity("")
    """The files' fingerprint (`SessionFiles.fingerprint`) taken before they were read: a file
    that grows while it is parsed then differs from it, and is taken again later."""
    agent: str = _identity("claude-code")
    """Which agent wrote the session: a reader's name in core/capture/readers.py."""
    person: str | None = _identity()
    """Whose session it is: who pushed it (`librarian push`), or the person of the machine it
    was read on (core/capture/repository.py's `attribute`)."""
    repository: str | None = _identity()
    """The repository it worked in, named by its remote (`github.com/acme/cli`), where the
    machine it ran on could read one."""
    private: bool = False
    """Its person keeps its project private (LIBRARIAN_PRIVATE_PROJECTS): no other person reads
    it."""

    @classmethod
    def of(cls, files: SessionFiles, fingerprint: str, **read: Any) -> "Session":
        """The session of `files`, as every reader assembles it: its id, files, fingerprint and
        agent from them (the fingerprint taken before they were read); the rest as `read`. The
        readers name the fields they read alike (`versions=`, `models=`, the tokens), and keep
        alike what adds up to them: lines `duplicates` pairs across the agents' folders, kept,
        for they are this model's own list, filled each reader its own way."""
        return cls(
            **{"session_id": files.session_id, **read},
            files=tuple(str(p) for p in files.paths),
            fingerprint=fingerprint,
            agent=files.agent,
        )
