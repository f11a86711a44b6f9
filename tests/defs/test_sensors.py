"""The sessions sensor asks only for what the store does not hold yet."""

import json

import pytest

from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import ingest_paths, open_instance
from tests.helpers import age, append_prompt, sensor_tick, settings_in_env, write_transcript

SESSION = "55555555-5555-5555-5555-555555555555"
EMPTY = "66666666-6666-6666-6666-666666666666"


@pytest.fixture
def env(tmp_path, database_url, monkeypatch):
    mirror = tmp_path / "mirror"
    settings = settings_in_env(monkeypatch, tmp_path, database_url, mirror)
    instance = open_instance(settings)
    yield settings, load_defs(), instance, mirror
    dispose_instance(instance)


def test_after_an_ingest_the_sensor_asks_for_nothing_and_a_grown_file_once(env):
    settings, definitions, instance, mirror = env
    folder = mirror / "-work-app"
    path = write_transcript(folder, SESSION, "Why does the cache test hang?", "The lock was held.")
    empty = folder / f"{EMPTY}.jsonl"
    empty.write_text("", encoding="utf-8")
    for p in (path, empty):
        age(p, 600)
    outcomes = {o.session_id: o.status for o in ingest_paths([mirror], settings)}
    assert outcomes == {SESSION: "ingested", EMPTY: "skipped"}

    # A sensor that has never ticked (no cursor): the store already holds both outcomes.
    first = sensor_tick(definitions, instance, None)
    assert first.run_requests == []
    assert set(json.loads(first.cursor)) == {SESSION, EMPTY}

    append_prompt(path, SESSION, "And the retry?", "u2", timestamp="2026-11-01T10:01:00Z")
    age(path, 600)
    grown = sensor_tick(definitions, instance, first.cursor)
    assert [session_id_of(r.partition_key) for r in grown.run_requests] == [SESSION]
    assert sensor_tick(definitions, instance, grown.cursor).run_requests == []


def test_excluded_projects_are_neither_requested_nor_ingested(env, monkeypatch):
    _settings, _definitions, instance, mirror = env
    monkeypatch.setenv("LIBRARIAN_EXCLUDE", "-work-private")
    kept = write_transcript(mirror / "-work-app", SESSION, "Fix the cache?", "Fixed.")
    hidden = write_transcript(mirror / "-work-private", EMPTY, "My bank details", "Noted.")
    for p in (kept, hidden):
        age(p, 600)
    result = sensor_tick(load_defs(), instance, None)
    assert [session_id_of(r.partition_key) for r in result.run_requests] == [SESSION]
    from librarian_dagster.core.settings import Settings

    outcomes = ingest_paths([mirror], Settings.from_env())
    assert [o.session_id for o in outcomes] == [SESSION]
