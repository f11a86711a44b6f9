"""Runs whose process is gone: ended at the next start of `librarian up` or `librarian ingest`,
and within a minute while the daemon runs (defs/monitoring.py).

A run worker killed mid-run (a lost database that took the process down, SIGKILL, the OOM
killer, a reboot) cannot record its own end, and under the DefaultRunLauncher nothing else does:
Dagster's run monitoring asks the run launcher about a STARTED run's worker, and the default
launcher cannot answer (it only times out runs left STARTING or CANCELING). Such a run stays
STARTED for ever, holding its `llm` slot, so the next digest waits for ever too. See
docs/decisions/0020.

A run is judged dead only when it can be known to be:

- the process that started it is known: the pid of its RUN_START event, which the process
  executing the run writes (the `librarian ingest` process itself, or the run worker a code
  server started under `librarian up`);
- that process ran on this machine: the run is tagged with this machine's name (every
  `librarian ingest` and `librarian backfill` run is), or Dagster's storage is the embedded
  server, which only this machine's processes can reach (the runs the daemon launches under
  `librarian up`), or this is the code server that started the run's worker (the
  `dead_run_sensor`, under the DefaultRunLauncher);
- no process with that pid is running now that was started before the run (a later process
  given the same pid, or any process after a reboot, is another one).

STARTED runs so found are marked failed, CANCELING ones canceled (what run monitoring would do
once their cancel timeout passed), with a message that says why, and the concurrency slots they
held are freed at once. The daemon's run retries then run a launched run again; a run of
`librarian ingest` carries `dagster/max_retries: 0`, since it has no code location to be run
again from, and the next `librarian ingest` of the same files is its retry.
"""

import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg
import psutil

from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import (
    free_concurrency_slots,
    mark_run_canceled,
    mark_run_canceling,
    mark_run_failed,
    run_start_event,
    tag_run,
)

HOST_TAG = "librarian/host"
"""The machine a run executes on, for runs whose process is this one (`librarian ingest`)."""
STOPPED_TAG = "librarian/stopped"
"""On a run `librarian up` canceled because it was stopped: run again at the next start."""

# A process's start time is its ticks since boot added to the boot's wall-clock time, which moves
# when the clock is stepped (NTP): a minute of slack, so that a live run is not taken for dead.
# A later process given the same pid within a minute of the run's start is unlikely enough.
_CLOCK_SLACK_S = 60.0

JUDGED = (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


@dataclass(frozen=True)
class EndedRun:
    run_id: str
    status: dg.DagsterRunStatus
    """What the run was left as: FAILURE (it was STARTED) or CANCELED (it was CANCELING)."""
    pid: int

    @property
    def marked(self) -> str:
        return "canceled" if self.status == dg.DagsterRunStatus.CANCELED else "failed"

    def said(self, command: str) -> str:
        return (
            f"{command}: run {self.run_id} was left running by a process that stopped "
            f"(pid {self.pid}): marked {self.marked}"
        )


def this_host() -> str:
    return socket.gethostname()


def in_process_run_tags() -> dict[str, str]:
    """Tags for a run this process executes itself (`execute_in_process`)."""
    # The daemon cannot run an in-process run again (it has no code location); the next
    # `librarian ingest` does.
    return {HOST_TAG: this_host(), "dagster/max_retries": "0"}


def end_dead_runs(
    instance: dg.DagsterInstance, *, untagged_ran_here: bool, when: str = "at the next start"
) -> list[EndedRun]:
    """Mark the runs left STARTED or CANCELING by a process that is gone as ended.

    `untagged_ran_here`: a run without the host tag (one a daemon launched) ran on this
    machine: Dagster's storage is the embedded server, which only this machine can reach, or
    this is the code server whose DefaultRunLauncher runs spawn their workers beside it.
    """
    ended: list[EndedRun] = []
    host = this_host()
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=list(JUDGED))):
        run = record.dagster_run
        tagged = run.tags.get(HOST_TAG)
        if tagged != host and (tagged is not None or not untagged_ran_here):
            continue  # another machine's run, or one that may be
        started = run_start_event(instance, run.run_id)
        if started is None or started.dagster_event is None:
            continue
        pid = started.dagster_event.pid
        if pid is None or _running_since(pid, started.timestamp):
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status not in JUDGED:
            continue  # it ended meanwhile, on its own
        where = f"pid {pid} on {host}"
        if current.status == dg.DagsterRunStatus.CANCELING:
            message = (
                f"The process running it ({where}) stopped while the run was being canceled: "
                f"marked canceled {when}."
            )
            mark_run_canceled(instance, current, message)
            status = dg.DagsterRunStatus.CANCELED
        else:
            message = (
                f"The process running it ({where}) stopped before the run ended: "
                f"marked failed {when}."
            )
            mark_run_failed(instance, current, message)
            status = dg.DagsterRunStatus.FAILURE
        # No step of it can still be running: give back the `llm` slot it held, now rather than
        # when the daemon's monitoring gets to it (`librarian ingest` runs without a daemon).
        free_concurrency_slots(instance, run.run_id)
        ended.append(EndedRun(run.run_id, status, pid))
    return ended


GOING = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED)


def cancel_for_stop(instance: dg.DagsterInstance, *, untagged_ran_here: bool) -> list[str]:
    """Before `librarian up` stops its processes: each run its daemon launched that is going is
    marked CANCELING and tagged STOPPED_TAG. Its worker, interrupted, then records it CANCELED
    rather than failed (what Dagster's own termination does), so no failure is alerted, and the
    incident_rerun_sensor runs it again at the next start. A run of `librarian ingest` (tagged
    with its host) is that process's own, and left alone."""
    if not untagged_ran_here:
        return []  # another machine's daemon may have launched them
    canceled = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=list(GOING))):
        run = record.dagster_run
        if HOST_TAG in run.tags:
            continue
        tag_run(instance, run.run_id, {STOPPED_TAG: "true"})
        mark_run_canceling(
            instance, run, "librarian up was stopped: canceled, to be run again at the next start"
        )
        canceled.append(run.run_id)
    return canceled


def end_stopped_runs(instance: dg.DagsterInstance, run_ids: list[str], since: float) -> int:
    """Once `librarian up`'s processes are gone: the runs `cancel_for_stop` marked that no
    worker ended (one killed before it could say, one never started) are marked canceled. A run
    its daemon failed while stopping (a queued run it was launching as the code server went:
    "unrecoverable error while dequeuing") stays failed, as Dagster recorded it, but is tagged
    STOPPED_TAG too, so that the failure alert passes it over and it is run again. How many runs
    the stop ended."""
    ended = set()
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status == dg.DagsterRunStatus.CANCELING:
            mark_run_canceled(instance, run, "librarian up was stopped before the run ended.")
            free_concurrency_slots(instance, run_id)
        ended.add(run_id)
    failed = instance.get_run_records(
        filters=dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            updated_after=datetime.fromtimestamp(since, UTC),
        )
    )
    for record in failed:
        run = record.dagster_run
        if HOST_TAG in run.tags or STOPPED_TAG in run.tags:
            continue
        tag_run(instance, run.run_id, {STOPPED_TAG: "true"})
        ended.add(run.run_id)
    return len(ended)


def report_dead_runs(
    instance: dg.DagsterInstance,
    settings: Settings,
    command: str,
    tell: Callable[[str], None] | None = None,
) -> None:
    """End the runs whose process is gone, one line for each: to `tell`, or on stderr."""
    for run in end_dead_runs(instance, untagged_ran_here=settings.database_url is None):
        if tell is None:
            print(run.said(command), file=sys.stderr)
        else:
            tell(run.said(command))


def _running_since(pid: int, started: float) -> bool:
    """Whether the process `pid` is running and was already running at `started`."""
    if psutil.boot_time() > started:
        return False  # the machine was started again since: every process is newer
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:  # exited; only its status is left
            return False
        return process.create_time() <= started + _CLOCK_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's process we may not inspect: leave its run alone
