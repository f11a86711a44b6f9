import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from librarian_dagster.core.assembly.forgetting import forget_queued_run_history
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.ingest_plan import (
    IngestPlan,
    is_excluded,
    plan_ingest,
    run_key,
    snapshot,
)
from librarian_dagster.core.capture.readers import discover, named_folders
from librarian_dagster.core.capture.uploads import staged_sessions
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.defs.jobs import ingest_session_job
from librarian_dagster.defs.monitoring import RERUN_FOR_S, stopped_reruns
from librarian_dagster.defs.partitions import (
    SESSIONS,
    keys_by_session,
    migrate_partition_keys,
    partition_keys_for,
    sessions_partitions,
)
from librarian_dagster.defs.resources import (
    LedgerResource,
    MemoriesResource,
    SessionFoldersResource,
)
from librarian_dagster.forget import DagsterRunHistory


@dg.sensor(
    job=ingest_session_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def sessions_sensor(
    context: dg.SensorEvaluationContext,
    folders: SessionFoldersResource,
    ledger: LedgerResource,
    memories: MemoriesResource,
):
    """Requests an ingest run for each session, of any agent, that is new or grew, once
    settled, whether written on this machine or pushed to it (`librarian push`); and for each
    whose run `librarian up` canceled when it was stopped. Deletes the
    runs and partitions of sessions the recall server's page forgot."""
    db = ledger.get()
    _forget_what_the_page_forgot(context, db)
    found = _sessions(folders, ledger)
    if found is None:
        where = named_folders(folders.by_agent())
        return dg.SkipReason(f"no agent's folder exists ({where}), and nothing was pushed")
    skips = db.skip_list()
    plan = plan_ingest(
        snapshot(
            s for s in found if not is_excluded(s, folders.exclude or ()) and not skips.skips(s)
        ),
        context.cursor,
        time.time(),
        folders.settle_seconds,
        held=db.held_fingerprints(),
    )
    instance = context.instance
    # Partitions of a store from before `<project>/<month>/<id>` keys: re-keyed once.
    migrate_partition_keys(instance, memories.get(), db)
    known = keys_by_session(instance.get_dynamic_partitions(SESSIONS))
    again = _deferred_requests(db, plan, known, skips.session_ids)
    again += _stopped_requests(instance, plan, known, again)
    if not plan.requests and not again:
        return dg.SensorResult(
            skip_reason=f"nothing new ({plan.waiting} session(s) still settling)",
            cursor=plan.cursor,
        )
    # Record where each session's files are first: a run finds them by partition key alone.
    db.record_sources([(s.files, s.fingerprint) for s in plan.requests])
    keys = _partition_keys(db, plan, known)
    new_keys = [k for sid, k in keys.items() if sid not in known]
    return dg.SensorResult(
        run_requests=[
            *(
                dg.RunRequest(partition_key=keys[s.files.session_id], run_key=run_key(s))
                for s in plan.requests
            ),
            *again,
        ],
        dynamic_partitions_requests=[sessions_partitions.build_add_request(new_keys)]
        if new_keys
        else [],
        cursor=plan.cursor,
    )


def _sessions(folders: SessionFoldersResource, ledger: LedgerResource) -> list[SessionFiles] | None:
    """Every session in the agents' folders here and every one pushed here, as the server
    recorded it; None when there is neither a folder nor a pushed session. A session both here
    and pushed (a laptop pushing to itself) is read here: one source."""
    there = folders.present()
    uploads = Path(folders.uploads) if folders.uploads else None
    pushed = staged_sessions(uploads, ledger.pushes().recorded()) if uploads else []
    if not there and not pushed:
        return None
    local = discover(there)
    here = {s.session_id for s in local}
    return [*local, *(p for p in pushed if p.session_id not in here)]


def _forget_what_the_page_forgot(context: dg.SensorEvaluationContext, db: Ledger) -> None:
    """The runs and partitions of the sessions the recall server's page forgot, deleted where
    Dagster is. A failure is logged and the sessions stay queued for the next tick: it must not
    keep the agents' new sessions from being ingested."""
    try:
        done = forget_queued_run_history(db, DagsterRunHistory(context.instance))
    except Exception:
        context.log.exception("could not delete the runs of sessions forgotten from the page")
        return
    if done.sessions:
        context.log.info(done.said())


def _partition_keys(db: Ledger, plan: IngestPlan, known: dict[str, str]) -> dict[str, str]:
    """Session id -> partition key, for each session asked for: its own, or a new one."""
    fresh = [s.files for s in plan.requests if s.files.session_id not in known]
    new_of = partition_keys_for(fresh, db.known_cwds()) if fresh else {}
    return {
        s.files.session_id: known.get(s.files.session_id) or new_of[s.files.session_id]
        for s in plan.requests
    }


def _stopped_requests(
    instance: dg.DagsterInstance,
    plan: IngestPlan,
    known: dict[str, str],
    asked_again: list[dg.RunRequest],
) -> list[dg.RunRequest]:
    """Runs `librarian up` canceled when it was stopped, asked again at its next start within a
    tick, rather than at the incident sensor's next (up to two minutes): unless asked already."""
    asked = {known.get(s.files.session_id) for s in plan.requests}
    asked |= {r.partition_key for r in asked_again}
    return stopped_reruns(instance, time.time() - RERUN_FOR_S, asked)


def _deferred_requests(
    db: Ledger, plan: IngestPlan, known: dict[str, str], skipped: Collection[str]
) -> list[dg.RunRequest]:
    """Digests deferred by a spent daily token budget on an earlier day: asked again, once a
    day."""
    planned = {s.files.session_id for s in plan.requests}
    today = datetime.now(UTC).date().isoformat()
    return [
        dg.RunRequest(
            partition_key=known.get(session_id, session_id),
            run_key=f"{session_id}:deferred:{today}",
        )
        for session_id in db.due_deferrals()
        if session_id not in planned and session_id not in skipped
    ]
