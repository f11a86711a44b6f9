"""`librarian skip`: kept out of the sensor, `librarian ingest` and backfills; listed and undone."""

import pytest

from librarian_dagster.cli.main import main
from librarian_dagster.core.assembly.store import open_store
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import backfill, ingest_paths, open_instance
from tests.helpers import age, sensor_tick, settings_in_env, write_transcript

KEPT = "99999999-9999-9999-9999-999999999991"
SKIPPED = "99999999-9999-9999-9999-999999999992"


@pytest.fixture
def env(tmp_path, database_url, monkeypatch):
    mirror = tmp_path / "mirror"
    settings = settings_in_env(monkeypatch, tmp_path, database_url, mirror)
    instance = open_instance(settings)
    yield settings, instance, mirror
    dispose_instance(instance)


def test_skip_list_undo(env, capsys):
    assert main(["skip", SKIPPED]) == 0
    assert f"added {SKIPPED} (not seen yet" in capsys.readouterr().out
    assert main(["skip", "--before", "2020-01-01"]) == 0
    assert main(["skip", "--list"]) == 0
    listed = capsys.readouterr().out
    assert SKIPPED in listed and "before:2020-01-01" in listed
    assert main(["skip", "--undo", "before:2020-01-01"]) == 0
    assert main(["skip", "--undo", "nope"]) == 1
    assert "'nope' is not on the skip list" in capsys.readouterr().err
    with open_store(Settings.from_env()) as store:
        assert store.ledger.skip_list().session_ids == {SKIPPED}
        assert store.ledger.skip_list().before is None
    # Bad input: a clear error, nothing changed.
    assert main(["skip", "not/an/id"]) == 2
    assert main(["skip"]) == 2
    assert main(["skip", SKIPPED, "--list"]) == 2


def test_the_sensor_ingest_and_backfill_leave_skipped_sessions_out(env, capsys):
    settings, instance, mirror = env
    kept = write_transcript(mirror / "-work-app", KEPT, "Why is the build slow?", "Cache misses.")
    skipped = write_transcript(mirror / "-work-app", SKIPPED, "My bank details", "Noted.")
    for p in (kept, skipped):
        age(p, 600)
    assert main(["skip", SKIPPED]) == 0

    tick = sensor_tick(load_defs(), instance, None)
    assert [session_id_of(r.partition_key) for r in tick.run_requests] == [KEPT]

    outcomes = {o.session_id: o for o in ingest_paths([mirror], settings)}
    assert outcomes[KEPT].status == "ingested"
    assert outcomes[SKIPPED].status == "skipped"
    assert "librarian skip --undo" in outcomes[SKIPPED].detail
    with open_store(settings) as store:
        assert store.memories.memory_record(SKIPPED) is None

    # Skipped after its memory was made: a backfill leaves it out too (its memory stays).
    assert main(["skip", KEPT]) == 0
    assert "1 already remembered" in capsys.readouterr().out
    assert [(o.session_id, o.status) for o in backfill(settings, instance=instance)] == [
        (KEPT, "skipped")
    ]

    # Taken off the list: the sensor asks for it (it was never marked "nothing to remember").
    assert main(["skip", "--undo", SKIPPED]) == 0
    again = sensor_tick(load_defs(), instance, tick.cursor)
    assert [session_id_of(r.partition_key) for r in again.run_requests] == [SKIPPED]


def test_a_backfill_over_a_skipped_partition_stores_nothing_and_fails_nothing(env):
    settings, instance, mirror = env
    for sid in (KEPT, SKIPPED):
        age(write_transcript(mirror / "-work-app", sid, f"Question {sid}?", "Answer."), 600)
    from librarian_dagster.core.capture.readers import session_files_for
    from librarian_dagster.ingest import ingest_sessions

    # As a backfill from the UI would: the partition exists and the skip list grew since.
    with open_store(settings) as store:
        store.ledger.skip_sessions([SKIPPED])
    outcomes = {
        o.session_id: o.status
        for o in ingest_sessions(session_files_for([mirror]), settings, instance)
    }
    assert outcomes == {KEPT: "ingested", SKIPPED: "skipped"}
    [run] = instance.get_run_records(limit=1)
    assert run.dagster_run.is_success
    with open_store(settings) as store:
        assert store.memories.memory_record(SKIPPED) is None
