"""`librarian backfill`: a project's sessions again, through the same job; a re-embed runs less."""

import dagster as dg

from librarian_dagster.cli.main import main
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import settings_in_env, write_transcript

APP = "88888888-8888-8888-8888-888888888881"
OTHER = "88888888-8888-8888-8888-888888888882"


def test_backfill_a_project_then_reembed_it(tmp_path, database_url, monkeypatch, capsys):
    mirror = tmp_path / "mirror"
    write_transcript(mirror / "-work-app", APP, "Why is the build slow?", "Cache misses.")
    other = write_transcript(mirror / "-work-other", OTHER, "Rename the module", "Renamed.")
    other.write_text(other.read_text(encoding="utf-8").replace("/work/app", "/work/other"))
    settings = settings_in_env(monkeypatch, tmp_path, database_url, mirror)
    instance = open_instance(settings)
    assert {o.status for o in ingest_sessions(session_files_for([mirror]), settings, instance)} == {
        "ingested"
    }
    before = len(instance.get_run_records())

    assert main(["backfill", "--project", "other"]) == 0
    assert "1 ingested, 0 skipped, 0 deferred, 0 failed" in capsys.readouterr().out
    [run] = instance.get_run_records(limit=1)
    assert run.dagster_run.tags["librarian/trigger"] == "cli-backfill"
    assert session_id_of(run.dagster_run.tags["dagster/partition"]) == OTHER
    assert len(instance.get_run_records()) == before + 1

    assert main(["backfill", "--reembed", "--per-run", "5"]) == 0
    captured = capsys.readouterr()
    assert "2 ingested" in captured.out
    # Not a terminal here: plain lines instead of a bar, the last at the end.
    assert "2/2 sessions (100%)" in captured.err.splitlines()[-1]
    [reembed] = instance.get_run_records(limit=1)
    steps = {
        e.step_key
        for e in instance.all_logs(
            reembed.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS
        )
    }
    assert steps == {"chunk_embeddings", "memory", "stored_session_checks"}
    dispose_instance(instance)
