"""Gemini CLI: `~/.gemini/tmp/<project>/chats/session-*.json(l)`, with its subagents' chats."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.gemini import files
from librarian_dagster.core.capture.gemini.connector import CONNECTOR
from librarian_dagster.core.capture.gemini.tools import live_tool
from librarian_dagster.core.capture.gemini.transcript import parse_session
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of(files.AGENT, "Gemini CLI", files, parse_session, live_tool)
AGENT = Agent(
    reader=READER,
    folder=Folder(
        variable="LIBRARIAN_GEMINI_SESSIONS",
        default="~/.gemini/tmp",
        about="Gemini CLI's chats (`<project>/chats/`)",
    ),
    connector=CONNECTOR,
)
