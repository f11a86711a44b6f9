"""Partition keys a user can pick by project, month or agent; a store's older keys are re-keyed."""

import json
from datetime import UTC, datetime

import dagster as dg
import pytest

from librarian_dagster.core.assembly.store import open_store
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import build_definitions
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import (
    SESSIONS,
    STAGES,
    keys_by_session,
    migrate_partition_keys,
    partition_key,
    partition_key_for,
    session_id_of,
)
from librarian_dagster.ingest import backfill, ingest_sessions, open_instance
from tests.helpers import age, make_settings, sensor_tick, write_transcript

SESSION = "12121212-1212-4212-8212-121212121212"
OTHER = "34343434-3434-4343-8343-343434343434"
NOV = datetime(2026, 11, 1, 10, tzinfo=UTC)


def test_a_key_leads_with_project_month_and_agent_and_ends_with_the_session_id():
    key = partition_key(SESSION, "app", NOV, "codex")
    assert key == f"app/2026-11/codex/{SESSION}"
    assert session_id_of(key) == SESSION
    assert session_id_of(SESSION) == SESSION  # a bare key of a store from before
    assert session_id_of(f"app/2026-11/{SESSION}") == SESSION  # a key from before agents
    # Nothing the UI's selection text would read as syntax survives in the labels.
    assert partition_key("x", "my app, [v2]*...", None, "claude-code") == (
        "my-app-v2/undated/claude-code/x"
    )
    assert partition_key("x", "a...b", None, "a*b") == "a.b/undated/a-b/x"
    assert partition_key("x", "///", NOV, "pi") == "unknown/2026-11/pi/x"
    # The newest shape of a session's keys wins while a store is being re-keyed.
    keys = [SESSION, f"app/2026-11/{SESSION}", f"app/2026-11/pi/{SESSION}", "b/2026-10/x"]
    assert keys_by_session(keys) == {SESSION: f"app/2026-11/pi/{SESSION}", "x": "b/2026-10/x"}


def test_the_key_comes_from_the_head_of_the_main_file(tmp_path):
    path = tmp_path / "-work-web" / f"{SESSION}.jsonl"
    path.parent.mkdir()
    records = [
        {"type": "summary", "summary": "Old title", "leafUuid": "x"},
        {"type": "user", "sessionId": SESSION, "cwd": "/home/me/web/.claude/worktrees/agent-1",
         "timestamp": "2026-10-31T23:59:00Z", "message": {"role": "user", "content": "hi"}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    # A worktree belongs to its repository, as `Session.project` says.
    assert partition_key_for(SessionFiles(SESSION, path)) == f"web/2026-10/claude-code/{SESSION}"
    empty = tmp_path / f"{OTHER}.jsonl"
    empty.write_text("", encoding="utf-8")
    month = datetime.now(UTC).strftime("%Y-%m")  # no timestamp in it: the file's month
    assert partition_key_for(SessionFiles(OTHER, empty)) == (
        f"{tmp_path.name}/{month}/claude-code/{OTHER}"
    )


def test_ingest_and_the_sensor_use_project_month_agent_keys(tmp_path, database_url, monkeypatch):
    mirror = tmp_path / "mirror"
    settings = make_settings(tmp_path, database_url, mirror)
    monkeypatch.setenv("LIBRARIAN_HOME", str(settings.home))
    monkeypatch.setenv("LIBRARIAN_MIRROR", str(mirror))
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", database_url)
    age(write_transcript(mirror / "-work-app", SESSION, "Why is CI slow?", "Cache misses."), 600)
    instance = open_instance(settings)
    tick = sensor_tick(load_defs(), instance, None)
    assert [r.partition_key for r in tick.run_requests] == [f"app/2026-11/claude-code/{SESSION}"]
    [outcome] = ingest_sessions(session_files_for([mirror]), settings, instance)
    assert outcome.status == "ingested" and outcome.session_id == SESSION
    assert instance.get_dynamic_partitions(SESSIONS) == [f"app/2026-11/claude-code/{SESSION}"]
    # Staged files stay named by the session id.
    assert (settings.home / "staging" / "memory").exists() is False
    assert (settings.home / "staging" / "session_digest" / f"{SESSION}.json").is_file()
    dispose_instance(instance)


@pytest.mark.parametrize("older", [lambda sid: sid, lambda sid: f"app/2026-11/{sid}"])
def test_a_store_of_older_keys_is_rekeyed_with_its_history(tmp_path, database_url, older):
    folder = tmp_path / "mirror" / "-work-app"
    for sid in (SESSION, OTHER):
        write_transcript(folder, sid, f"Question {sid}?", "Answer.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    # As a store from before: partitions keyed by the bare session id (or by project and month
    # alone, before sessions had an agent), each run on its own.
    sessions = session_files_for([folder])
    with open_store(settings) as store:
        store.ledger.record_sources([(s, s.fingerprint()) for s in sessions])
    instance.add_dynamic_partitions(SESSIONS, [older(SESSION), older(OTHER)])
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    for sid in (SESSION, OTHER):
        assert job.execute_in_process(partition_key=older(sid), instance=instance).success
    # The memory of OTHER is gone and so are its files: its key comes from nowhere, it stays.
    with open_store(settings) as store:
        with store.database.connection() as conn:
            conn.execute("DELETE FROM memories WHERE session_id = %s", (OTHER,))
            conn.execute("DELETE FROM session_sources WHERE session_id = %s", (OTHER,))

        assert migrate_partition_keys(instance, store.memories, store.ledger) == 1
        new = f"app/2026-11/claude-code/{SESSION}"
        assert set(instance.get_dynamic_partitions(SESSIONS)) == {new, older(OTHER)}
        assert migrate_partition_keys(instance, store.memories, store.ledger) == 0  # idempotent
    for stage in STAGES:
        # The UI shows the session materialized under its new key, once, marked as re-keyed.
        [record] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(stage), asset_partitions=[new]), limit=5
        ).records
        event = record.asset_materialization
        assert event is not None and event.metadata["migrated_from"].value == older(SESSION)
    # And everything runs under the new key: a backfill finds it by the session id.
    [outcome] = backfill(settings, instance=instance)
    assert (outcome.session_id, outcome.status) == (SESSION, "ingested")
    [run] = instance.get_run_records(limit=1)
    assert run.dagster_run.tags["dagster/partition"] == new
    dispose_instance(instance)
