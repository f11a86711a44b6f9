"""DAGSTER_HOME under LIBRARIAN_HOME, with Dagster's own storage on Librarian's PostgreSQL.

dagster.yaml is rewritten on every start because the embedded server's socket folder is part of
its URL; so a home written by an older Librarian gets today's settings at its next start. Every
setting but the storage comes from `dagster_instance.yaml` beside this module, which is also the
end of deploy/dagster.yaml, word for word (tests/deploy checks it): the queue, the `llm` pool
limit, run retries and run monitoring are the same under `librarian up` and on a server.
"""

import json
import os
from importlib.resources import files

from librarian_dagster.core.capture.agents import AGENTS
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import dagster_storage_url


def shared_instance_yaml() -> str:
    """The instance settings `librarian up` and deploy/dagster.yaml share: all but the storage."""
    return (
        files("librarian_dagster.core.service")
        .joinpath("dagster_instance.yaml")
        .read_text(encoding="utf-8")
    )


def instance_yaml(storage_url: str) -> str:
    """A whole dagster.yaml: Dagster's storage at `storage_url`, then the shared settings."""
    # A JSON string is a valid YAML double-quoted scalar: the URL is quoted safely, no YAML
    # library needed to write it.
    storage = f"storage:\n  postgres:\n    postgres_url: {json.dumps(storage_url)}\n\n"
    return storage + shared_instance_yaml()


def prepare_dagster_home(settings: Settings) -> dict[str, str]:
    """Write dagster.yaml and return the environment variables a Dagster process needs."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    text = instance_yaml(dagster_storage_url(settings))
    # Written aside and renamed: a Dagster process of a `librarian up` already running (a run
    # worker starting) may read the file while `librarian ingest` rewrites it.
    partial = home / f"dagster.yaml.{os.getpid()}.partial"
    partial.write_text(text, encoding="utf-8")
    partial.replace(home / "dagster.yaml")
    return {
        "DAGSTER_HOME": str(home),
        "LIBRARIAN_HOME": str(settings.home),
        # Each agent's folder as these settings say, whatever the child's own environment.
        **{a.folder.variable: str(a.folder.path(settings)) for a in AGENTS.values()},
        "LIBRARIAN_SETTLE_SECONDS": str(settings.settle_seconds),
    }
