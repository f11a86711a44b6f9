"""The Dagster code location `librarian`: everything under defs/, bound to the settings.

`build_definitions(settings)` is the one way to get the jobs with their resources: the code
location (UI, daemon, sensor) binds them to the environment, `librarian ingest` and the tests to
the settings they were given.
"""

from pathlib import Path

import dagster as dg

from librarian_dagster.core.settings import Settings
from librarian_dagster.defs.resources import build_resources


def build_definitions(settings: Settings) -> dg.Definitions:
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(resources=build_resources(settings)),
    )


@dg.definitions
def defs() -> dg.Definitions:
    # The single place that reads LIBRARIAN_* from the environment for the code location.
    return build_definitions(Settings.from_env())
