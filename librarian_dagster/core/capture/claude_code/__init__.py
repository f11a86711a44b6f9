"""Claude Code: `~/.claude/projects/<slug>/<session>.jsonl`, with its subagents beside it."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.claude_code import files
from librarian_dagster.core.capture.claude_code.connector import CONNECTOR
from librarian_dagster.core.capture.claude_code.transcript import parse_session
from librarian_dagster.core.capture.claude_code.turns import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of("claude-code", "Claude Code", files, parse_session, live_tool)
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
