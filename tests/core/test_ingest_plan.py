import json
from pathlib import Path

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.ingest_plan import (
    Snapshot,
    parse_cursor,
    plan_ingest,
    run_key,
    unreadable,
)


def _snap(session_id, fingerprint, last_modified):
    return Snapshot(
        SessionFiles(session_id, Path(f"/m/{session_id}.jsonl")), fingerprint, last_modified
    )


def test_new_settled_sessions_are_requested_once():
    snaps = [_snap("a", "f1", 100.0), _snap("b", "f1", 100.0)]
    plan = plan_ingest(snaps, None, now=1000.0, settle_seconds=120)
    assert [s.files.session_id for s in plan.requests] == ["a", "b"]
    assert plan_ingest(snaps, plan.cursor, now=2000.0, settle_seconds=120).requests == []


def test_unsettled_sessions_wait_and_are_counted():
    plan = plan_ingest([_snap("a", "f1", 990.0)], None, now=1000.0, settle_seconds=120)
    assert plan.requests == [] and plan.waiting == 1
    assert parse_cursor(plan.cursor) == {}


def test_a_grown_session_is_requested_again_with_a_new_run_key():
    first = plan_ingest([_snap("a", "f1", 100.0)], None, now=1000.0, settle_seconds=0)
    grown = plan_ingest([_snap("a", "f2", 500.0)], first.cursor, now=1000.0, settle_seconds=0)
    assert [s.fingerprint for s in grown.requests] == ["f2"]
    assert run_key(grown.requests[0]) != run_key(first.requests[0])
    assert json.loads(grown.cursor) == {"a": "f2"}


def test_an_unreadable_cursor_starts_over_instead_of_failing():
    assert parse_cursor("{not json") == {}
    assert parse_cursor("[1, 2]") == {}


def test_what_the_store_holds_at_the_same_fingerprint_is_not_requested():
    snaps = [_snap("a", "f1", 100.0), _snap("b", "f2", 100.0)]
    plan = plan_ingest(snaps, None, now=1000.0, settle_seconds=0, held={("a", "f1"), ("b", "f1")})
    assert [s.files.session_id for s in plan.requests] == ["b"]
    assert json.loads(plan.cursor) == {"a": "f1", "b": "f2"}


def test_exclude_globs_match_a_project_folder_or_a_path():
    from librarian_dagster.core.capture.ingest_plan import is_excluded
    from librarian_dagster.core.settings import Settings

    files = SessionFiles("s", Path("/m/-Users-me-private/s.jsonl"))
    settings = Settings.from_env({"LIBRARIAN_EXCLUDE": " -Users-me-private , */scratch/*"})
    assert settings.exclude == ("-Users-me-private", "*/scratch/*")
    assert is_excluded(files, settings.exclude)
    assert is_excluded(SessionFiles("t", Path("/m/-x/scratch/t.jsonl")), settings.exclude)
    assert not is_excluded(SessionFiles("u", Path("/m/-Users-me-work/u.jsonl")), settings.exclude)
    assert not is_excluded(files, ())


def test_a_folder_that_cannot_be_listed_says_why(tmp_path):
    assert unreadable(tmp_path) is None
    assert unreadable(tmp_path / "not-made-yet") is None
    (tmp_path / "a-file").write_text("x")
    assert unreadable(tmp_path / "a-file") == "Not a directory"
