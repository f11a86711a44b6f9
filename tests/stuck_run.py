"""A run that never ends, executed in this process as `librarian ingest` executes its runs.

`python -m tests.stuck_run [--untagged]`, with the LIBRARIAN_* settings and STARTED in the
environment (`start_stuck_run`): the instance under LIBRARIAN_HOME as `librarian ingest` opens it
(the embedded server, or LIBRARIAN_DATABASE_URL). Tagged as `librarian ingest` tags its runs, or,
with `--untagged`, as the daemon launches them under `librarian up`. Kill the process to leave
the run STARTED.
"""

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.dead_runs import in_process_run_tags

REPO = Path(__file__).resolve().parents[1]
STARTED = "STUCK_RUN_STARTED"
"""The variable naming the file the run touches once its op executes. By then the worker's
instance has made Dagster's tables and run their data migrations, so another process may open
the instance: one opened while the tables are still being made can meet them half made, and its
own data migrations then fail (seen in CI)."""


def start_stuck_run(env: Mapping[str, str], started: Path, untagged: bool) -> subprocess.Popen:
    """This module's run in a process of its own; `started` appears once the run executes."""
    command = [sys.executable, "-m", "tests.stuck_run", *(["--untagged"] if untagged else [])]
    return subprocess.Popen(command, env={**env, STARTED: str(started)}, cwd=REPO)


def wait_started(worker: subprocess.Popen, started: Path, deadline: float) -> None:
    """Until the worker's run executes (`started` exists), or fail if the worker ended first or
    the monotonic `deadline` passed."""
    while not started.exists():
        assert worker.poll() is None, "the stuck run's process ended before its run started"
        assert time.monotonic() < deadline, "the stuck run never started"
        time.sleep(0.1)


@dg.op
def wait_for_ever() -> None:
    Path(os.environ[STARTED]).touch()
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
