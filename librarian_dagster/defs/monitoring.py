"""What Dagster's run monitoring misses under the DefaultRunLauncher: runs whose worker died."""

import dagster as dg

from librarian_dagster.dagster_internals import uses_default_run_launcher
from librarian_dagster.dead_runs import end_dead_runs


# Every 20 s: a killed worker's run is failed, alerted and retried within about half a minute
# (benchmarks/faults.py); with nothing to end a tick costs a listing of the started runs (~10 ms).
@dg.sensor(minimum_interval_seconds=20, default_status=dg.DefaultSensorStatus.RUNNING)
def dead_run_sensor(context: dg.SensorEvaluationContext):
    """Marks failed a run whose worker died (the OOM killer) while it ran, and frees its slots."""
    instance = context.instance
    # Sensors are evaluated in the code server, which under the DefaultRunLauncher also starts
    # the run workers: their pids are this machine's. Other launchers watch their own workers
    # (run monitoring asks them), and their runs' pids mean nothing here.
    beside_us = uses_default_run_launcher(instance)
    ended = end_dead_runs(instance, untagged_ran_here=beside_us, when="by the dead_run_sensor")
    if not ended:
        return dg.SkipReason("no run left by a process that stopped")
    for run in ended:
        context.log.warning(f"run {run.run_id}: its process (pid {run.pid}) stopped; {run.marked}")
    return dg.SkipReason(f"{len(ended)} run(s) left by a process that stopped were ended")
