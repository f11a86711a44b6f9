"""`librarian ingest`: run the `ingest_session` job now, in this process, one run per session.

The same job the mirror sensor and a backfill from the UI start, with the same resources. The runs
land in the Dagster instance the UI shows (DAGSTER_HOME under LIBRARIAN_HOME), so an ingest from
the command line has the same lineage, metadata and checks as a sensor run.
"""

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import dagster as dg

from librarian_dagster.core.dagster_home import prepare_dagster_home
from librarian_dagster.core.database import unreachable
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import open_store
from librarian_dagster.core.transcripts import SessionFiles, session_files_for
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import SESSIONS


@dataclass(frozen=True)
class IngestOutcome:
    session_id: str
    status: Literal["ingested", "skipped", "deferred", "failed"]
    detail: str
    chunks: int
    seconds: float


def open_instance(settings: Settings) -> dg.DagsterInstance:
    env = prepare_dagster_home(settings)
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    return dg.DagsterInstance.from_config(env["DAGSTER_HOME"])


def ingest_paths(paths: Iterable[Path], settings: Settings) -> list[IngestOutcome]:
    sessions = session_files_for(paths)
    return ingest_sessions(sessions, settings) if sessions else []


def ingest_sessions(
    sessions: list[SessionFiles], settings: Settings, instance: dg.DagsterInstance | None = None
) -> list[IngestOutcome]:
    # Where each session's files are, as the sensor records it: the run finds them by key alone.
    open_store(settings).record_sources([(s, s.fingerprint()) for s in sessions])
    # dagster-postgres warns of each retry of a lost connection on the root logger, several
    # lines each; a database that stays away is reported once, as one line (see _ingest_one).
    logging.getLogger().addFilter(_not_a_connection_retry)
    instance = instance or open_instance(settings)
    instance.add_dynamic_partitions(SESSIONS, [s.session_id for s in sessions])
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    return [_ingest_one(job, s.session_id, instance, settings) for s in sessions]


def _ingest_one(
    job: dg.JobDefinition, session_id: str, instance: dg.DagsterInstance, settings: Settings
) -> IngestOutcome:
    started = time.perf_counter()
    try:
        result = job.execute_in_process(
            partition_key=session_id,
            instance=instance,
            raise_on_error=False,
            # The run's events are all in the Dagster UI; the terminal gets one line per session.
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            tags={"librarian/trigger": "cli-ingest"},
        )
    except Exception as exc:
        # The database went away during the run: Dagster's own storage (on the same server)
        # cannot record it, so the run raises instead of failing. No later session can run
        # either; the whole ingest stops with one line naming the database.
        lost = _connection_error(exc)
        if lost is None:
            raise
        raise unreachable(settings, lost) from None
    seconds = time.perf_counter() - started
    if not result.success and _interrupted(result):
        # Dagster turns SIGTERM or Ctrl-C during a run into this run's failure; the user asked
        # the whole ingest to stop, not to skip to the next session.
        raise KeyboardInterrupt
    if not result.success:
        return IngestOutcome(session_id, "failed", _failure(result), 0, seconds)
    stored = result.asset_materializations_for_node("memory")
    if stored:
        metadata = stored[-1].metadata
        chunks = metadata["chunks"].value
        return IngestOutcome(
            session_id,
            "ingested",
            str(metadata["summary"].value),
            chunks if isinstance(chunks, int) else 0,
            seconds,
        )
    for seen in result.asset_observations_for_node("session_digest"):
        deferred = seen.metadata.get("deferred")
        if deferred is not None:
            return IngestOutcome(session_id, "deferred", str(deferred.value), 0, seconds)
    [parsed] = result.asset_materializations_for_node("transcript")
    reason = parsed.metadata["skip_reason"].value
    if reason:
        return IngestOutcome(session_id, "skipped", str(reason), 0, seconds)
    return IngestOutcome(session_id, "failed", "not stored: a blocking check failed", 0, seconds)


def _not_a_connection_retry(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Retrying failed database connection")


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
    for event in result.all_events:
        error = event.step_failure_data.error if event.is_step_failure else None
        if error is not None and error.cls_name == "DagsterExecutionInterruptedError":
            return True
        if event.is_run_failure and "interrupted" in (event.message or ""):
            return True
    return False


def _failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        # A dg.Failure's own description says why, even after retries ("Exceeded max_retries").
        if data and data.user_failure_data and data.user_failure_data.description:
            return f"{event.step_key}: {data.user_failure_data.description}"
        if data and data.error:
            # The innermost cause says why; the wrappers around it say where Dagster caught it.
            error = data.error
            while error.cause is not None:
                error = error.cause
            message = error.message.strip().splitlines()
            return f"{event.step_key}: {message[-1] if message else 'failed'}"
    return "run failed"
