"""Bad input is ingested or skipped with a reason in the run's metadata: never a crash."""

import shutil

import dagster as dg
import pytest

from librarian_dagster.core.store import Store
from librarian_dagster.core.transcripts import session_files_for
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import keys_by_session
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.conftest import TRANSCRIPTS
from tests.helpers import age, make_settings, sensor_tick

TRUNCATED = TRANSCRIPTS / "derived" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.truncated.jsonl"
EMPTY = "22222222-2222-2222-2222-222222222222"
SUMMARY_ONLY = (
    TRANSCRIPTS / "daaain__claude-code-log" / "4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"
)


def _key(instance, session_id: str) -> str:
    """The session's partition key (`<project>/<month>/<id>`)."""
    return keys_by_session(instance.get_dynamic_partitions("sessions"))[session_id]


def _latest_metadata(instance, asset: str, session_id: str):
    """The metadata of an asset's latest materialization for one session, as the UI shows it."""
    partition = _key(instance, session_id)
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    return record.asset_materialization.metadata


@pytest.fixture
def bad_mirror(tmp_path):
    folder = tmp_path / "mirror" / "-work-bad"
    folder.mkdir(parents=True)
    (folder / "11111111-1111-1111-1111-111111111111.jsonl").write_text(
        "this is not JSON at all\n<html>oops</html>\n", encoding="utf-8"
    )
    (folder / "22222222-2222-2222-2222-222222222222.jsonl").write_bytes(b"")
    shutil.copy(TRUNCATED, folder / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl")
    shutil.copy(SUMMARY_ONLY, folder / SUMMARY_ONLY.name)
    return folder


def test_each_bad_file_is_ingested_or_skipped_with_its_reason(tmp_path, database_url, bad_mirror):
    settings = make_settings(tmp_path, database_url, bad_mirror.parent)
    instance = open_instance(settings)
    outcomes = {
        o.session_id: o
        for o in ingest_sessions(session_files_for([bad_mirror]), settings, instance)
    }
    assert len(outcomes) == 4
    assert {o.status for o in outcomes.values()} <= {"ingested", "skipped"}, outcomes

    not_json = outcomes["11111111-1111-1111-1111-111111111111"]
    assert not_json.status == "skipped" and not_json.detail
    empty = outcomes["22222222-2222-2222-2222-222222222222"]
    assert empty.status == "skipped" and "empty" in empty.detail
    assert outcomes[SUMMARY_ONLY.stem].status == "skipped"
    truncated = outcomes["03eb5929-52b3-4b13-ada3-b93ae35806b8"]
    assert truncated.status == "ingested" and truncated.chunks > 0

    # The reason is in the run's metadata, where the UI shows it.
    metadata = _latest_metadata(instance, "transcript", "03eb5929-52b3-4b13-ada3-b93ae35806b8")
    assert metadata["malformed_lines"].value >= 1
    skipped = _latest_metadata(instance, "transcript", "22222222-2222-2222-2222-222222222222")
    assert "empty" in skipped["skip_reason"].value
    # Nothing is staged or stored for a skipped session. The four went in one run (a range):
    # the later stages' partitions of a skipped session say why they hold nothing.
    assert not list((settings.home / "staging").rglob("22222222-*"))
    for later in ("redacted_session", "session_digest", "memory"):
        assert "nothing to remember" in _latest_metadata(instance, later, EMPTY)["absent"].value

    store = Store(database_url)
    assert store.get_memory("03eb5929-52b3-4b13-ada3-b93ae35806b8") is not None
    assert store.get_memory("22222222-2222-2222-2222-222222222222") is None
    instance.dispose()


def test_a_skipped_session_alone_is_not_materialized_past_the_transcript(
    tmp_path, database_url, bad_mirror
):
    settings = make_settings(tmp_path, database_url, bad_mirror.parent)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(
        session_files_for([bad_mirror / f"{EMPTY}.jsonl"]), settings, instance
    )
    assert outcome.status == "skipped"
    for later in ("redacted_session", "session_digest", "memory"):
        assert not instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(later), asset_partitions=[_key(instance, EMPTY)]
            ),
            limit=1,
        ).records
    instance.dispose()


def test_the_sensor_requests_bad_files_without_failing(
    tmp_path, database_url, bad_mirror, monkeypatch
):
    for path in bad_mirror.iterdir():
        age(path, 600)
    settings = make_settings(tmp_path, database_url, bad_mirror.parent)
    monkeypatch.setenv("LIBRARIAN_HOME", str(settings.home))
    monkeypatch.setenv("LIBRARIAN_MIRROR", str(settings.mirror))
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", database_url)
    instance = open_instance(settings)
    result = sensor_tick(load_defs(), instance, None)
    assert len(result.run_requests) == 4
    instance.dispose()
