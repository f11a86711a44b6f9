"""`library_notes` and `library_sensor` on a real store and a real git checkout: the sensor asks
for a project with new memories (only when LIBRARIAN_CONSOLIDATION is on); a run keeps a proposal
of new lines waiting for a person, applies on its own only stale marks, and reads again only the
sessions new since the last run."""

import json
import subprocess

import dagster as dg
import pytest

from librarian_dagster.core.assembly.forgetting import forget_sessions
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.consolidation.consolidate import propose
from librarian_dagster.core.consolidation.pending import Pending
from librarian_dagster.core.settings import Settings
from librarian_dagster.defs.library import PROJECTS, library_notes, library_sensor
from librarian_dagster.defs.resources import build_resources
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.cli.test_consolidate import SESSIONS, _commit, _records
from tests.helpers import AGENTS_AWAY


def _settings(tmp_path, database_url: str, on: bool = True) -> Settings:
    return Settings.from_env({
        **AGENTS_AWAY,
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
        "LIBRARIAN_DATABASE_URL": database_url,
        "LIBRARIAN_CONSOLIDATION": "true" if on else "false",
    })  # fmt: skip


def _tick(settings: Settings, instance: dg.DagsterInstance, cursor: str | None = None):
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources=build_resources(settings)) as context:  # fmt: skip
        return library_sensor(context)


def _run(settings: Settings, instance: dg.DagsterInstance, project: str) -> dict:
    result = dg.materialize([library_notes], partition_key=project, instance=instance,
                            resources=build_resources(settings))  # fmt: skip
    [done] = result.asset_materializations_for_node("library_notes")
    return {k: v.value for k, v in done.metadata.items()}


@pytest.fixture
def ingested(tmp_path, database_url):
    """Three sessions that met the same failure, of a checkout with git history."""
    repo = tmp_path / "app"
    (repo / "src" / "db").mkdir(parents=True)
    (repo / "src" / "db" / "migrate.js").write_text("module.exports = 1\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _commit(repo, "first", "2026-05-01T00:00:00Z")
    mirror = tmp_path / "mirror" / "-app"
    mirror.mkdir(parents=True)
    for day, sid in enumerate(SESSIONS[:3], start=3):
        lines = _records(sid, day, str(repo))
        (mirror / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    settings = _settings(tmp_path, database_url)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([mirror]), settings, instance, per_run=10)
    assert [o.status for o in outcomes] == ["ingested"] * 3
    return settings, instance, repo


def test_new_lines_wait_for_a_person_and_stale_marks_apply_on_their_own(ingested, tmp_path):
    settings, instance, repo = ingested
    result = _tick(settings, instance)
    [request] = result.run_requests
    project = request.partition_key
    assert result.dynamic_partitions_requests[0].partition_keys == [project]
    instance.add_dynamic_partitions(PROJECTS, [project])

    first = _run(settings, instance, project)
    assert first["sessions read"] == 3 and first["applied"] == "nothing"
    [waiting] = Pending(settings.library_dir / "pending").all()
    assert waiting.project == project and waiting.checkout == str(repo)
    assert "+- Gotcha: `npm test` failed with" in waiting.diff
    assert not (repo / "_memory_library").exists()  # new lines wait for a person

    # A person applies it; later the fixed file changes: the stale mark applies on its own.
    with Store(settings.database_url or "") as store:
        propose(store.ledger, project, repo).apply()
    (repo / "src" / "db" / "migrate.js").write_text("module.exports = 2\n")
    since = _commit(repo, "later")
    again = _run(settings, instance, project)
    assert again["applied"] != "nothing" and again["waiting for a person"] is False
    notes = (repo / "_memory_library" / "src" / "db" / "recurring.md").read_text()
    assert f"(may be stale since {since})" in notes
    assert Pending(settings.library_dir / "pending").all() == []

    # Nothing new was written since: the sensor asks for nothing.
    skipped = _tick(settings, instance, result.cursor)
    assert isinstance(skipped, dg.SkipReason)


def test_the_cache_reads_only_new_sessions_and_forgets_what_the_store_forgot(ingested):
    settings, instance, _ = ingested
    project = _tick(settings, instance).run_requests[0].partition_key
    instance.add_dynamic_partitions(PROJECTS, [project])
    _run(settings, instance, project)
    cache = build_resources(settings)["library"].cache(project)  # type: ignore[union-attr]
    held = sorted(cache.folder.glob("*.json"))
    assert len(held) == 3
    before = {p: p.stat().st_mtime_ns for p in held}
    _run(settings, instance, project)
    assert {p: p.stat().st_mtime_ns for p in held} == before  # nothing read again
    with Store(settings.database_url or "") as store:
        forget_sessions([SESSIONS[0]], settings, store, None)
    _run(settings, instance, project)
    assert len(list(cache.folder.glob("*.json"))) == 2


def test_off_unless_the_setting_is_on(tmp_path, database_url):
    settings = _settings(tmp_path, database_url, on=False)
    assert isinstance(_tick(settings, dg.DagsterInstance.ephemeral()), dg.SkipReason)
