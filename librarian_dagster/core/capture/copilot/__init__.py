"""Copilot CLI: `~/.copilot/session-state/<session>/events.jsonl`, its subagents' events inline."""

from librarian_dagster.core.capture.copilot.events import parse_session
from librarian_dagster.core.capture.copilot.files import (
    AGENT,
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.copilot.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=AGENT,
    label="Copilot CLI",
    claims=claims,
    discover=discover_sessions,
    files_for=session_files_for,
    head=session_head,
    parse=parse_session,
    live_tool=live_tool,
)
