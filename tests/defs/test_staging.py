"""Stage outputs: stored as readable JSON, read back as the same objects, never half-written."""

import dataclasses
import json
import os
from datetime import UTC, datetime

import dagster as dg
import pytest
from pydantic import TypeAdapter

from librarian_dagster.core.capture.records import ParseStats
from librarian_dagster.core.capture.session import CHANGE, Session, ToolUse, Turn
from librarian_dagster.defs.staging import StagingIOManager

KEY = "0a1b2c3d-0000-4000-8000-000000000001"


def _session() -> Session:
    when = datetime(2026, 11, 1, 10, 0, 5, tzinfo=UTC)
    return Session(
        session_id=KEY,
        project="app",
        cwd="/work/app",
        started_at=when,
        ended_at=when,
        versions=("2.1.3",),
        turns=[
            Turn(role="user", kind="prompt", text="fix the flaky test", timestamp=when),
            Turn(
                role="assistant",
                kind="text",
                text="Fixed: [REDACTED:github_token] is gone",
                timestamp=None,
                tool_uses=(
                    ToolUse(name="Edit", file_paths=("a.py",), is_error=True, action=CHANGE),
                ),
            ),
        ],
        stats=ParseStats(records_by_type={"user": 1}, malformed_lines=2),
    )


def _by_session(python_type) -> dg.DagsterType:
    """The type a stage declares: dict[str, V], partition key -> value."""
    return dg.DagsterType(
        type_check_fn=lambda _context, _value: True,
        name="BySession",
        typing_type=dict[str, python_type],
    )


def _store(manager: StagingIOManager, key: str, value, python_type) -> None:
    # A stage hands on partition key -> value, for the sessions of its run.
    context = dg.build_output_context(
        asset_key="redacted_session",
        partition_key=key,
        dagster_type=_by_session(python_type),
    )
    manager.handle_output(context, {key: value})


def _load(manager: StagingIOManager, key: str, python_type):
    upstream = dg.build_output_context(asset_key="redacted_session", partition_key=key)
    context = dg.build_input_context(
        upstream_output=upstream,
        partition_key=key,
        asset_key="session_digest",
        dagster_type=_by_session(python_type),
    )
    return manager.load_input(context)[key]


def _staged_by_another_process(path, payload: bytes) -> None:
    """As another process stages a file: a new file renamed over the old one."""
    written = path.with_name("other.tmp")
    written.write_bytes(payload)
    os.replace(written, path)


def test_a_session_comes_back_as_it_was_stored(tmp_path):
    manager = StagingIOManager(home=str(tmp_path))
    session = _session()
    _store(manager, KEY, session, Session)
    path = tmp_path / "staging" / "redacted_session" / f"{KEY}.json"
    _staged_by_another_process(path, path.read_bytes())  # read from the file, not this process
    loaded = _load(manager, KEY, Session)
    assert loaded == session and loaded is not session


def test_a_later_stage_of_the_process_takes_back_what_it_staged_until_the_file_changes(tmp_path):
    manager = StagingIOManager(home=str(tmp_path))
    session = _session()
    _store(manager, KEY, session, Session)
    assert _load(manager, KEY, Session) is session  # no parse of its file
    assert _load(manager, KEY, dict) == TypeAdapter(dict).validate_json(
        TypeAdapter(Session).dump_json(session)
    )  # asked as another type: read from the file
    path = tmp_path / "staging" / "redacted_session" / f"{KEY}.json"
    other = dataclasses.replace(session, project="other")
    _staged_by_another_process(path, TypeAdapter(Session).dump_json(other))
    assert _load(manager, KEY, Session) == other
    path.unlink()
    with pytest.raises(dg.Failure, match="materialize redacted_session first"):
        _load(manager, KEY, Session)


def test_the_stored_file_is_plain_json_where_a_person_looks(tmp_path):
    manager = StagingIOManager(home=str(tmp_path))
    _store(manager, KEY, _session(), Session)
    path = tmp_path / "staging" / "redacted_session" / f"{KEY}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["turns"][1]["tool_uses"][0]["file_paths"] == ["a.py"]
    assert data["started_at"].startswith("2026-11-01T10:00:05")
    # Written through a temporary file and a rename: nothing else is left in the folder.
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    manager = StagingIOManager(home=str(tmp_path))
    _store(manager, KEY, _session(), Session)
    with pytest.raises(Exception):  # noqa: B017 - whatever pydantic raises for a wrong value
        _store(manager, KEY, object(), Session)
    assert _load(manager, KEY, Session) == _session()
    folder = tmp_path / "staging" / "redacted_session"
    assert len(list(folder.iterdir())) == 1


@pytest.mark.parametrize("key", ["app/2026-11/..", "a/", ".hidden", "", "x" * 300, "a/.x"])
def test_a_key_that_is_not_a_session_id_never_becomes_a_path(tmp_path, key):
    manager = StagingIOManager(home=str(tmp_path))
    with pytest.raises(ValueError, match="session id"):
        manager.path_for("redacted_session", key)


@pytest.mark.parametrize("key", ["../escape", "app/2026-11/escape", "/etc/escape"])
def test_only_the_session_id_of_a_key_names_its_file(tmp_path, key):
    path = StagingIOManager(home=str(tmp_path)).path_for("redacted_session", key)
    assert path == tmp_path / "staging" / "redacted_session" / "escape.json"


def test_a_missing_upstream_says_what_to_materialize(tmp_path):
    manager = StagingIOManager(home=str(tmp_path))
    with pytest.raises(dg.Failure, match="materialize redacted_session first"):
        _load(manager, KEY, Session)
