"""Pi: `~/.pi/agent/sessions/<cwd>/<time>_<id>.jsonl`, a tree of entries; its kept branch read."""

from librarian_dagster.core.capture.pi.entries import parse_session
from librarian_dagster.core.capture.pi.files import (
    AGENT,
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.pi.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=AGENT,
    label="Pi",
    claims=claims,
    discover=discover_sessions,
    files_for=session_files_for,
    head=session_head,
    parse=parse_session,
    live_tool=live_tool,
)
