"""What Dagster's run monitoring misses under the DefaultRunLauncher: runs whose worker died, runs
that failed because what they needed (the database, an agent's folder) was down, and runs that
`librarian up` ended when it was stopped."""

from collections.abc import Collection
from datetime import UTC, datetime

import dagster as dg

from librarian_dagster.core.service.incidents import Incident
from librarian_dagster.dagster_internals import uses_default_run_launcher
from librarian_dagster.dead_runs import STOPPED_TAG, end_dead_runs
from librarian_dagster.defs.jobs import ingest_session_job
from librarian_dagster.defs.resources import ClockResource, IncidentsResource


# Every 30 s: a killed worker's run is failed and retried within about half a minute, and alerted
# within the minute (benchmarks/faults.py). Each tick costs the daemon, the code server and the
# database about 55 ms of CPU with nothing to end: every 20 s was a tenth of idle `up`'s CPU
# (decision 0043).
@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
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


LEAD_S = 60.0
"""How long before an incident was declared its runs may have failed: it is declared after two
failed probes, each of which may wait for its timeout."""
TAIL_S = 300.0
"""How long after it healed its runs may still be marked failed: Dagster's processes are
restarted, and the dead_run_sensor fails the runs whose worker died with the database."""
RERUN_FOR_S = 86400.0
"""Incidents healed longer ago than this are no longer looked at."""
RERUN_OF_TAG = "librarian/rerun_of"
PARTITION_TAG = "dagster/partition"
WILL_RETRY_TAG = "dagster/will_retry"
"""Set by Dagster on a failed run: "true" when its run retries will run it again."""


# Every 120 s: what it reruns failed minutes before (an incident is declared after two failed
# probes and its window ends 5 min after it healed); each tick costs the daemon, the code server
# and the database about 55 ms of CPU (decision 0043).
@dg.sensor(
    job=ingest_session_job,
    minimum_interval_seconds=120,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def incident_rerun_sensor(
    context: dg.SensorEvaluationContext, incidents: IncidentsResource, clock: ClockResource
):
    """Runs again, once per incident, each session whose last run failed while the database or
    an agent's folder was down (`librarian up` records the incidents it healed). A run `librarian
    up` ended when it was stopped is the sessions sensor's to run again (`stopped_reruns`).

    Dagster's run retries run again only a run whose worker died: a step that failed (a store
    write refused by a dead server, a transcript unreadable past its wait) is not retried, since
    a failed leak check would only fail again. Nor does the sessions sensor ask again for a file
    that did not change. Without this such a session would stay out of memory until a person ran
    a backfill.
    """
    now = clock.now()
    requests = reruns_due(context.instance, incidents.since(now - RERUN_FOR_S))
    if not requests:
        return dg.SkipReason("no run that failed during an incident is waiting to run again")
    for request in requests:
        context.log.info(f"{request.partition_key}: run again after {request.run_key}")
    return requests


def reruns_due(instance: dg.DagsterInstance, incidents: list[Incident]) -> list[dg.RunRequest]:
    """A run request for each session whose newest ingest run failed within an incident's window
    and will not be retried by Dagster; keyed by the incident, so each is asked once."""
    requests: dict[str, dg.RunRequest] = {}
    for incident in incidents:
        start, end = incident.began - LEAD_S, incident.healed + TAIL_S
        failed = instance.get_run_records(
            dg.RunsFilter(
                job_name=ingest_session_job.name,
                statuses=[dg.DagsterRunStatus.FAILURE],
                updated_after=datetime.fromtimestamp(start, UTC),
            )
        )
        for record in failed:
            run = record.dagster_run
            key = run.tags.get(PARTITION_TAG)
            ended = record.end_time or record.update_timestamp.timestamp()
            if key is None or key in requests or not start <= ended <= end:
                continue
            if run.tags.get(WILL_RETRY_TAG) == "true":
                continue  # the daemon's run retries take it
            if STOPPED_TAG in run.tags:
                continue  # ended by a stop, not the incident: the sessions sensor asks again
            if not _newest_run(instance, key, run.run_id):
                continue
            requests[key] = _rerun(
                key, run.run_id, f"after {incident.what} was down at {incident.began:.0f}"
            )
    return list(requests.values())


def stopped_reruns(
    instance: dg.DagsterInstance, since: float, asked: Collection[str | None] = ()
) -> list[dg.RunRequest]:
    """A run request for each session whose newest ingest run `librarian up` ended when it was
    stopped (dead_runs.STOPPED_TAG); keyed by that run, so each is asked once."""
    requests: dict[str, dg.RunRequest] = {}
    stopped = instance.get_run_records(
        dg.RunsFilter(
            job_name=ingest_session_job.name,
            statuses=[dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE],
            tags={STOPPED_TAG: "true"},
            updated_after=datetime.fromtimestamp(since, UTC),
        )
    )
    for record in stopped:
        run = record.dagster_run
        key = run.tags.get(PARTITION_TAG)
        if (
            key is None
            or key in requests
            or key in asked
            or not _newest_run(instance, key, run.run_id)
            # Stopped after its memory was written (in its checks): nothing to do again.
            or _stored_by(instance, key, run.run_id)
        ):
            continue
        requests[key] = _rerun(key, run.run_id, f"after librarian up stopped {run.run_id}")
    return list(requests.values())


def _rerun(key: str, run_id: str, why: str) -> dg.RunRequest:
    """The partition run again in place of `run_id`; `why` makes its run key, so once."""
    return dg.RunRequest(partition_key=key, run_key=f"{key}:{why}", tags={RERUN_OF_TAG: run_id})


def _stored_by(instance: dg.DagsterInstance, key: str, run_id: str) -> bool:
    """Whether the run wrote the partition's memory, its last stage."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("memory"), asset_partitions=[key]), limit=1
    ).records
    return bool(records) and records[0].run_id == run_id


def _newest_run(instance: dg.DagsterInstance, key: str, run_id: str) -> bool:
    """Whether `run_id` is the newest ingest run of the partition: none ran it again since (a
    retry, the sessions sensor or a person)."""
    (newest,) = instance.get_run_records(
        dg.RunsFilter(job_name=ingest_session_job.name, tags={PARTITION_TAG: key}), limit=1
    )
    return newest.dagster_run.run_id == run_id
