"""`librarian ingest`: run the `ingest_session` job now, in this process, one run per session.

The same job the mirror sensor and a backfill from the UI start, with the same resources. The runs
land in the Dagster instance the UI shows (DAGSTER_HOME under LIBRARIAN_HOME), so an ingest from
the command line has the same lineage, metadata and checks as a sensor run.
"""

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import dagster as dg

from librarian_dagster.core.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import open_store
from librarian_dagster.core.transcripts import SessionFiles, session_files_for
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import SESSIONS


@dataclass(frozen=True)
class IngestOutcome:
    session_id: str
    status: Literal["ingested", "skipped", "failed"]
    detail: str
    chunks: int
    seconds: float


def open_instance(settings: Settings) -> dg.DagsterInstance:
    env = prepare_dagster_home(settings)
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    return dg.DagsterInstance.from_config(env["DAGSTER_HOME"])


def ingest_paths(paths: Iterable[Path], settings: Settings) -> list[IngestOutcome]:
    # Absolute, as the sensor sees the mirror: the fingerprint names the files' paths.
    sessions = session_files_for(Path(p).absolute() for p in paths)
    return ingest_sessions(sessions, settings) if sessions else []


def ingest_sessions(
    sessions: list[SessionFiles], settings: Settings, instance: dg.DagsterInstance | None = None
) -> list[IngestOutcome]:
    # Where each session's files are, as the sensor records it: the run finds them by key alone.
    open_store(settings).record_sources([(s, s.fingerprint()) for s in sessions])
    instance = instance or open_instance(settings)
    instance.add_dynamic_partitions(SESSIONS, [s.session_id for s in sessions])
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    return [_ingest_one(job, s.session_id, instance) for s in sessions]


def _ingest_one(
    job: dg.JobDefinition, session_id: str, instance: dg.DagsterInstance
) -> IngestOutcome:
    started = time.perf_counter()
    result = job.execute_in_process(
        partition_key=session_id,
        instance=instance,
        raise_on_error=False,
        # The run's events are all in the Dagster UI; the terminal gets one line per session.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        tags={"librarian/trigger": "cli-ingest"},
    )
    seconds = time.perf_counter() - started
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
    [parsed] = result.asset_materializations_for_node("transcript")
    reason = parsed.metadata["skip_reason"].value
    if reason:
        return IngestOutcome(session_id, "skipped", str(reason), 0, seconds)
    return IngestOutcome(session_id, "failed", "not stored: a blocking check failed", 0, seconds)


def _failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            message = event.step_failure_data.error.message.strip().splitlines()
            return f"{event.step_key}: {message[-1] if message else 'failed'}"
    return "run failed"
