"""Small pieces the stage assets share."""

import dagster as dg

from librarian_dagster.core.chunking import Chunk
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


def chunk_counts(chunks: list[Chunk]) -> dict[str, int | float]:
    """What a chunking stage reports: how many chunks, and how long they are on average."""
    return {
        "chunks": len(chunks),
        "mean_chars": round(sum(len(c.text) for c in chunks) / max(1, len(chunks)), 1),
    }
