"""`librarian up` as a user runs it: everything starts, SIGTERM stops every child and the DB."""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import psutil

from tests.helpers import free_port


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
         "--mcp-port", str(mcp_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(f"http://127.0.0.1:{mcp_port}/mcp", 300, proc)
        _wait_for(f"http://127.0.0.1:{ui_port}/server_info", 300, proc)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
        assert _descendants_and_servers(home), "the embedded PostgreSQL should be running"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # The code allows itself 5 s of grace, then kills (run.py); 90 s only catches a hang.
        assert proc.wait(timeout=90) == 0
        print(f"librarian up: SIGTERM to exit {time.monotonic() - started:.1f} s")
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
