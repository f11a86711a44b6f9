"""Small pieces the stage assets share."""

import dagster as dg

from librarian_dagster.core.store import Store
from librarian_dagster.core.transcripts import SessionFiles

GROUP = "sessions"


def source_files(store: Store, session_id: str) -> SessionFiles:
    files = store.session_source(session_id)
    if files is None:
        raise dg.Failure(
            f"no transcript recorded for session {session_id}: the mirror sensor or "
            "`librarian ingest PATH` records where a session's files are before its first run"
        )
    return files
