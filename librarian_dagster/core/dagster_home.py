"""DAGSTER_HOME under LIBRARIAN_HOME, with Dagster's own storage on Librarian's PostgreSQL.

dagster.yaml is rewritten on every start because the embedded server's socket folder is part of
its URL. Runs are queued two at a time: this machine class has two cores, and each run loads the
embedding model.
"""

import json

from librarian_dagster.core.database import dagster_storage_url
from librarian_dagster.core.settings import Settings

MAX_CONCURRENT_RUNS = 2


def prepare_dagster_home(settings: Settings) -> dict[str, str]:
    """Write dagster.yaml and return the environment variables a Dagster process needs."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    url = dagster_storage_url(settings)
    # JSON is valid YAML: no YAML library needed, and the URL is quoted safely.
    config = {
        "storage": {"postgres": {"postgres_url": url}},
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"max_concurrent_runs": MAX_CONCURRENT_RUNS},
        },
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }
    (home / "dagster.yaml").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return {
        "DAGSTER_HOME": str(home),
        "LIBRARIAN_HOME": str(settings.home),
        "LIBRARIAN_MIRROR": str(settings.mirror),
        "LIBRARIAN_SETTLE_SECONDS": str(settings.settle_seconds),
    }
