"""`librarian ingest` runs the same job as the sensor, and a re-run reuses an unchanged digest."""

import dagster as dg

from librarian_dagster.core.store import Store
from librarian_dagster.core.transcripts import session_files_for
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import make_settings, write_transcript

SESSION = "44444444-4444-4444-4444-444444444444"


def _digest_metadata(instance, run_id):
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("session_digest")), limit=1
    ).records
    assert record.run_id == run_id
    return record.asset_materialization.metadata


def test_ingest_runs_the_ingest_session_job_and_reuses_an_unchanged_digest(tmp_path, database_url):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, "Why does the cache test hang on CI?", "The lock was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    files = session_files_for([folder])

    [first] = ingest_sessions(files, settings, instance)
    assert first.status == "ingested" and first.chunks > 0
    [run] = instance.get_run_records()
    assert run.dagster_run.job_name == "ingest_session"
    assert run.dagster_run.tags["dagster/partition"] == SESSION
    assert _digest_metadata(instance, run.dagster_run.run_id)["reused"].value is False

    [second] = ingest_sessions(files, settings, instance)
    assert second.status == "ingested"
    latest = instance.get_run_records(limit=1)[0].dagster_run.run_id
    assert _digest_metadata(instance, latest)["reused"].value is True
    assert Store(database_url).get_memory(SESSION) is not None
    instance.dispose()
