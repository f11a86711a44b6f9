"""The embedded server's lifetime: it runs while any process holds it, and no longer.

Each holder here is a real process that joins the server through `database_url`, as the CLI, the
MCP server and Dagster's processes do, and leaves the way those do: by exiting, by SIGTERM, or
killed outright.
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

from librarian_dagster.core.settings import Settings

# Joins the embedded server, prints its URL, then holds it until stdin closes.
HOLDER = """
import sys
from librarian_dagster.core.store.database import database_url
from librarian_dagster.core.settings import Settings
print(database_url(Settings.from_env()), flush=True)
sys.stdin.read()
"""

_holders: list[subprocess.Popen] = []


@pytest.fixture(scope="module")
def shared_home():
    # One home for the module. Not under pytest's tmp_path: as root the server
    # runs as user `pgserver`, which must be able to reach the folder (see conftest.py).
    root = Path(tempfile.mkdtemp(prefix="librarian-test-holders-"))
    root.chmod(0o755)
    yield root / "home"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def home(shared_home, fresh_pgdata):
    """The shared home; whatever a test leaves running is killed, so the next starts clean."""
    if not (shared_home / "pgdata").exists():
        fresh_pgdata(shared_home)
    yield shared_home
    for proc in _holders:
        if proc.poll() is None:
            proc.kill()
    _holders.clear()
    for proc in _servers(shared_home):
        proc.kill()


def _servers(folder: Path) -> list[psutil.Process]:
    """The PostgreSQL processes whose command line names a folder under `folder`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with_folder = str(folder) in " ".join(proc.info["cmdline"] or [])
        if with_folder and proc.pid != os.getpid():
            found.append(proc)
    return [p for p in found if "postgres" in p.info["cmdline"][0]]


def _hold(home: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "LIBRARIAN_HOME": str(home)}
    env.pop("LIBRARIAN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    _holders.append(proc)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url, "the holder did not join the server"
    return proc, url


def _leave(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    # Long enough for pgserver's machine-wide lock, which other servers' starts may hold.
    assert proc.wait(timeout=120) == 0


def _running(home: Path) -> bool:
    # pg_ctl stop waits for the server to exit, so its processes are gone when the holder is.
    deadline = time.monotonic() + 15
    while _servers(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    return bool(_servers(home))


def _answers(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def test_the_server_runs_until_its_last_holder_leaves(home):
    first, url = _hold(home)
    second, _ = _hold(home)
    _leave(first)
    assert _answers(url), "the second holder still needs the server"
    _leave(second)
    assert not _running(home)


def test_a_holder_killed_outright_does_not_keep_the_server_up(home):
    # Dagster stops its code servers and run workers with signals; none of them runs exit hooks.
    killed, _ = _hold(home)
    survivor, _ = _hold(home)
    killed.kill()
    killed.wait(timeout=10)
    _leave(survivor)
    assert not _running(home)


def test_sigterm_leaves_like_a_normal_exit(home):
    proc, _ = _hold(home)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    assert not _running(home)


def test_a_process_may_hold_the_server_again_after_it_stopped(home):
    proc, _ = _hold(home)
    _leave(proc)
    assert not _running(home)
    proc, url = _hold(home)
    assert _answers(url)
    _leave(proc)
    assert not _running(home)


RELEASE_THEN_REMOVE = """
import shutil, sys
from librarian_dagster.core.store.database import database_url, release_embedded_server
from librarian_dagster.core.settings import Settings
settings = Settings.from_env()
database_url(settings)
release_embedded_server(settings)
shutil.rmtree(settings.home)
"""


def test_a_process_that_releases_the_server_may_remove_its_home(home):
    # As the benchmarks do with their temporary homes: the server stops, the exit is clean.
    env = {**os.environ, "LIBRARIAN_HOME": str(home)}
    env.pop("LIBRARIAN_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", RELEASE_THEN_REMOVE], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not _running(home)


def test_database_url_names_the_external_server_without_starting_one(tmp_path):
    home = tmp_path / "home"
    url = "postgresql://someone:secret@db.example:5432/memories"
    settings = Settings.from_env({"LIBRARIAN_HOME": str(home), "LIBRARIAN_DATABASE_URL": url})
    from librarian_dagster.core.store.database import database_url, describe_location

    assert database_url(settings) == url
    assert (
        describe_location(settings) == "external: postgresql://someone:***@db.example:5432/memories"
    )
    assert not home.exists()


COMMITS = """
import psycopg
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import (
    dagster_storage_url, database_url, release_embedded_server,
)
settings = Settings.from_env()
dagster_storage_url(settings)
with psycopg.connect(database_url(settings)) as conn:
    for name, config in conn.execute(
        "SELECT d.datname, s.setconfig FROM pg_db_role_setting s"
        " JOIN pg_database d ON d.oid = s.setdatabase ORDER BY 1"
    ):
        print(name, *config)
release_embedded_server(settings)
"""


def test_only_dagsters_own_database_commits_before_the_disk_has_it(home):
    # Set on the database, not the server (the tests' servers run without fsync altogether).
    env = {**os.environ, "LIBRARIAN_HOME": str(home)}
    env.pop("LIBRARIAN_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", COMMITS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["dagster synchronous_commit=off"]
