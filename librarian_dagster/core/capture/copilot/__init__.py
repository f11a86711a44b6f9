"""Copilot CLI: `~/.copilot/session-state/<session>/events.jsonl`, its subagents' events inline."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.copilot import files
from librarian_dagster.core.capture.copilot.connector import CONNECTOR
from librarian_dagster.core.capture.copilot.events import parse_session
from librarian_dagster.core.capture.copilot.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of(files.AGENT, "Copilot CLI", files, parse_session, live_tool)
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
