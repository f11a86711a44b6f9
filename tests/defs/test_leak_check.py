"""The blocking check: a session whose staged text still holds a secret never reaches the digest."""

import json

import dagster as dg

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import make_settings, write_transcript

SECRET = "ghp_" + "Z8kQ2mV7xR4tY1uW9pL3nB6cD0fH5jK8sA2e"


def _session_with_secret(folder):
    write_transcript(
        folder,
        "33333333-3333-3333-3333-333333333333",
        f"push with token {SECRET} please",
        "Pushed.",
    )
    return folder


def test_redaction_removes_the_token_everywhere(tmp_path, database_url):
    folder = _session_with_secret(tmp_path / "mirror" / "-work-app")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested"
    with Store(database_url) as store:
        memory = store.memories.get_memory("33333333-3333-3333-3333-333333333333")
    assert memory is not None
    assert SECRET not in json.dumps(memory, default=str)
    assert SECRET[4:20] not in json.dumps(memory, default=str)
    staged = (settings.home / "staging").rglob("*.json")
    assert all(SECRET not in p.read_text(encoding="utf-8") for p in staged)
    dispose_instance(instance)


def test_a_redaction_that_misses_blocks_the_digest(tmp_path, database_url, monkeypatch):
    # Simulate a redaction bug: the stage stages the session as it is.
    monkeypatch.setattr(
        "librarian_dagster.defs.assets.transcript.redact_session",
        lambda session: (session, {}),
    )
    folder = _session_with_secret(tmp_path / "mirror" / "-work-app")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "failed"
    with Store(database_url) as store:
        assert store.memories.get_memory("33333333-3333-3333-3333-333333333333") is None
    digest = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("session_digest")), limit=1
    ).records
    assert digest == []
    check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey("redacted_session"), "no_secrets_remain")]
    )
    execution = next(iter(check.values()))
    assert execution.status.value == "FAILED"
    dispose_instance(instance)
