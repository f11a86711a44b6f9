"""The dead-run sensor: a run whose worker died while the daemon runs is ended within a tick."""

import os
import time

import dagster as dg

from librarian_dagster.defs.monitoring import dead_run_sensor
from tests.helpers import make_settings
from tests.stuck_run import start_stuck_run, wait_started

WAIT_S = 300  # only a hang fails it; the machines are shared


def test_the_sensor_ends_the_run_whose_worker_died_and_leaves_the_live_one(tmp_path, database_url):
    settings = make_settings(tmp_path, database_url)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")},
        "LIBRARIAN_HOME": str(settings.home),
        "LIBRARIAN_DATABASE_URL": database_url,
    }
    # Untagged, as the daemon launches runs: on the code server of a DefaultRunLauncher, which
    # is where sensors are evaluated, their workers are this machine's processes.
    marks = [tmp_path / f"started-{n}" for n in range(2)]
    workers = [start_stuck_run(env, mark, untagged=True) for mark in marks]
    try:
        deadline = time.monotonic() + WAIT_S
        for worker, mark in zip(workers, marks, strict=True):
            wait_started(worker, mark, deadline)
        instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        pids = {}
        for run in instance.get_runs(filters=started):
            (start,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_START)
            assert start.dagster_event is not None
            pids[start.dagster_event.pid] = run.run_id
        dead, live = workers
        dead.kill()
        dead.wait(timeout=60)

        with dg.build_sensor_context(instance=instance) as context:
            result = dead_run_sensor(context)
        assert isinstance(result, dg.SkipReason)
        assert result.skip_message == "1 run(s) left by a process that stopped were ended"
        failed = instance.get_run_by_id(pids[dead.pid])
        assert failed is not None and failed.status == dg.DagsterRunStatus.FAILURE
        running = instance.get_run_by_id(pids[live.pid])
        assert running is not None and running.status == dg.DagsterRunStatus.STARTED

        with dg.build_sensor_context(instance=instance) as context:
            again = dead_run_sensor(context)
        assert isinstance(again, dg.SkipReason)
        assert again.skip_message == "no run left by a process that stopped"
        instance.dispose()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=60)
