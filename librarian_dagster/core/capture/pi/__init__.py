"""Pi: `~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl`, a tree of entries; its kept branch read."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.pi import files
from librarian_dagster.core.capture.pi.connector import CONNECTOR
from librarian_dagster.core.capture.pi.entries import parse_session
from librarian_dagster.core.capture.pi.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of(files.AGENT, "Pi", files, parse_session, live_tool)
AGENT = Agent(
    reader=READER,
    folder=Folder(
        variable="LIBRARIAN_PI_SESSIONS",
        default="~/.pi/agent/sessions",
        about="Pi's sessions (`<cwd>/<time>_<id>.jsonl`)",
    ),
    connector=CONNECTOR,
)
