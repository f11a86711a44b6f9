"""A run reads each transcript once: one step makes both `transcript` and `redacted_session`."""

from pathlib import Path

import dagster as dg

from librarian_dagster.core.capture.claude_code import transcript
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.partitions import keys_by_session
from librarian_dagster.ingest import ingest_sessions, open_instance, run_partitions
from tests.helpers import make_settings, write_transcript

IDS = ["5a5a5a5a-0000-0000-0000-00000000000" + str(i) for i in range(2)]


def _counting_reads(monkeypatch) -> list[str]:
    """The names of the transcript files the parser reads, one entry per read."""
    read: list[str] = []
    real = transcript.iter_records

    def iter_records(path: Path, *args, **kwargs):
        read.append(Path(path).stem)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(transcript, "iter_records", iter_records)
    return read


def _materialized(instance, asset: str, key: str) -> list[dg.AssetMaterialization]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=10
    ).records
    return [r.asset_materialization for r in records if r.asset_materialization is not None]


def test_a_run_of_many_sessions_reads_each_file_once(tmp_path, database_url, monkeypatch):
    folder = tmp_path / "mirror" / "-work-app"
    for i, sid in enumerate(IDS):
        write_transcript(folder, sid, f"Why is build {i} slow?", f"Cache miss {i}.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    read = _counting_reads(monkeypatch)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance, per_run=10)
    assert [o.status for o in outcomes] == ["ingested"] * 2
    assert sorted(read) == IDS
    keys = keys_by_session(instance.get_dynamic_partitions("sessions"))
    for sid in IDS:
        [reported] = _materialized(instance, "transcript", keys[sid])
        assert reported.metadata["turns"].value == 2
        [stored] = _materialized(instance, "redacted_session", keys[sid])
        assert stored.metadata["turns"].value == 2
    dispose_instance(instance)


def test_each_asset_of_the_step_can_be_materialized_alone(tmp_path, database_url, monkeypatch):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, IDS[0], "Why is the build slow?", "A cache miss.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    read = _counting_reads(monkeypatch)
    staged = settings.home / "staging" / "redacted_session" / f"{IDS[0]}.json"
    [ingested] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert ingested.status == "ingested"
    key = keys_by_session(instance.get_dynamic_partitions("sessions"))[IDS[0]]
    staged.unlink()

    # The transcript alone: read and reported, nothing stored.
    before = len(_materialized(instance, "redacted_session", key))
    run_partitions([key], settings, instance, assets=("transcript",))
    assert len(_materialized(instance, "transcript", key)) == 2
    assert len(_materialized(instance, "redacted_session", key)) == before
    assert not staged.exists()

    # The redacted session alone: read again and stored, the transcript not reported again.
    run_partitions([key], settings, instance, assets=("redacted_session",))
    assert len(_materialized(instance, "transcript", key)) == 2
    assert len(_materialized(instance, "redacted_session", key)) == before + 1
    assert staged.exists()
    assert read == [IDS[0]] * 3
    dispose_instance(instance)
