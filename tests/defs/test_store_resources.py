"""The store's resources: each stage takes the concerns it uses, and a run shares one pool that
it closes."""

import dagster as dg

from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.resources import StoreResource, _shared
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import connections_made, connections_open, make_settings, write_transcript

STORE_RESOURCES = {"store", "memories", "ledger", "search"}
# What each reader of the store touches of it, and so what its signature names.
TAKES = {
    "transcript": {"ledger"},
    "redacted_session": {"ledger"},
    "session_digest": {"memories", "ledger"},
    "digest_chunks": set(),
    "exchange_chunks": set(),
    "chunk_embeddings": {"memories"},
    "memory": {"memories", "ledger"},
    "recall_quality": {"memories", "search"},
    "library_notes": {"ledger"},
}
SENSORS = {
    "sessions_sensor": {"ledger", "memories"},
    "digest_alerts": {"memories"},
    "capture_gap_alerts": {"store", "ledger"},
    "run_failure_alerts": set(),
    "library_sensor": {"memories"},
}


def test_each_stage_and_sensor_takes_the_concerns_of_the_store_it_uses(tmp_path):
    settings = Settings.from_env(
        {"LIBRARIAN_HOME": str(tmp_path), "LIBRARIAN_DATABASE_URL": "postgresql://nobody@/none"}
    )
    defs = build_definitions(settings)
    taken = {
        key.to_user_string(): set(defs.resolve_assets_def(key).required_resource_keys)
        & STORE_RESOURCES
        for key in defs.resolve_asset_graph().get_all_asset_keys()
    }
    assert taken == TAKES
    for name, expected in SENSORS.items():
        sensor = defs.resolve_sensor_def(name)
        assert set(sensor.required_resource_keys) & STORE_RESOURCES == expected, name


def test_a_run_leaves_no_connection_to_the_store_open(tmp_path, database_url):
    folder = tmp_path / "mirror" / "-work-app"
    session = "56565656-5656-4565-8565-565656565656"
    write_transcript(folder, session, "Why does the cache test hang on CI?", "The lock was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    dispose_instance(instance)
    assert outcome.status == "ingested"
    assert connections_open(database_url, until_none=10) == 0


def test_a_run_keeps_the_storage_connections_of_an_instance_built_as_a_worker_builds_it(
    tmp_path, database_url
):
    folder = tmp_path / "mirror" / "-work-app"
    session = "57575757-5757-4575-8575-575757575757"
    write_transcript(folder, session, "Why does the cache test hang on CI?", "The lock was held.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    # What a run worker the daemon launches has: an instance straight from dagster.yaml, which
    # opens a connection for each storage call.
    instance = dg.DagsterInstance.from_config(prepare_dagster_home(settings)["DAGSTER_HOME"])
    before = connections_made(database_url)
    for _ in range(10):
        instance.get_runs(limit=1)
    assert connections_made(database_url) - before >= 10
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested"
    # The run's store resource made it keep them.
    before = connections_made(database_url)
    for _ in range(10):
        instance.get_runs(limit=1)
    assert connections_made(database_url) - before <= 1
    dispose_instance(instance)


@dg.sensor(name="_reads_the_store")
def _reads_the_store(context: dg.SensorEvaluationContext, store: StoreResource):
    # A query, not only the pool: the pool makes its first connection in the background, which
    # may come after the test starts counting when nothing waits for it.
    with store.database().connection() as conn:
        conn.execute("SELECT 1")
    return dg.SkipReason("read")


def test_the_code_servers_sensor_ticks_keep_one_store_open(tmp_path, database_url, monkeypatch):
    from dagster._core.definitions.sensor_definition import SensorEvaluationContext

    from librarian_dagster import dagster_internals
    from librarian_dagster.dagster_internals import share_instance_across_ticks

    settings = make_settings(tmp_path, database_url)
    kept = dagster_internals._KeptInstance()
    monkeypatch.setattr(dagster_internals, "_kept_for_sensors", kept)
    share_instance_across_ticks([_reads_the_store])
    resource = StoreResource(home=str(settings.home), database_url=database_url)

    def tick() -> None:  # as the code server evaluates one (dagster/_grpc/impl.py)
        with SensorEvaluationContext(
            ref, last_tick_completion_time=None, last_run_key=None, cursor=None, log_key=None,
            repository_name=None, sensor_name="_reads_the_store", resources={"store": resource},
        ) as context:  # fmt: skip
            _reads_the_store.evaluate_tick(context)

    with dg.DagsterInstance.from_config(prepare_dagster_home(settings)["DAGSTER_HOME"]) as daemons:
        ref = daemons.get_ref()
        try:
            tick()
            before = connections_made(database_url, settled=True)
            for _ in range(3):
                tick()
            assert connections_made(database_url, settled=True) - before <= 2  # the counts' own
        finally:
            kept.close()
            _shared.release(str(settings.home), database_url)  # what keep held
    assert connections_open(database_url, until_none=10) == 0
