"""Claude Code: `~/.claude/projects/<slug>/<session>.jsonl`, with its subagents beside it."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.claude_code.connector import CONNECTOR
from librarian_dagster.core.capture.claude_code.files import (
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.claude_code.transcript import parse_session
from librarian_dagster.core.capture.claude_code.turns import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent="claude-code",
    label="Claude Code",
    claims=claims,
    discover=discover_sessions,
    files_for=session_files_for,
    head=session_head,
    parse=parse_session,
    live_tool=live_tool,
)

AGENT = Agent(
    reader=READER,
    folder=Folder(
        variable="LIBRARIAN_CLAUDE_CODE_SESSIONS",
        default="~/.claude/projects",
        about="Claude Code's transcripts (recursive `*.jsonl`; `<session>/subagents/` belong to "
        "their parent)",
        aliases=("LIBRARIAN_MIRROR",),
    ),
    connector=CONNECTOR,
)
