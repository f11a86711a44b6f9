"""What an agent's reader is: the five things Librarian asks of any agent's transcripts.

Each agent has a folder of its own under core/capture/ (claude_code/, codex/, ...) whose
`__init__.py` defines its `READER`; core/capture/readers.py lists them. A reader imports no
other agent's folder.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles, SessionHead
from librarian_dagster.core.capture.session import Session, ToolUse

__all__ = ["Reader"]


@dataclass(frozen=True)
class Reader:
    agent: str
    """The agent's name in the store, the partition key, filters and every answer."""
    label: str
    """How people name the agent."""
    claims: Callable[[Path], bool]
    """Whether a file is this agent's transcript, told from its first lines alone."""
    discover: Callable[[Path], list[SessionFiles]]
    """Every session under the folder this agent writes its sessions to (or a copy of it)."""
    files_for: Callable[[Iterable[Path]], list[SessionFiles]]
    """The sessions of these files (each one this reader claims) and folders, with the
    subagents' files that belong to them."""
    head: Callable[..., SessionHead]
    """`head(files, known_cwds=())`: the project, the first time and the cwd, from the head of
    the main file alone: cheap, and stable while the session grows (the partition key is made
    from it)."""
    parse: Callable[..., Session]
    """`parse(files, include_thinking=False, known_cwds=())`: the session model; never raises
    on bad content (an unreadable file becomes a `skip_reason`).

    `known_cwds`, for both: folders where sessions (of any agent) ran, for an agent whose
    transcripts do not name theirs (Gemini CLI keeps a hash of it); the others ignore it."""
    live_tool: Callable[[str, Mapping[str, Any], str | None], ToolUse] | None = None
    """`live_tool(name, tool_input, cwd)`: a tool call as this agent's hooks show it before it
    runs (their tool name and input, which may differ from the transcript's): what it will do
    and to which files, by the same rule as `parse`. None where no hook of the agent asks."""

    @classmethod
    def of(
        cls,
        agent: str,
        label: str,
        files: ModuleType,
        parse: Callable[..., Session],
        live_tool: Callable[[str, Mapping[str, Any], str | None], ToolUse] | None = None,
    ) -> "Reader":
        """The reader whose `files` module (its agent's `files.py`) holds `claims`,
        `discover_sessions`, `session_files_for` and `session_head`, as every agent's does."""
        return cls(agent, label, files.claims, files.discover_sessions, files.session_files_for,
                   files.session_head, parse, live_tool)  # fmt: skip
