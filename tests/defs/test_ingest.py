"""`librarian ingest` runs the same job as the sensor, and a re-run reuses an unchanged digest."""

import signal

import dagster as dg

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.recall import lexical
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    batches,
    ingest_sessions,
    open_instance,
    run_partitions,
)
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
    assert session_id_of(run.dagster_run.tags["dagster/partition"]) == SESSION
    assert _digest_metadata(instance, run.dagster_run.run_id)["reused"].value is False

    [second] = ingest_sessions(files, settings, instance)
    assert second.status == "ingested"
    latest = instance.get_run_records(limit=1)[0].dagster_run.run_id
    assert _digest_metadata(instance, latest)["reused"].value is True
    with Store(database_url) as store:
        assert store.memories.get_memory(SESSION) is not None
    dispose_instance(instance)


def test_batches_are_runs_of_consecutive_partitions():
    order = ["a", "b", "c", "d", "e", "f"]
    assert batches(["a", "b", "c", "d", "e"], order, 2) == [["a", "b"], ["c", "d"], ["e"]]
    # A run covers a range: a partition not asked for is never inside one.
    assert batches(["f", "a", "b", "d"], order, 10) == [["a", "b"], ["d"], ["f"]]
    assert batches(["a", "zz"], order, 10) == [["a"]]


def test_many_sessions_in_one_run_and_one_bad_session_costs_no_other_its_memory(
    tmp_path, database_url
):
    folder = tmp_path / "mirror" / "-work-app"
    ids = [f"7777777{i}-7777-7777-7777-777777777777" for i in range(3)]
    for i, sid in enumerate(ids):
        write_transcript(folder, sid, f"Question number {i} about caching?", f"Answer {i}.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance, per_run=10)
    assert [o.status for o in outcomes] == ["ingested"] * 3
    [run] = instance.get_run_records()  # all three in one run
    assert session_id_of(run.dagster_run.tags[RANGE_START_TAG]) == ids[0]
    assert session_id_of(run.dagster_run.tags[RANGE_END_TAG]) == ids[2]
    # One memory per session, each with its own metadata.
    summaries = {
        session_id_of(m.partition or ""): m.metadata["summary"].value
        for m in _memory_materializations(instance, run.dagster_run.run_id)
    }
    assert set(summaries) == set(ids) and len(set(summaries.values())) == 3

    # The middle session's source is forgotten: its stages fail, the others' memories stand.
    with Store(database_url) as store, store.database.connection() as conn:
        conn.execute("DELETE FROM session_sources WHERE session_id = %s", (ids[1],))
        conn.execute("DELETE FROM memories")
    again = {o.session_id: o for o in run_partitions(ids, settings, instance, per_run=10)}
    assert again[ids[1]].status == "failed" and "no transcript recorded" in again[ids[1]].detail
    assert again[ids[0]].status == again[ids[2]].status == "ingested"
    with Store(database_url) as store:
        assert {s.session_id for s in store.memories.list_sessions().sessions} == {ids[0], ids[2]}
    batch_run, single_run = sorted(
        instance.get_run_records()[:2], key=lambda r: len(r.dagster_run.tags)
    )[::-1]
    assert (
        batch_run.dagster_run.status == single_run.dagster_run.status == dg.DagsterRunStatus.FAILURE
    )
    # The batch run failed (so the loss is seen); each session's memory partition says what it
    # holds: the two stored with their chunks, the lost one marked so.
    recorded = {
        session_id_of(m.partition or ""): m.metadata
        for m in _memory_materializations(instance, batch_run.dagster_run.run_id)
    }
    assert recorded[ids[0]]["chunks"].value > 0 and recorded[ids[2]]["chunks"].value > 0
    assert recorded[ids[1]]["lost"].value is True and "chunks" not in recorded[ids[1]]
    assert session_id_of(single_run.dagster_run.tags["dagster/partition"]) == ids[1]
    dispose_instance(instance)


def _memory_materializations(instance, run_id):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("memory")), limit=100
    ).records
    return [r.asset_materialization for r in records if r.run_id == run_id]


def test_a_run_leaves_sigterm_as_it_found_it_where_sigint_is_ignored(tmp_path, database_url):
    # A script's background job (`librarian ingest &`, nohup) starts with SIGINT ignored. Dagster
    # maps SIGTERM to SIGINT's handler as a run ends: SIGTERM was then ignored by the ingest and
    # by every process it started later.
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, "Why does the cache test hang on CI?", "The lock was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    sigint, sigterm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
        assert outcome.status == "ingested"
        assert signal.getsignal(signal.SIGTERM) == sigterm != signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, sigint)
        signal.signal(signal.SIGTERM, sigterm)
        dispose_instance(instance)


def test_after_an_ingest_a_new_search_maps_files_covering_every_chunk_and_loads_none(
    tmp_path, database_url, monkeypatch
):
    folder = tmp_path / "mirror" / "-work-app"
    ids = [f"8888888{i}-8888-8888-8888-888888888888" for i in range(3)]
    for i, sid in enumerate(ids):
        write_transcript(folder, sid, f"Why does cache test {i} hang?", f"The lock {i} was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance, per_run=2)
    assert [o.status for o in outcomes] == ["ingested"] * 3
    assert len(instance.get_run_records()) == 2
    dispose_instance(instance)
    assert list(settings.postings_dir.glob("*.postings"))  # kept by the runs themselves

    def refused(*_args, **_kwargs):
        raise AssertionError("postings loaded from the store")

    monkeypatch.setattr(lexical, "_load_segment", refused)
    with Store(database_url, postings_dir=settings.postings_dir) as store:
        store.search.warm_up()
        index = store.search._lexical
        assert isinstance(index, lexical.LexicalIndex)
        with store.database.connection() as conn:
            chunk_ids = [r["id"] for r in conn.execute("SELECT id FROM indexed_chunks ORDER BY id")]
        mapped = sorted(
            int(i) for s in index._segments if s.file is not None for i in s.ids[s.live]
        )
        assert chunk_ids and mapped == chunk_ids
