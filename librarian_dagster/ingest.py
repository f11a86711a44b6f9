"""`librarian ingest`: materialize sessions now, in this process, through the same assets.

The runs land in the same Dagster instance the UI shows (DAGSTER_HOME under LIBRARIAN_HOME), so
an ingest from the command line has the same lineage, metadata and checks as a sensor run.
"""

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from librarian_dagster.core.dagster_home import prepare_dagster_home
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.transcripts import SessionFiles, session_files_for
from librarian_dagster.defs.assets.chunk_embeddings import chunk_embeddings
from librarian_dagster.defs.assets.digest_chunks import digest_chunks
from librarian_dagster.defs.assets.memory import memory
from librarian_dagster.defs.assets.redacted_session import redacted_session
from librarian_dagster.defs.assets.session_digest import session_digest
from librarian_dagster.defs.assets.transcript import transcript
from librarian_dagster.defs.partitions import SESSIONS
from librarian_dagster.defs.resources import build_resources

SESSION_ASSETS = (
    transcript,
    redacted_session,
    session_digest,
    digest_chunks,
    chunk_embeddings,
    memory,
)


@dataclass(frozen=True)
class IngestOutcome:
    session_id: str
    status: str  # "ingested" | "skipped" | "failed"
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
    resources = build_resources(settings)
    store = resources["store"].get()  # type: ignore[attr-defined]
    store.record_sources([(s, s.fingerprint()) for s in sessions])
    instance = instance or open_instance(settings)
    instance.add_dynamic_partitions(SESSIONS, [s.session_id for s in sessions])
    return [_ingest_one(s.session_id, instance, resources) for s in sessions]


def _ingest_one(session_id: str, instance, resources) -> IngestOutcome:
    started = time.perf_counter()
    result = dg.materialize(
        SESSION_ASSETS,
        partition_key=session_id,
        instance=instance,
        resources=resources,
        raise_on_error=False,
        # The run's events are all in the Dagster UI; the terminal gets one line per session.
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        tags={"librarian/trigger": "cli-ingest"},
    )
    seconds = time.perf_counter() - started
    if not result.success:
        return IngestOutcome(session_id, "failed", _failure(result), 0, seconds)
    stored = result.asset_materializations_for_node("memory")
    metadata = stored[-1].metadata if stored else {}
    if "skipped" in metadata:
        return IngestOutcome(session_id, "skipped", str(metadata["skipped"].value), 0, seconds)
    if not stored:
        # A blocking check failed, so nothing downstream of it ran.
        return IngestOutcome(session_id, "failed", "leak check failed: not stored", 0, seconds)
    chunks = metadata["chunks"].value if "chunks" in metadata else 0
    return IngestOutcome(
        session_id,
        "ingested",
        str(metadata["summary"].value),
        chunks if isinstance(chunks, int) else 0,
        seconds,
    )


def _failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            message = event.step_failure_data.error.message.strip().splitlines()
            return f"{event.step_key}: {message[-1] if message else 'failed'}"
    return "run failed"
