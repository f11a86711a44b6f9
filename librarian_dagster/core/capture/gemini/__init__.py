"""Gemini CLI: `~/.gemini/tmp/<project>/chats/session-*.json(l)`, with its subagents' chats."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.gemini.connector import CONNECTOR
from librarian_dagster.core.capture.gemini.files import (
    AGENT as NAME,
)
from librarian_dagster.core.capture.gemini.files import (
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.gemini.tools import live_tool
from librarian_dagster.core.capture.gemini.transcript import parse_session
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=NAME,
    label="Gemini CLI",
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
        variable="LIBRARIAN_GEMINI_SESSIONS",
        default="~/.gemini/tmp",
        about="Gemini CLI's chats (`<project>/chats/`)",
    ),
    connector=CONNECTOR,
)
