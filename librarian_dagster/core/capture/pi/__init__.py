"""Pi: `~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl`, a tree of entries; its kept branch read."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.pi.connector import CONNECTOR
from librarian_dagster.core.capture.pi.entries import parse_session
from librarian_dagster.core.capture.pi.files import (
    AGENT as NAME,
)
from librarian_dagster.core.capture.pi.files import (
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.pi.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=NAME,
    label="Pi",
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
        variable="LIBRARIAN_PI_SESSIONS",
        default="~/.pi/agent/sessions",
        about="Pi's sessions (`<cwd>/<time>_<id>.jsonl`)",
    ),
    connector=CONNECTOR,
)
