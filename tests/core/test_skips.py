"""The skip list's rules: by session id, or by last activity before a date."""

import os
from datetime import UTC, datetime

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.skips import (
    SkipList,
    before_entry,
    last_active,
    valid_session_id,
)

NOV = datetime(2026, 11, 1, tzinfo=UTC)


def test_a_listed_session_is_skipped_and_says_how_to_undo():
    skips = SkipList(session_ids=frozenset({"a1"}))
    assert skips.reason("a1", None) == "on the skip list (librarian skip --undo a1)"
    assert skips.reason("b2", None) is None


def test_before_a_date_skips_by_last_activity_not_start():
    skips = SkipList(before=NOV)
    assert skips.reason("x", NOV.timestamp() - 1) is not None
    assert "--undo before:2026-11-01" in (skips.reason("x", NOV.timestamp() - 1) or "")
    assert skips.reason("x", NOV.timestamp()) is None
    # No file to date it by (vanished): not skipped by date, it is skipped by nothing.
    assert skips.reason("x", None) is None


def test_last_active_is_the_newest_file(tmp_path):
    main, agent = tmp_path / "s.jsonl", tmp_path / "agent-1.jsonl"
    for path, when in ((main, 1_000_000.0), (agent, 2_000_000.0)):
        path.write_text("{}\n", encoding="utf-8")
        os.utime(path, (when, when))
    files = SessionFiles("s", main, (agent,))
    assert last_active(files) == 2_000_000.0
    # 1970-01-24 is 1,987,200 s, 1970-01-25 is 2,073,600 s after the epoch.
    assert SkipList(before=datetime(1970, 1, 25, tzinfo=UTC)).skips(files)
    assert not SkipList(before=datetime(1970, 1, 24, tzinfo=UTC)).skips(files)
    assert last_active(SessionFiles("gone", tmp_path / "gone.jsonl")) is None


def test_entries_and_ids():
    assert before_entry(NOV) == "before:2026-11-01"
    assert before_entry(datetime(2026, 11, 1, 12, 30, tzinfo=UTC)).startswith("before:2026-11-01T")
    assert valid_session_id("55555555-5555-5555-5555-555555555555")
    assert not valid_session_id("a/b")
    assert not valid_session_id("")
    assert not valid_session_id("--list")
