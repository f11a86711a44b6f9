"""Copilot CLI: `~/.copilot/session-state/<session>/events.jsonl`, its subagents' events inline."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.copilot.connector import CONNECTOR
from librarian_dagster.core.capture.copilot.events import parse_session
from librarian_dagster.core.capture.copilot.files import (
    AGENT as NAME,
)
from librarian_dagster.core.capture.copilot.files import (
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.copilot.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=NAME,
    label="Copilot CLI",
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
        variable="LIBRARIAN_COPILOT_SESSIONS",
        default="~/.copilot/session-state",
        about="Copilot CLI's session state (`<session>/events.jsonl`)",
        home=("COPILOT_HOME", "session-state"),
    ),
    connector=CONNECTOR,
)
