"""OpenCode: its SQLite database, the older `storage/` JSON layout, or `opencode export` JSON."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.opencode import files
from librarian_dagster.core.capture.opencode.connector import CONNECTOR
from librarian_dagster.core.capture.opencode.tools import live_tool
from librarian_dagster.core.capture.opencode.transcript import parse_session
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of("opencode", "OpenCode", files, parse_session, live_tool)
AGENT = Agent(
    reader=READER,
    folder=Folder(
        variable="LIBRARIAN_OPENCODE_DATA",
        default="~/.local/share/opencode",
        about="OpenCode's data (its `opencode.db`, or the older `storage/`)",
    ),
    connector=CONNECTOR,
)
