"""Codex: `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, one per thread, spawned threads
remembered with the session that spawned them."""

from librarian_dagster.core.capture.codex.files import (
    AGENT,
    claims,
    discover_sessions,
    session_files_for,
    session_head,
)
from librarian_dagster.core.capture.codex.rollout import parse_session
from librarian_dagster.core.capture.codex.tools import live_tool
from librarian_dagster.core.capture.reader import Reader

READER = Reader(
    agent=AGENT,
    label="Codex",
    claims=claims,
    discover=discover_sessions,
    files_for=session_files_for,
    head=session_head,
    parse=parse_session,
    live_tool=live_tool,
)
