"""The dagster.yaml `librarian up` and `librarian ingest` write, read by Dagster's own instance."""

import json

import dagster as dg

from librarian_dagster.core.dagster_home import prepare_dagster_home
from tests.helpers import make_settings


@dg.asset(pool="llm")
def pooled_step() -> int:
    """Stands for the digest: a step in the `llm` pool."""
    return 1


def _older_dagster_yaml(url: str) -> str:
    """What Librarian wrote before the shared settings: a queue of two, nothing more."""
    return json.dumps(
        {
            "storage": {"postgres": {"postgres_url": url}},
            "run_coordinator": {
                "module": "dagster.core.run_coordinator",
                "class": "QueuedRunCoordinator",
                "config": {"max_concurrent_runs": 2},
            },
            "telemetry": {"enabled": False},
        }
    )


def test_the_embedded_instance_has_the_llm_pool_limit_run_retries_and_monitoring(
    tmp_path, database_url
):
    settings = make_settings(tmp_path, database_url)
    # A home an older Librarian wrote: its next start brings it up to date.
    settings.dagster_home.mkdir(parents=True)
    older = _older_dagster_yaml(database_url.replace("postgresql://", "postgresql+psycopg2://"))
    (settings.dagster_home / "dagster.yaml").write_text(older, encoding="utf-8")

    env = prepare_dagster_home(settings)

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        concurrency = instance.get_concurrency_config()
        queue = concurrency.run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 2
        assert {"key": "dagster/backfill", "limit": 1} in queue.tag_concurrency_limits
        assert concurrency.pool_config.default_pool_limit == 1
        granularity = concurrency.pool_config.pool_granularity
        assert granularity is not None and granularity.value == "op"

        assert instance.run_retries_enabled
        assert instance.run_retries_max_retries == 2
        assert not instance.run_retries_retry_on_asset_or_op_failure
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 300

        # In effect, not only written: a pooled step takes the default limit of one slot.
        result = dg.materialize([pooled_step], instance=instance)
        assert result.success
        assert instance.event_log_storage.get_concurrency_info("llm").slot_count == 1
