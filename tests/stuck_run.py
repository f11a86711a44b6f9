"""A run that never ends, executed in this process as `librarian ingest` executes its runs.

`python -m tests.stuck_run [--untagged]`, with the LIBRARIAN_* settings in the environment: the
instance under LIBRARIAN_HOME as `librarian ingest` opens it (the embedded server, or
LIBRARIAN_DATABASE_URL). Tagged as `librarian ingest` tags its runs, or, with `--untagged`, as
the daemon launches them under `librarian up`. Kill the process to leave the run STARTED.
"""

import sys
import time

import dagster as dg

from librarian_dagster.core.ops.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.dead_runs import in_process_run_tags


@dg.op
def wait_for_ever() -> None:
    time.sleep(3600)


@dg.job
def stuck():
    wait_for_ever()


def main() -> None:
    home = prepare_dagster_home(Settings.from_env())["DAGSTER_HOME"]
    tags = {} if "--untagged" in sys.argv else in_process_run_tags()
    with dg.DagsterInstance.from_config(home) as instance:
        stuck.execute_in_process(instance=instance, tags=tags)


if __name__ == "__main__":
    main()
