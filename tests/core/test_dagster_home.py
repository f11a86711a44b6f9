"""The dagster.yaml `librarian up` and `librarian ingest` write, read by Dagster's own instance."""

import json

import dagster as dg

from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.core.store.database import for_dagster
from tests.helpers import assert_shared_instance_config, make_settings


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
    older = _older_dagster_yaml(for_dagster(database_url))
    (settings.dagster_home / "dagster.yaml").write_text(older, encoding="utf-8")

    env = prepare_dagster_home(settings)

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert_shared_instance_config(instance)
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 300
