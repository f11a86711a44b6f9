"""Alerts: a message per new digest, one per failed run, one per capture gap and its recovery.

All three are sensors of their own, so an alert never runs inside (and never fails) an ingest
run, and each shows its messages in its tick log in the UI. Without Telegram settings that log is
where the alerts are. What is worth an alert is decided in `core/service/alerts.py`; these functions
only gather the state and send.
"""

from collections import Counter
from pathlib import Path

import dagster as dg

from librarian_dagster.core.capture.ingest_plan import Snapshot, is_excluded, snapshot
from librarian_dagster.core.capture.readers import discover
from librarian_dagster.core.capture.uploads import staged_sessions
from librarian_dagster.core.service.alerts import (
    FOLDERS_QUIET,
    GapState,
    Overdue,
    advance,
    capture_incidents,
    digest_message,
    digest_rollup,
    due_sessions,
    first_line,
    folders_in_use,
    folders_retired,
    run_failure_message,
    run_link,
)
from librarian_dagster.core.service.journal import failed_text
from librarian_dagster.core.store.integrity import ingested_at, requested_at
from librarian_dagster.dagster_internals import last_good_sensor_tick, sensor_known, step_failure
from librarian_dagster.dead_runs import STOPPED_TAG
from librarian_dagster.defs.partitions import SESSIONS, keys_by_session, session_id_of
from librarian_dagster.defs.resources import (
    ClockResource,
    JournalResource,
    LedgerResource,
    MemoriesResource,
    NotifierResource,
    SessionFoldersResource,
    StoreResource,
)

MEMORY = dg.AssetKey("memory")
SESSION_DIGEST = dg.AssetKey("session_digest")
TRANSCRIPT = dg.AssetKey("transcript")
SESSIONS_SENSOR = "sessions_sensor"
DIGEST_MESSAGES_PER_TICK = 5
"""A backfill writes hundreds of memories a tick: past this many, one roll-up message."""
_PAGE = 200


# Every 120 s: a new memory's message is no more urgent than that, and each tick costs the daemon,
# the code server and the database about 55 ms of CPU (decision 0043).
@dg.sensor(minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING)
def digest_alerts(
    context: dg.SensorEvaluationContext, notifier: NotifierResource, memories: MemoriesResource
):
    """Announces each new memory (project, summary, importance); off with NOTIFY_DIGESTS=false."""
    instance = context.instance
    if context.cursor is None:
        # First tick: start from now, not with an announcement of every memory already stored.
        latest = instance.fetch_materializations(MEMORY, limit=1).records
        return dg.SensorResult(
            cursor=str(latest[0].storage_id if latest else 0),
            skip_reason="watching for new memories from now on",
        )
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=MEMORY, after_storage_id=int(context.cursor)),
        limit=_PAGE,
        ascending=True,
    )
    records = result.records
    cursor = str(records[-1].storage_id) if records else context.cursor
    if not records:
        return dg.SensorResult(cursor=cursor, skip_reason="no new memory")
    if not notifier.notify_digests:
        return dg.SensorResult(
            cursor=cursor, skip_reason=f"{len(records)} new, not announced (NOTIFY_DIGESTS off)"
        )
    db, send = memories.get(), notifier.notifier(context.log).send
    messages, rolled_up = [], Counter()
    for record in records:
        key = record.partition_key
        event = record.asset_materialization
        if event is not None and "migrated_from" in event.metadata:
            continue  # a partition re-keyed (defs/partitions.py), not a new memory
        if key is None or _digest_reused(instance, key, record.run_id):
            continue  # the same digest stored again: nothing new to say
        session_id = session_id_of(key)
        memory = db.memory_record(session_id)
        if memory is None:
            continue  # deleted since
        if len(messages) < DIGEST_MESSAGES_PER_TICK:
            messages.append(
                digest_message(memory.project, memory.summary, memory.importance, session_id)
            )
        else:
            rolled_up[memory.project] += 1
    if rolled_up:
        messages.append(digest_rollup(sum(rolled_up.values()), rolled_up))
    for message in messages:
        send(message)
    return dg.SensorResult(
        cursor=cursor, skip_reason=f"{len(records)} new memories, {len(messages)} message(s)"
    )


def _digest_reused(instance: dg.DagsterInstance, key: str, run_id: str) -> bool:
    [latest, *_] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=SESSION_DIGEST, asset_partitions=[key]), limit=1
    ).records or [None]
    if latest is None or latest.run_id != run_id or latest.asset_materialization is None:
        return False
    reused = latest.asset_materialization.metadata.get("reused")
    return reused is not None and reused.value is True


# Every 60 s, not Dagster's 30: a failed run's alert is no more urgent than a minute, and each
# tick costs the daemon, the code server and the database about 55 ms of CPU (decision 0043).
@dg.run_failure_sensor(
    name="run_failure_alerts",
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One alert per failed run: job, session, the error's first line, a link to it.",
)
def run_failure_alerts(
    context: dg.RunFailureSensorContext, notifier: NotifierResource, journal: JournalResource
):
    run = context.dagster_run
    if STOPPED_TAG in run.tags:
        return  # failed by `librarian up`'s stop, not by anything to hear of: run again at start
    session = run.tags.get("dagster/partition") or _partition_range(run.tags)
    error = _error(context)
    journal.note(
        "failed", failed_text(session, first_line(error), run_link(notifier.ui_url, run.run_id))
    )
    notifier.notifier(context.log).send(
        run_failure_message(run.job_name, session, error, run.run_id, notifier.ui_url)
    )


def _partition_range(tags) -> str | None:
    start, end = (
        tags.get("dagster/asset_partition_range_start"),
        tags.get("dagster/asset_partition_range_end"),
    )
    if start and end:
        return start if start == end else f"{start} … {end}"
    return None


def _error(context: dg.RunFailureSensorContext) -> str:
    for event in context.get_step_failure_events():
        failure = step_failure(event)
        if failure is not None and failure.cause_message is not None:
            text = failure.cause_message.strip()
            # "dagster._core.definitions.events.Failure: why" -> "Failure: why"
            qualified, colon, why = text.partition(": ")
            if colon and "." in qualified and qualified.endswith(f".{failure.cause_class}"):
                text = f"{failure.cause_class}: {why}"
            return f"{event.step_key}: {text}"
    return context.failure_event.message or "run failed"


@dg.sensor(minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.RUNNING)
def capture_gap_alerts(
    context: dg.SensorEvaluationContext,
    folders: SessionFoldersResource,
    store: StoreResource,
    ledger: LedgerResource,
    notifier: NotifierResource,
    clock: ClockResource,
    journal: JournalResource,
):
    """Alerts once when sessions go uncaptured (not ingested, the agents' folders quiet, a
    pushing machine quiet, the sessions sensor silent), and once when that clears."""
    now = clock.now()
    state = GapState.from_cursor(context.cursor, now)
    every = folders.by_agent()
    present = folders.present()
    snapshots = snapshot(discover(present))
    # A pushed session not ingested is as late as one written here; only those written here
    # tell whether the folders are quiet.
    pushed = snapshot(staged_sessions(Path(folders.uploads))) if folders.uploads else []
    # What the sessions sensor never asks for (LIBRARIAN_EXCLUDE, the skip list) is no gap.
    skips = ledger.get().skip_list()
    wanted = [
        s
        for s in [*snapshots, *pushed]
        if not is_excluded(s.files, folders.exclude or ()) and not skips.skips(s.files)
    ]
    candidates = _overdue(context, store, folders, notifier, state, wanted, now)
    machines = ledger.pushes().machines()
    incidents = capture_incidents(
        now=now,
        folders=every,
        present=present,
        snapshots=snapshots,
        overdue=candidates,
        sensor_watched=sensor_known(context.instance, SESSIONS_SENSOR),
        last_sensor_tick=last_good_sensor_tick(context.instance, SESSIONS_SENSOR),
        watching_since=state.watching_since,
        gap_minutes=notifier.gap_minutes,
        quiet_hours=notifier.quiet_hours,
        machines=machines,
    )
    unwatched = {}
    if not folders_in_use(bool(present), snapshots, machines):
        unwatched[FOLDERS_QUIET] = folders_retired(every)
    send = notifier.notifier(context.log).send
    after = advance(
        state, incidents, now, send, lambda text: journal.note("alert", text), unwatched
    )
    summary = ", ".join(sorted(after.open)) or "none"
    return dg.SensorResult(cursor=after.to_cursor(), skip_reason=f"open incidents: {summary}")


def _overdue(
    context: dg.SensorEvaluationContext,
    store: StoreResource,
    folders: SessionFoldersResource,
    notifier: NotifierResource,
    state: GapState,
    snapshots: list[Snapshot],
    now: float,
) -> list[Overdue]:
    """The settled sessions not handled `gap_minutes` after they were due."""
    db = store.database()
    handled, requested = ingested_at(db), requested_at(db)
    settings = {
        "now": now,
        "settle_seconds": folders.settle_seconds,
        "gap_minutes": notifier.gap_minutes,
        "watching_since": state.watching_since,
    }
    candidates = due_sessions(snapshots, handled, requested, **settings)
    if not candidates:
        return candidates
    # Sessions with nothing to remember (or whose run failed: alerted already) have no memory,
    # but their `transcript` stage ran: handled too. Asked in pages, for the late only.
    for session_id, ran in _transcripts_ran(
        context.instance, [c.session_id for c in candidates]
    ).items():
        handled[session_id] = max(ran, handled.get(session_id, ran))
    wanted = {c.session_id for c in candidates}
    late_snapshots = [s for s in snapshots if s.files.session_id in wanted]
    return due_sessions(late_snapshots, handled, requested, **settings)


def _transcripts_ran(instance: dg.DagsterInstance, session_ids: list[str]) -> dict[str, float]:
    """Session id -> when its `transcript` stage last ran, in a few queries for any number."""
    latest: dict[str, float] = {}
    by_session = keys_by_session(instance.get_dynamic_partitions(SESSIONS))
    keys = [by_session.get(s, s) for s in session_ids]
    for start in range(0, len(keys), _PAGE):
        records_filter = dg.AssetRecordsFilter(
            asset_key=TRANSCRIPT, asset_partitions=keys[start : start + _PAGE]
        )
        cursor = None
        while True:
            result = instance.fetch_materializations(records_filter, limit=1000, cursor=cursor)
            for record in result.records:
                if record.partition_key is not None:
                    session_id = session_id_of(record.partition_key)
                    latest[session_id] = max(record.timestamp, latest.get(session_id, 0.0))
            if not result.has_more:
                break
            cursor = result.cursor
    return latest
