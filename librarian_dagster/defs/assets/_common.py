"""Small pieces the stage assets share."""

import dagster as dg

from librarian_dagster.core.staging import Staging, session_from_json
from librarian_dagster.core.store import Store
from librarian_dagster.core.transcripts import Session, SessionFiles

GROUP = "sessions"

# Stage names in the staging area, one per asset that hands data to the next.
REDACTED = "redacted_session"
DIGEST = "session_digest"
CHUNKS = "digest_chunks"
EMBEDDINGS = "chunk_embeddings"


def source_files(store: Store, session_id: str) -> SessionFiles:
    files = store.session_source(session_id)
    if files is None:
        raise dg.Failure(
            f"no transcript recorded for session {session_id}: the mirror sensor or "
            "`librarian ingest PATH` records where a session's files are before its first run"
        )
    return files


def staged_session(staging: Staging, session_id: str) -> Session:
    return session_from_json(staging.read(REDACTED, session_id))


def skipped(reason: str, **metadata) -> dg.MaterializeResult:
    """A stage that has nothing to do for this session says so, and why, in its metadata."""
    return dg.MaterializeResult(metadata={"skipped": reason, **metadata})


def stage_skip(staging: Staging, stage: str, key: str, reason: str) -> dg.MaterializeResult:
    """Stage a skip for the next stage to read, and report it."""
    staging.write(stage, key, {"skipped": reason})
    return skipped(reason)


def pass_skip_on(
    staging: Staging, stage: str | None, key: str, upstream: dict
) -> dg.MaterializeResult | None:
    """If upstream skipped this session, stage the skip for the next stage and report it."""
    if "skipped" not in upstream:
        return None
    if stage is None:
        return skipped(upstream["skipped"])
    return stage_skip(staging, stage, key, upstream["skipped"])
