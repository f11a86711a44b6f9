"""`librarian ingest` and `librarian backfill`: run the `ingest_session` job now, in this process.

The same job the sessions sensor and a backfill from the UI start, with the same resources. The runs
land in the Dagster instance the UI shows (DAGSTER_HOME under LIBRARIAN_HOME), so an ingest from
the command line has the same lineage, metadata and checks as a sensor run.

Many sessions go in one run (a range of consecutive partitions, at most `per_run`): Dagster's
bookkeeping of a run is paid once per run instead of once per session (docs/decisions/0014).
Each stage still works and reports session by session; a session a run could not store is run
again on its own, so its failure is its own and never costs another session its memory.
"""

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import dagster as dg

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.ingest_plan import is_excluded
from librarian_dagster.core.capture.readers import find, not_a_transcript
from librarian_dagster.core.capture.skips import SkipList, last_active
from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import unreachable
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.dagster_internals import (
    dispose_instance,
    interrupted,
    keep_storage_connections,
    not_a_connection_retry,
    partitions_read_once,
    step_failure,
)
from librarian_dagster.dead_runs import in_process_run_tags, report_dead_runs
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import (
    SESSIONS,
    SESSIONS_PER_RUN,
    STAGES,
    ensure_partitions,
    keys_by_session,
    keys_for_ids,
    migrate_partition_keys,
    session_id_of,
)
from librarian_dagster.defs.resources import shared_store

# The tags Dagster's own backfills put on a run over a range of partitions.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


@dataclass(frozen=True)
class IngestOutcome:
    session_id: str
    status: Literal["ingested", "skipped", "deferred", "failed"]
    detail: str
    chunks: int
    seconds: float
    """The session's share of its run's wall time."""


def open_instance(settings: Settings) -> dg.DagsterInstance:
    """The Dagster instance of these settings, ready to run; `dispose_instance` closes it."""
    env = prepare_dagster_home(settings)
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    keep_storage_connections(instance)
    # Runs a killed process left STARTED end first: they would hold the `llm` slot for ever.
    report_dead_runs(instance, settings, "librarian")
    # Partitions of a store from before `<project>/<month>/<id>` keys: re-keyed once.
    with shared_store(settings) as store:
        migrate_partition_keys(instance, store.memories, store.ledger)
    return instance


def ingest_paths(
    paths: Iterable[Path],
    settings: Settings,
    per_run: int = SESSIONS_PER_RUN,
    on_start: Callable[[int], None] | None = None,
    on_outcome: Callable[[IngestOutcome], None] | None = None,
) -> list[IngestOutcome]:
    """Ingest the sessions found under `paths`; `on_start` hears how many there are (the files
    that are no transcript counted with them), `on_outcome` each one's outcome as it comes."""
    # Absolute, as the sensor sees the folders: the fingerprint names the files' paths.
    given = find(Path(p).absolute() for p in paths)
    found = [s for s in given.sessions if not is_excluded(s, settings.exclude)]
    if not found:
        return _ingest_found(given.unknown, [], SkipList(), settings, per_run, on_start, on_outcome)
    # One store for the whole ingest: the runs' resources share it (`shared_store`).
    with shared_store(settings) as store:
        skips = store.ledger.skip_list()
        return _ingest_found(given.unknown, found, skips, settings, per_run, on_start, on_outcome)


def _ingest_found(
    unknown: Sequence[Path],
    found: Sequence[SessionFiles],
    skips: SkipList,
    settings: Settings,
    per_run: int,
    on_start: Callable[[int], None] | None,
    on_outcome: Callable[[IngestOutcome], None] | None,
) -> list[IngestOutcome]:
    skipped = [IngestOutcome(str(p), "skipped", not_a_transcript(), 0, 0.0) for p in unknown]
    sessions = []
    for files in found:
        reason = skips.reason(files.session_id, last_active(files))
        if reason:
            skipped.append(IngestOutcome(files.session_id, "skipped", reason, 0, 0.0))
        else:
            sessions.append(files)
    if on_start is not None:
        on_start(len(skipped) + len(sessions))
    if on_outcome is not None:
        for outcome in skipped:
            on_outcome(outcome)
    if not sessions:
        return skipped
    return skipped + ingest_sessions(sessions, settings, per_run=per_run, on_outcome=on_outcome)


def ingest_sessions(
    sessions: list[SessionFiles],
    settings: Settings,
    instance: dg.DagsterInstance | None = None,
    per_run: int = SESSIONS_PER_RUN,
    on_outcome: Callable[[IngestOutcome], None] | None = None,
) -> list[IngestOutcome]:
    # The store is opened once, here or by the caller, and every run's resources share it.
    with shared_store(settings) as store:
        # Where each session's files are, as the sensor records it: the run finds them by key.
        store.ledger.record_sources([(s, s.fingerprint()) for s in sessions])
        known_cwds = store.ledger.known_cwds()
        # dagster-postgres warns of each retry of a lost connection on the root logger, several
        # lines each; a database that stays away is reported once, as one line (see _run).
        logging.getLogger().addFilter(not_a_connection_retry)
        with _instance_for(settings, instance) as instance:
            keys = ensure_partitions(instance, sessions, known_cwds)
            return run_partitions(keys, settings, instance, per_run=per_run, on_outcome=on_outcome)


@contextmanager
def _instance_for(
    settings: Settings, given: dg.DagsterInstance | None
) -> Iterator[dg.DagsterInstance]:
    """`given`, or an instance opened for the call and closed after it."""
    if given is not None:
        yield given
        return
    instance = open_instance(settings)
    try:
        yield instance
    finally:
        dispose_instance(instance)


def run_partitions(
    keys: Sequence[str],
    settings: Settings,
    instance: dg.DagsterInstance,
    *,
    per_run: int = SESSIONS_PER_RUN,
    assets: Sequence[str] = STAGES,
    trigger: str = "cli-ingest",
    on_outcome: Callable[[IngestOutcome], None] | None = None,
) -> list[IngestOutcome]:
    """Materialize `assets` for these existing partitions, `per_run` consecutive ones per run."""
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    selection = [dg.AssetKey(a) for a in assets]
    outcomes: dict[str, IngestOutcome] = {}
    order = instance.get_dynamic_partitions(SESSIONS)
    # A session id names its partition too, whatever the partition's key.
    by_id, held = keys_by_session(order), set(order)
    keys = [k if k in held else by_id.get(session_id_of(k), k) for k in keys]
    for batch in batches(keys, order, per_run):
        results = _run(job, batch, instance, selection, trigger, settings)
        if len(batch) > 1:
            # A session the run lost is tried on its own: its failure, seen alone, is its own.
            for key in [k for k in batch if results[k].status == "failed"]:
                results[key] = _run(job, [key], instance, selection, trigger, settings)[key]
        for key in batch:
            outcomes[key] = results[key]
            if on_outcome is not None:
                on_outcome(results[key])
    return [outcomes[k] for k in keys if k in outcomes]


REEMBED_STAGES = ("chunk_embeddings", "memory")


def backfill(
    settings: Settings,
    *,
    project: str | None = None,
    since: datetime | None = None,
    reembed: bool = False,
    per_run: int = SESSIONS_PER_RUN,
    instance: dg.DagsterInstance | None = None,
    on_start: Callable[[int], None] | None = None,
    on_outcome: Callable[[IngestOutcome], None] | None = None,
) -> list[IngestOutcome]:
    """Run the sessions the store knows (of a project, active since a date, or all) again.

    Every stage (a digest whose input and digester are unchanged is reused), or with `reembed`
    only the vectors and the memory, from the staged chunks. The same job and batches as an
    ingest: what a backfill from the UI over the same partitions would do.
    """
    # One store for the whole backfill: the runs' resources share it (`shared_store`).
    with shared_store(settings) as store:
        # A re-embed starts from the staged chunks: only remembered sessions have them.
        ledger = store.ledger
        keys = ledger.backfill_sessions(project, since, remembered_only=reembed)
        if on_start is not None:
            on_start(len(keys))
        skipped = _skipped(ledger, keys, on_outcome)
        if not keys:
            return skipped
        with _instance_for(settings, instance) as instance:
            partitions = keys_for_ids(instance, store.memories, store.ledger, keys)
            return skipped + run_partitions(
                partitions,
                settings,
                instance,
                per_run=per_run,
                assets=REEMBED_STAGES if reembed else STAGES,
                trigger="cli-backfill",
                on_outcome=on_outcome,
            )


def _skipped(
    ledger: Ledger, keys: list[str], on_outcome: Callable[[IngestOutcome], None] | None
) -> list[IngestOutcome]:
    """The sessions of `keys` on the skip list, taken out of `keys`, each told `on_outcome`."""
    skips = ledger.skip_list()
    skipped: list[IngestOutcome] = []
    if skips.session_ids or skips.before is not None:
        for key in list(keys):
            files = ledger.session_source(key)
            reason = skips.reason(key, last_active(files) if files else None)
            if reason:
                keys.remove(key)
                skipped.append(IngestOutcome(key, "skipped", reason, 0, 0.0))
                if on_outcome is not None:
                    on_outcome(skipped[-1])
    return skipped


def batches(keys: Sequence[str], order: Sequence[str], per_run: int) -> list[list[str]]:
    """The keys cut into runs of at most `per_run` partitions consecutive in `order`.

    A run covers a range of the dynamic partitions (in the order they were added), so a batch
    never spans a partition that is not asked for.
    """
    position = {key: i for i, key in enumerate(order)}
    wanted = sorted({k for k in keys if k in position}, key=position.__getitem__)
    out: list[list[str]] = []
    for key in wanted:
        last = out[-1] if out else None
        if last and len(last) < max(1, per_run) and position[last[-1]] + 1 == position[key]:
            last.append(key)
        else:
            out.append([key])
    return out


@contextmanager
def _stops_kept() -> Iterator[Callable[[], bool]]:
    """Around a run: SIGTERM's handler given back after it, and whether a stop came during it.

    Dagster maps SIGTERM to SIGINT's handler when a run ends: in a process started in the
    background by a script (`librarian ingest &`, nohup), where SIGINT is ignored, SIGTERM was
    then ignored too, by this process and every process it started afterwards (found by the test
    suite run that way).

    And Dagster raises a stop (SIGINT, SIGTERM) during a run in whatever code is running: raised
    inside a garbage collector's callback, it is printed and dropped ("Exception ignored in"),
    and the run goes on to its end (found by the test suite too). `signal.set_wakeup_fd` is told
    of every signal, whichever handler takes it: the function yielded says whether one came. The
    dropped stop is kept from the terminal too (`sys.unraisablehook`): it is not an error, and
    the user is told "interrupted" once the run ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    before = signal.getsignal(signal.SIGTERM)
    print_unraisable = sys.unraisablehook

    def drop_stops(unraisable: "sys.UnraisableHookArgs") -> None:
        if not issubclass(
            unraisable.exc_type, (KeyboardInterrupt, dg.DagsterExecutionInterruptedError)
        ):
            print_unraisable(unraisable)

    heard, told = socket.socketpair()
    heard.setblocking(False)
    told.setblocking(False)
    previous = signal.set_wakeup_fd(told.fileno(), warn_on_full_buffer=False)

    def stop_came() -> bool:
        try:
            return any(n in (signal.SIGINT, signal.SIGTERM) for n in heard.recv(4096))
        except BlockingIOError:
            return False

    sys.unraisablehook = drop_stops
    try:
        yield stop_came
    finally:
        sys.unraisablehook = print_unraisable
        signal.set_wakeup_fd(previous)
        heard.close()
        told.close()
        if before is not None:  # None: set outside Python, nothing we could put back
            signal.signal(signal.SIGTERM, before)


def _run(
    job: dg.JobDefinition,
    batch: list[str],
    instance: dg.DagsterInstance,
    selection: list[dg.AssetKey],
    trigger: str,
    settings: Settings,
) -> dict[str, IngestOutcome]:
    started = time.perf_counter()
    tags = {"librarian/trigger": trigger, **in_process_run_tags()}
    if len(batch) > 1:
        tags |= {RANGE_START_TAG: batch[0], RANGE_END_TAG: batch[-1]}
    try:
        with _stops_kept() as stop_came, partitions_read_once(instance):
            result = job.execute_in_process(
                partition_key=batch[0] if len(batch) == 1 else None,
                instance=instance,
                raise_on_error=False,
                asset_selection=selection,
                # The run's events are in the Dagster UI; the terminal gets a line per session.
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                tags=tags,
            )
            stopped = stop_came()
    except Exception as exc:
        # The database went away during the run: Dagster's own storage (on the same server)
        # cannot record it, so the run raises instead of failing. No later session can run
        # either; the whole ingest stops with one line naming the database.
        lost = _connection_error(exc)
        if lost is None:
            raise
        raise unreachable(settings, lost) from None
    share = (time.perf_counter() - started) / len(batch)
    if stopped or (not result.success and _interrupted(result)):
        # Dagster turns SIGTERM or Ctrl-C during a run into this run's failure; the user asked
        # the whole ingest to stop, not to skip to the next session.
        raise KeyboardInterrupt
    by_stage: dict[str, dict] = {stage: {} for stage in STAGES}
    # By asset, not by step: the `transcript` step materializes `redacted_session` too.
    for step in STAGES:
        for m in result.asset_materializations_for_node(step):
            by_stage.setdefault(m.asset_key.to_user_string(), {})[m.partition] = m.metadata
    deferred = {
        seen.partition: seen.metadata["deferred"].value
        for seen in result.asset_observations_for_node("session_digest")
        if "deferred" in seen.metadata
    }
    run_failure = "" if result.success else _failure(result)
    return {key: _outcome(key, by_stage, deferred, run_failure, share) for key in batch}


def _outcome(
    key: str, by_stage: dict[str, dict], deferred: dict, run_failure: str, seconds: float
) -> IngestOutcome:
    sid = session_id_of(key)
    stored = by_stage["memory"].get(key)
    if stored is not None and "chunks" in stored:
        chunks = stored["chunks"].value
        return IngestOutcome(
            sid,
            "ingested",
            str(stored["summary"].value),
            chunks if isinstance(chunks, int) else 0,
            seconds,
        )
    for stage in STAGES:
        error = (by_stage[stage].get(key) or {}).get("error")
        if error is not None:
            return IngestOutcome(sid, "failed", f"{stage}: {error.value}", 0, seconds)
    if key in deferred:
        return IngestOutcome(sid, "deferred", str(deferred[key]), 0, seconds)
    parsed = by_stage["transcript"].get(key) or {}
    reason = parsed.get("skip_reason")
    if reason is not None and reason.value:
        return IngestOutcome(sid, "skipped", str(reason.value), 0, seconds)
    if run_failure:
        return IngestOutcome(sid, "failed", run_failure, 0, seconds)
    if stored is not None:  # a stage after transcript only (--reembed): the run succeeded
        return IngestOutcome(sid, "ingested", "", 0, seconds)
    return IngestOutcome(sid, "failed", "not stored: a blocking check failed", 0, seconds)


def _connection_error(exc: BaseException) -> BaseException | None:
    """The driver's "cannot talk to the server" error behind `exc`, if that is what it is."""
    import psycopg
    import sqlalchemy.exc

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.OperationalError):
            return seen.orig  # psycopg2's own error: its message without SQLAlchemy's framing
        if isinstance(seen, psycopg.OperationalError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _interrupted(result: dg.ExecuteInProcessResult) -> bool:
    return any(interrupted(event) for event in result.all_events)


def _failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        failure = step_failure(event)
        # A dg.Failure's own description says why, even after retries ("Exceeded max_retries").
        if failure and failure.description:
            return f"{event.step_key}: {failure.description}"
        if failure and failure.cause_message is not None:
            # The innermost cause says why; the wrappers around it say where Dagster caught it.
            message = failure.cause_message.strip().splitlines()
            return f"{event.step_key}: {message[-1] if message else 'failed'}"
    return "run failed"
