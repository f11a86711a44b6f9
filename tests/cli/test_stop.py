"""Stopping `librarian mcp` and `librarian ingest` with SIGTERM or Ctrl-C (SIGINT), as a process
manager or a user does, also while they are busy: the process exits, the embedded PostgreSQL it
held stops, the holders file (decision 0008) lists nobody, and the next start is clean.

`librarian up` is covered in test_up.py. The time each stop took is printed (`-s` shows it); the
bounds below are generous because the test machines are shared, the 10 s budget is the code's
(run.py's stop grace).
"""

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
import pytest

from tests.conftest import TRANSCRIPTS
from tests.helpers import free_port

LIBRARIAN = [sys.executable, "-m", "librarian_dagster.cli.main"]
BOUND_S = 60  # far above the 10 s the code allows itself; only a hang fails it


@pytest.fixture
def home(fresh_pgdata):
    # Not under pytest's tmp_path: as root the server runs as user `pgserver` (see conftest.py).
    root = Path(tempfile.mkdtemp(prefix="librarian-test-stop-"))
    root.chmod(0o755)
    fresh_pgdata(root / "home")
    yield root / "home"
    for proc in _embedded_servers(root):
        proc.kill()
    shutil.rmtree(root, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    return {**env, "LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(home.parent / "mirror")}


def _embedded_servers(folder: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and "postgres" in cmdline[0] and str(folder) in " ".join(cmdline):
            found.append(proc)
    return found


def _holders(home: Path) -> list:
    return json.loads((home / "database-holders.json").read_text(encoding="utf-8"))


def _start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*LIBRARIAN, *args],
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as a terminal or a service manager starts it: its own group
    )


def _wait_for_http(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer")


def _stop(proc: subprocess.Popen, signum: int, what: str) -> tuple[int, str]:
    tree = psutil.Process(proc.pid).children(recursive=True)
    started = time.monotonic()
    proc.send_signal(signum)
    try:
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == [], [p.cmdline() for p in alive]
    print(f"{what}: {signal.Signals(signum).name} to exit {time.monotonic() - started:.1f} s")
    return proc.returncode, stderr


def _assert_clean(home: Path) -> None:
    """Nobody holds the server and it is not running."""
    deadline = time.monotonic() + 15  # the last holder stops it as it exits: allow the stop
    while _embedded_servers(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _embedded_servers(home) == []
    assert _holders(home) == []


def _next_start_is_clean(home: Path) -> None:
    done = subprocess.run(
        [*LIBRARIAN, "status"], env=_env(home), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "sessions:" in done.stdout
    _assert_clean(home)


def _hold_a_stream(url: str) -> threading.Event:
    """An SSE client that stays connected, as Claude Code's is, until the server goes."""
    opened = threading.Event()

    def listen():
        try:
            with httpx.stream("GET", url, timeout=None) as response:
                opened.set()
                for _ in response.iter_bytes():
                    pass
        except httpx.HTTPError:
            pass

    threading.Thread(target=listen, daemon=True).start()
    assert opened.wait(60), "the SSE stream did not open"
    return opened


ABORTED_AT_EXIT = "terminate called without an active exception"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_mcp_over_http_stops_with_a_client_connected(home, signum):
    port = free_port()
    proc = _start(home, "mcp", "--port", str(port))
    _wait_for_http(f"http://127.0.0.1:{port}/mcp", proc)
    assert _embedded_servers(home) and _holders(home) != []
    _hold_a_stream(f"http://127.0.0.1:{port}/sse")
    code, stderr = _stop(proc, signum, "librarian mcp")
    if code == -signal.SIGABRT and ABORTED_AT_EXIT in stderr:
        # A known fault, not yet mended (issue 42's stop): on a loaded machine (the suite's
        # four workers on two cores) ONNX Runtime aborts the process as it exits, after the
        # server has stopped. It is older than the other agents' readers (the code of 30b74fb:
        # one stop in three with three of these tests at once). What it leaves behind must
        # still be cleaned up by the next start.
        _next_start_is_clean(home)
        return
    assert code in (0, 130, 128 + signum), stderr
    # (uvicorn logs the SSE stream it cancels at shutdown with a traceback: its log, not ours.)
    _assert_clean(home)
    _next_start_is_clean(home)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_ingest_stopped_in_the_middle_of_a_run_leaves_nothing_and_a_retry_completes(home, signum):
    sessions = [
        str(TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl"),
        str(TRANSCRIPTS / "daaain__claude-code-log" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"),
    ]
    proc = _start(home, "ingest", *sessions)
    # In the middle of the run: its first stage has staged its output, the later ones have not.
    staging = home / "staging"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if staging.is_dir() and any(p.is_file() for p in staging.rglob("*.json")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "ingest finished before it could be stopped"
    code, stderr = _stop(proc, signum, "librarian ingest")
    # The whole ingest stops: not just the session being run, with the next one started after.
    assert code == 130, stderr
    assert stderr.rstrip().endswith("librarian ingest: interrupted")
    assert "Traceback" not in stderr
    _assert_clean(home)
    retry = subprocess.run(
        [*LIBRARIAN, "ingest", *sessions],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert retry.returncode == 0, retry.stderr
    assert "2 ingested, 0 skipped, 0 deferred, 0 failed" in retry.stdout
    _assert_clean(home)


def test_a_stop_the_handler_that_took_it_dropped_is_still_heard():
    """Dagster raises a stop during a run in whatever code runs; raised inside a garbage
    collector's callback, it was dropped and the ingest went on (ingest._stops_kept)."""
    from librarian_dagster.ingest import _stops_kept

    own = signal.getsignal(signal.SIGINT)
    with _stops_kept() as stop_came:
        assert not stop_came()
        signal.signal(signal.SIGINT, lambda *_: None)  # a handler whose raise went nowhere
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs at the next bytecode
        finally:
            signal.signal(signal.SIGINT, own)
        assert stop_came()
        assert not stop_came()  # told once


def test_a_stop_dropped_in_a_collectors_callback_prints_no_traceback(monkeypatch):
    """The stop dropped that way was printed as "Exception ignored in ... Traceback" before
    "librarian ingest: interrupted" (seen once in the suite); another dropped error still is."""
    import dagster as dg

    from librarian_dagster.ingest import _stops_kept

    printed: list[type[BaseException]] = []  # what reached Python's hook, which prints
    monkeypatch.setattr(sys, "unraisablehook", lambda raised: printed.append(raised.exc_type))

    class RaisesWhenCollected:
        def __init__(self, error: BaseException):
            self.error = error

        def __del__(self):
            raise self.error

    with _stops_kept():
        RaisesWhenCollected(dg.DagsterExecutionInterruptedError())
        RaisesWhenCollected(KeyboardInterrupt())
        RaisesWhenCollected(ValueError("a bug of ours"))
    RaisesWhenCollected(KeyboardInterrupt())  # after the run: Python's own hook again
    assert printed == [ValueError, KeyboardInterrupt]
