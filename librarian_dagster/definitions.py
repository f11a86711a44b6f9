"""The Dagster code location `librarian`: everything under defs/, bound to the settings.

`build_definitions(settings)` is the one way to get the jobs with their resources: the code
location (UI, daemon, sensor) binds them to the environment, `librarian ingest` and the tests to
the settings they were given.
"""

import functools
import warnings
from pathlib import Path

from librarian_dagster.core.commandline import imports_uncollected

# Loaded by the code server and by each run worker (and `librarian ingest`) at their start.
with imports_uncollected():
    import dagster as dg

    from librarian_dagster.core.settings import Settings
    from librarian_dagster.dagster_internals import (
        share_instance_across_ticks,
        write_step_events_in_batches,
    )
    from librarian_dagster.defs.checks import MEMORY, memory_freshness
    from librarian_dagster.defs.resources import build_resources


def build_definitions(settings: Settings) -> dg.Definitions:
    # Every process that runs these assets builds them here: the code server and its run
    # workers, `librarian ingest`, a Kubernetes run's pod.
    write_step_events_in_batches()
    defs = dg.Definitions.merge(_defs_folder(), dg.Definitions(resources=build_resources(settings)))
    freshness = memory_freshness(settings.quiet_hours)
    if freshness is not None:
        # The policy's window is a setting, so it is applied here, where settings are bound.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)  # map_asset_specs is "preview"
            defs = defs.map_asset_specs(
                func=lambda s: dg.apply_freshness_policy(s, freshness) if s.key == MEMORY else s
            )
    share_instance_across_ticks(defs.sensors or ())
    return defs


@functools.cache
def _defs_folder() -> dg.Definitions:
    """What defs/ holds, loaded once a process: it does not depend on the settings, and each
    load walked the folder as Dagster's component tree (reading pyproject.toml, a JSON schema
    per component): ~70 ms of CPU, at every `ingest_sessions` of a test process."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)


@dg.definitions
def defs() -> dg.Definitions:
    # The single place that reads LIBRARIAN_* from the environment for the code location.
    return build_definitions(Settings.from_env())
