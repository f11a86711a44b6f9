"""A transcript read while Claude Code is still writing it: its last line is half written.

What the parser does with it (`iter_records` in core/capture/records.py), and goes on doing: a
last line that is not a whole record is counted as malformed, with the reason "incomplete last line
(truncated, or the file is still being written)", and skipped. It cannot know whether the line
will grow: the sensor's settle time keeps it from reading a live file, and a crash can leave a
cut line for good. So the half line is never digested, embedded or stored; once the line is
whole the file's fingerprint has changed, the next run replaces the memory, and the session is
stored in full, as a clean ingest of the finished file stores it.
"""

import uuid
from typing import LiteralString

import dagster as dg
import psycopg
from psycopg import sql

from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.partitions import SESSIONS, session_id_of
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import make_settings, transcript_line

SESSION = "88888888-8888-8888-8888-888888888888"


WHOLE = [
    transcript_line(SESSION, "user", "why does the upload form reject large images", "u1"),
    transcript_line(
        SESSION, "assistant", "the nginx body size limit is 1 MB; raised it to 20 MB", "a1"
    ),
    transcript_line(
        SESSION, "user", "now make the zeppelin banner load lazily on the landing page", "u2"
    ),
    transcript_line(SESSION, "assistant", "the zeppelin banner image is now loading=lazy", "a2"),
]
HALF = len(WHOLE[2]) - 20  # the third line cut after "zeppelin", before its closing braces


def _counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:

        def count(query: LiteralString) -> int:
            row = conn.execute(query).fetchone()
            return int(row[0]) if row else 0

        return {
            "memories": count("SELECT count(*) FROM memories"),
            "chunks": count("SELECT count(*) FROM indexed_chunks"),
            "zeppelin": count("SELECT count(*) FROM indexed_chunks WHERE text ILIKE '%zeppelin%'"),
            "sources": count("SELECT count(*) FROM session_sources"),
        }


def _malformed(instance: dg.DagsterInstance) -> int:
    [key] = [k for k in instance.get_dynamic_partitions(SESSIONS) if session_id_of(k) == SESSION]
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("transcript"), asset_partitions=[key]),
        limit=1,
    ).records
    value = record.asset_materialization.metadata["malformed_lines"].value
    assert isinstance(value, int)
    return value


def _ingest(tmp_path, url, transcript) -> tuple[str, int]:
    settings = make_settings(tmp_path, url, transcript.parent.parent)
    instance = open_instance(settings)
    (outcome,) = ingest_sessions(session_files_for([transcript]), settings, instance)
    malformed = _malformed(instance)
    dispose_instance(instance)
    return outcome.status, malformed


def test_a_half_written_last_line_is_never_stored_and_the_finished_session_is(
    tmp_path, database_url, pg_server
):
    transcript = tmp_path / "mirror" / "-work-app" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(b"".join(WHOLE[:2]) + WHOLE[2][:HALF])
    assert b"zeppelin" in WHOLE[2][:HALF] and not WHOLE[2][:HALF].endswith(b"\n")

    assert _ingest(tmp_path, database_url, transcript) == ("ingested", 1)
    live = _counts(database_url)
    assert live["memories"] == 1 and live["chunks"] > 0
    assert live["zeppelin"] == 0  # nothing of the half line was digested or embedded

    # Claude Code finishes the line and writes the next one.
    with transcript.open("ab") as out:
        out.write(WHOLE[2][HALF:] + WHOLE[3])
    assert _ingest(tmp_path, database_url, transcript) == ("ingested", 0)
    finished = _counts(database_url)

    # The same finished file, ingested once into a database of its own.
    clean_db = f"live_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(clean_db)))
    clean_url = pg_server.get_uri(clean_db)
    assert _ingest(tmp_path / "clean", clean_url, transcript) == ("ingested", 0)
    clean = _counts(clean_url)

    assert finished == clean
    assert finished["memories"] == 1 and finished["sources"] == 1 and finished["zeppelin"] > 0
