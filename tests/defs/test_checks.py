"""The checks on a stored session: all pass after a real ingest run; each fails when it should."""

import dagster as dg
import psycopg

from librarian_dagster.core.assembly.store import Store, open_store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.store.integrity import session_integrity
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.checks import (
    CHUNK_COUNT,
    DIGEST_SCHEMA,
    EMBEDDING_DIMENSION,
    NO_ORPHANS,
    ONE_MEMORY,
    _digest_schema,
    memory_freshness,
)
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import SESSIONS
from librarian_dagster.defs.staging import StagingIOManager
from librarian_dagster.ingest import open_instance
from tests.helpers import make_settings, write_transcript

SESSION = "99999999-9999-4999-8999-999999999999"


def test_every_check_passes_after_an_ingest_run_and_runs_after_the_write(tmp_path, database_url):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, "Why does the cache test hang on CI?", "The lock was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    [files] = session_files_for([folder])
    with open_store(settings) as store:
        store.ledger.record_sources([(files, files.fingerprint())])
    instance.add_dynamic_partitions(SESSIONS, [SESSION])
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    result = job.execute_in_process(partition_key=SESSION, instance=instance)
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == {
        "no_secrets_remain",
        DIGEST_SCHEMA,
        CHUNK_COUNT,
        EMBEDDING_DIMENSION,
        NO_ORPHANS,
        ONE_MEMORY,
    }
    failed = {name: e.metadata for name, e in evaluations.items() if not e.passed}
    assert failed == {}
    # Run after `memory`: before it, there would be no row to count.
    assert evaluations[ONE_MEMORY].metadata["memories_rows"].value == 1
    assert evaluations[EMBEDDING_DIMENSION].metadata["stored_dimensions"].value.startswith("384 (")
    assert evaluations[CHUNK_COUNT].severity == dg.AssetCheckSeverity.WARN
    assert evaluations[DIGEST_SCHEMA].asset_key == dg.AssetKey("session_digest")
    dispose_instance(instance)

    # A stored memory made wrong behind the write path's back: the integrity read sees it.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE indexed_chunks SET position = position + 10, embedding_dim = 768"
            " WHERE session_id = %s AND section = 'exchange'",
            (SESSION,),
        )
    with Store(database_url) as store:
        stored = session_integrity(store.database, SESSION)
    assert stored.position_gaps == 1 and stored.mismatched_vectors > 0
    assert set(stored.dimensions) == {384, 768} and stored.indexed_dimensions == {384}
    assert stored.memories == 1 and stored.orphan_chunks == 0


def test_a_digest_that_breaks_its_schema_fails_the_check_naming_fields_not_values(tmp_path):
    staging = StagingIOManager(home=str(tmp_path))
    path = staging.path_for("session_digest", SESSION)
    missing = _digest_schema(staging, SESSION)
    assert not missing.passed and "no staged digest" in missing.metadata["problems"].value[0]

    path.parent.mkdir(parents=True)
    path.write_text(
        '{"digest": {"summary": "sk-live-secretish", "worked_on": [], "problem": [],'
        ' "solution": [], "open_items": [], "tags": [], "domain": "gardening",'
        ' "importance": 9}, "model": "offline", "content_hash": "x"}',
        encoding="utf-8",
    )
    broken = _digest_schema(staging, SESSION)
    assert not broken.passed
    problems = broken.metadata["problems"].value
    assert problems == ["digest.domain: literal_error", "digest.importance: less_than_equal"]
    assert "gardening" not in str(problems) and "sk-live" not in str(problems)


def test_freshness_follows_the_quiet_hours():
    policy = memory_freshness(24)
    assert policy is not None
    assert memory_freshness(0) is None


def test_the_checks_run_in_every_ingest_run_and_the_memory_has_a_freshness_policy(tmp_path):
    settings = make_settings(tmp_path, "postgresql://nobody@127.0.0.1:1/none")
    defs = build_definitions(settings)
    graph = defs.resolve_asset_graph()
    from librarian_dagster.defs.jobs import ingest_session_job

    checks = {k.name for k in ingest_session_job.selection.resolve_checks(graph)}
    assert {DIGEST_SCHEMA, CHUNK_COUNT, EMBEDDING_DIMENSION, NO_ORPHANS, ONE_MEMORY} <= checks
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert specs["memory"].freshness_policy == memory_freshness(24)
    assert all(s.freshness_policy is None for k, s in specs.items() if k != "memory")
