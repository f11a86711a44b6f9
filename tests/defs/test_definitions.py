"""The code location's wiring, checked in about a second, without PostgreSQL or an ingest.

A wrong dependency, a stage left out of the job or a check that stopped blocking fails here first.
"""

from pathlib import Path

import dagster as dg
import pytest

from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.settings import Settings
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.jobs import INGEST_SESSION, ingest_session_job
from librarian_dagster.defs.partitions import SESSIONS
from librarian_dagster.defs.quality import MEASURE_RECALL, RECALL_FLOOR_CHECK, measure_recall_job
from librarian_dagster.defs.resources import QualityResource, StoreResource
from librarian_dagster.defs.staging import StagingIOManager

STAGES = (
    "transcript",
    "redacted_session",
    "session_digest",
    "digest_chunks",
    "exchange_chunks",
    "chunk_embeddings",
    "memory",
)
QUALITY_ASSET = "recall_quality"
# Each stage and the stages it reads (as inputs, or as `deps` for the transcript).
UPSTREAM = {
    "transcript": set(),
    "redacted_session": {"transcript"},
    "session_digest": {"redacted_session"},
    "digest_chunks": {"session_digest"},
    "exchange_chunks": {"redacted_session"},
    "chunk_embeddings": {"digest_chunks", "exchange_chunks"},
    "memory": {
        "redacted_session",
        "session_digest",
        "digest_chunks",
        "exchange_chunks",
        "chunk_embeddings",
    },
}


@pytest.fixture(scope="module")
def defs(tmp_path_factory) -> dg.Definitions:
    home = tmp_path_factory.mktemp("home")
    # An unreachable database URL: nothing here may need one.
    settings = Settings.from_env(
        {
            "LIBRARIAN_HOME": str(home),
            "LIBRARIAN_MIRROR": str(home / "mirror"),
            "LIBRARIAN_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "LIBRARIAN_RECALL_FLOOR": "0.7",
        }
    )
    return build_definitions(settings)


def test_the_code_location_loads(defs):
    dg.Definitions.validate_loadable(defs)


def test_the_stages_form_one_chain_on_the_sessions_partitions(defs):
    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    assert set(specs) == {*STAGES, QUALITY_ASSET, "library_notes"}
    for name in STAGES:
        spec = specs[name]
        assert {dep.asset_key.to_user_string() for dep in spec.deps} == UPSTREAM[name], name
        assert isinstance(spec.partitions_def, dg.DynamicPartitionsDefinition)
        assert spec.partitions_def.name == SESSIONS
        assert spec.group_name == "sessions"
        assert spec.description, f"{name} has no description for the UI"


def test_the_ingest_job_runs_every_stage_and_the_leak_check_in_one_process(defs):
    job = defs.resolve_job_def(INGEST_SESSION)
    graph = defs.resolve_asset_graph()
    selected = ingest_session_job.selection.resolve(graph)
    assert {key.to_user_string() for key in selected} == set(STAGES)
    checks = ingest_session_job.selection.resolve_checks(graph)
    assert dg.AssetCheckKey(dg.AssetKey("redacted_session"), "no_secrets_remain") in checks
    assert job.executor_def is dg.in_process_executor


def test_the_leak_check_blocks_the_digest(defs):
    key = dg.AssetCheckKey(dg.AssetKey("redacted_session"), "no_secrets_remain")
    [spec] = [s for s in defs.get_asset_checks_def(key).check_specs if s.key == key]
    assert spec.blocking


def test_the_sensor_starts_the_ingest_job_and_is_on_by_default(defs):
    sensor = defs.resolve_sensor_def("sessions_sensor")
    assert sensor.job_name == INGEST_SESSION
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_resources_are_bound_to_the_settings(defs):
    resources = defs.resources or {}
    io_manager, store = resources["io_manager"], resources["store"]
    assert isinstance(io_manager, StagingIOManager)
    assert isinstance(store, StoreResource)
    assert store.database_url == "postgresql://nobody@127.0.0.1:1/none"
    assert Path(io_manager.home).name.startswith("home")


def test_recall_quality_is_measured_daily_and_on_demand_with_a_warning_check(defs):
    [spec] = [s for s in defs.resolve_all_asset_specs() if s.key.to_user_string() == QUALITY_ASSET]
    assert spec.partitions_def is None and spec.group_name == "quality" and spec.description
    key = dg.AssetCheckKey(spec.key, RECALL_FLOOR_CHECK)
    [check] = [s for s in defs.resolve_assets_def(spec.key).check_specs if s.key == key]
    assert not check.blocking
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in measure_recall_job.selection.resolve(graph)} == {
        QUALITY_ASSET
    }
    assert key in measure_recall_job.selection.resolve_checks(graph)
    assert defs.resolve_job_def(MEASURE_RECALL).executor_def is dg.in_process_executor
    schedule = defs.resolve_schedule_def("recall_quality_daily")
    assert schedule.job_name == MEASURE_RECALL
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    # The ingest job stays the session stages alone: measuring never runs with an ingest.
    assert dg.AssetKey(QUALITY_ASSET) not in ingest_session_job.selection.resolve(graph)


def test_the_quality_resource_is_bound_to_the_settings(defs):
    quality = (defs.resources or {})["quality"]
    assert isinstance(quality, QualityResource)
    assert quality.recall_floor == 0.7
    assert Path(quality.eval_dir).name == "eval" and quality.min_relevance == DEFAULT_THRESHOLD


def test_the_library_is_one_partition_per_project_asked_by_a_sensor_run_in_one_process(defs):
    [spec] = [
        s for s in defs.resolve_all_asset_specs() if s.key.to_user_string() == "library_notes"
    ]
    assert isinstance(spec.partitions_def, dg.DynamicPartitionsDefinition)
    assert spec.partitions_def.name == "projects" and spec.group_name == "library"
    sensor = defs.resolve_sensor_def("library_sensor")
    assert sensor.job_name == "consolidate_library"
    assert defs.resolve_job_def("consolidate_library").executor_def is dg.in_process_executor
