"""LIBRARIAN_HOME on a disk that is full, or that turns read-only, while runs stage their outputs.

Real filesystems (a small tmpfs, full to the last byte or remounted read-only), not a patched
`write`: the session fails with one line saying why, no staged file is left half written, the
memory already stored stays whole, and the next run, once there is room again, completes.
"""

import json
import subprocess
from pathlib import Path

import psycopg

from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import IngestOutcome, ingest_sessions, open_instance
from tests.conftest import TRANSCRIPTS
from tests.helpers import append_prompt, fill, make_settings, rows_per_session, tmpfs

SESSION = TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl"
SESSION_ID = "67a8478e-78dc-44ab-82ea-f65c8ead85f6"


def _staged_whole(home: Path) -> list[str]:
    """The staged files, each of which must be a whole JSON document (no temporary left)."""
    staged = sorted(p for p in (home / "staging").rglob("*") if p.is_file())
    assert [p.name for p in staged if not p.name.endswith(".json")] == []
    for path in staged:
        json.loads(path.read_bytes())
    return [str(p.relative_to(home)) for p in staged]


def _one_line_failure(outcome: IngestOutcome, reason: str) -> None:
    assert outcome.status == "failed", outcome
    assert "\n" not in outcome.detail and reason in outcome.detail, outcome.detail


def test_a_full_disk_while_staging_fails_in_one_line_and_the_next_run_heals(tmp_path, database_url):
    settings = make_settings(tmp_path, database_url)
    with tmpfs(settings.home, size="4m"):
        instance = open_instance(settings)
        sessions = session_files_for([SESSION])
        filler = fill(settings.home)

        (failed,) = ingest_sessions(sessions, settings, instance)
        _one_line_failure(failed, "No space left on device")
        _staged_whole(settings.home)
        rows = rows_per_session(database_url)
        assert rows["memories"] == {} and rows["indexed_chunks"] == {}

        filler.unlink()
        (healed,) = ingest_sessions(sessions, settings, instance)
        dispose_instance(instance)
        assert healed.status == "ingested", healed
        assert _staged_whole(settings.home)
        rows = rows_per_session(database_url)
        assert rows["memories"] == {SESSION_ID: 1}
        assert rows["indexed_chunks"] == {SESSION_ID: healed.chunks}
        assert rows["session_sources"] == {SESSION_ID: 1}


def test_a_home_turned_read_only_keeps_the_stored_memory_whole_and_heals(tmp_path, database_url):
    settings = make_settings(tmp_path, database_url)
    transcript = tmp_path / "mirror" / "-work-app" / SESSION.name
    transcript.parent.mkdir(parents=True)
    transcript.write_bytes(SESSION.read_bytes())
    with tmpfs(settings.home, size="8m"):
        instance = open_instance(settings)
        (first,) = ingest_sessions(session_files_for([transcript]), settings, instance)
        assert first.status == "ingested", first
        before = _staged_whole(settings.home)

        # The session grows (resumed), and meanwhile the home cannot be written.
        append_prompt(transcript, SESSION_ID, "now also explain the quartz ratio", "u-resumed")
        subprocess.run(["mount", "-o", "remount,ro", str(settings.home)], check=True)
        try:
            (failed,) = ingest_sessions(session_files_for([transcript]), settings, instance)
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(settings.home)], check=True)
        _one_line_failure(failed, "Read-only file system")
        assert _staged_whole(settings.home) == before
        rows = rows_per_session(database_url)
        assert rows["memories"] == {SESSION_ID: 1}
        assert rows["indexed_chunks"] == {SESSION_ID: first.chunks}  # the old memory, whole

        (healed,) = ingest_sessions(session_files_for([transcript]), settings, instance)
        dispose_instance(instance)
        assert healed.status == "ingested", healed
        rows = rows_per_session(database_url)
        assert rows["memories"] == {SESSION_ID: 1}
        assert rows["indexed_chunks"] == {SESSION_ID: healed.chunks}
        with psycopg.connect(database_url) as conn:
            found = conn.execute(
                "SELECT count(*) FROM indexed_chunks WHERE text LIKE '%quartz ratio%'"
            ).fetchone()
        assert found and found[0] > 0
