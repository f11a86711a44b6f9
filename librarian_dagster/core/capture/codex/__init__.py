"""Codex: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, one per thread, spawned threads
remembered with the session that spawned them."""

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.codex import files
from librarian_dagster.core.capture.codex.connector import CONNECTOR
from librarian_dagster.core.capture.codex.rollout import parse_session
from librarian_dagster.core.capture.codex.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader.of(files.AGENT, "Codex", files, parse_session, live_tool)
AGENT = Agent(
    reader=READER,
    folder=Folder(
        variable="LIBRARIAN_CODEX_SESSIONS",
        default="~/.codex/sessions",
        about="Codex's sessions (`YYYY/MM/DD/rollout-*.jsonl`)",
        home=("CODEX_HOME", "sessions"),
    ),
    connector=CONNECTOR,
)
