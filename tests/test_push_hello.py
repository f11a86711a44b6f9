"""A pushing machine's heartbeat and its silence: the real `librarian push` (a process of its
own) says hello to a real recall server (real PostgreSQL) each round, even with nothing to push;
one that stops is alerted by name to a fake Telegram, once, and its return said once."""

import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import httpx
import psycopg
import pytest

from librarian_dagster.core.push.client import FORMAT_HEADER, HELLO_PATH, PushClient
from librarian_dagster.core.push.pusher import PushState, watch
from librarian_dagster.core.settings import Settings
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.resources import build_resources
from tests.conftest import AGENTS_AWAY
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram
from tests.test_push import ALICE_CLAUDE, PUSH, laptop, push, server  # noqa: F401

pytestmark = pytest.mark.process

HOUR = 3600.0


def heard(server) -> dict[tuple[str, str], datetime]:  # noqa: F811 (the imported fixture)
    """(person, machine) -> when the server last heard of it."""
    with psycopg.connect(server.settings.database_url) as conn:
        rows = conn.execute("SELECT person, machine, last_push FROM push_machines").fetchall()
    return {(person, machine): last for person, machine, last in rows}


def idle_laptop(root: Path) -> dict[str, str]:
    """A laptop whose agents' folders hold nothing to push."""
    return {
        **AGENTS_AWAY,
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "LIBRARIAN_HOME": str(root / "home"),
        "LIBRARIAN_MIRROR": str(root / "claude"),
    }


def test_a_machine_with_nothing_to_push_is_known_by_its_hello(server, tmp_path):  # noqa: F811
    idle = idle_laptop(tmp_path / "alice")
    refused = push(idle, server.url, "lbr_not-a-token")
    assert refused.returncode == 1 and "refused the token" in refused.stderr, refused.stderr
    assert heard(server) == {}

    said = push(idle, server.url, server.tokens["alice"])
    assert said.returncode == 0, said.stderr
    assert "0 pushed, 0 unchanged" in said.stderr
    assert list(heard(server)) == [("alice", "lap")]  # the token's person, the name it gave


def test_hello_is_guarded_as_push_is(server):  # noqa: F811
    url = server.url + HELLO_PATH

    def hello(body: object, token: str | None = server.tokens["alice"], **kwargs):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(url, json=body, headers=headers, timeout=10, **kwargs)

    assert hello({"format": 1, "machine": "lap"}, token=None).status_code == 401
    wrong = hello({"format": 2, "machine": "lap"})
    assert wrong.status_code == 400 and FORMAT_HEADER in wrong.json()["error"]
    assert hello({"format": 1, "machine": "../etc"}).status_code == 400
    assert hello({"format": 1, "machine": "lap", "person": "bob"}).status_code == 400
    plain = httpx.post(url, content=b"lap", timeout=10,
                       headers={"Authorization": f"Bearer {server.tokens['alice']}"})  # fmt: skip
    assert plain.status_code == 415
    assert heard(server) == {}

    ok = hello({"format": 1, "machine": "lap"})
    assert ok.status_code == 200 and ok.json() == {"person": "alice", "machine": "lap"}
    bob = hello({"format": 1, "machine": "lap"}, token=server.tokens["bob"])
    assert bob.json() == {"person": "bob", "machine": "lap"}
    assert sorted(heard(server)) == [("alice", "lap"), ("bob", "lap")]


def test_the_watch_says_hello_each_round_with_nothing_new(server, tmp_path):  # noqa: F811
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    process = subprocess.Popen(
        [*PUSH, server.url, "--machine", "lap", "--watch", "--interval", "0.2"],
        env={**alice, "LIBRARIAN_MCP_TOKEN": server.tokens["alice"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen: list[datetime] = []
        deadline = time.monotonic() + 60
        while len(set(seen)) < 4:  # the push's round, then three with nothing new
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, f"heard only at {seen}"
            if (last := heard(server).get(("alice", "lap"))) is not None:
                seen.append(last)
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr  # Ctrl-C ends the watch between two rounds
    assert stderr.count("pushed   ") == 1, stderr  # the one session, once
    assert "stopped" not in stderr, stderr


def test_a_hello_refused_stops_the_round_as_a_push_refused_does(server, tmp_path):  # noqa: F811
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    settings = Settings.from_env(alice)
    client = PushClient(server.url, "lbr_not-a-token", "lap")
    stops: list[str] = []
    try:
        state = PushState(tmp_path / "state.json")
        watch(settings, client, state, 0.01, lambda _done: None, stops.append, rounds=3)
    finally:
        client.close()
    [stop] = stops  # said once, not every round
    assert "refused the token" in stop
    assert heard(server) == {} and not (server.settings.uploads / "sessions").exists()


def _gap_tick(settings: Settings, instance, cursor: str | None):
    definitions = build_definitions(settings)
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=definitions,
        resources=build_resources(settings),
    ) as context:
        return definitions.resolve_sensor_def("capture_gap_alerts")(context)


def test_a_laptop_that_stops_pushing_is_alerted_once_and_its_return_said(
    server,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    assert push(alice, server.url, server.tokens["alice"]).returncode == 0
    with psycopg.connect(server.settings.database_url) as conn:  # a day and more goes by
        conn.execute(
            "UPDATE push_machines SET first_push = first_push - interval '30 hours', "
            "last_push = last_push - interval '26 hours'"
        )
    with fake_telegram() as telegram:
        for key, value in {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": CHAT_ID,
                           "LIBRARIAN_TELEGRAM_BASE_URL": telegram.url}.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        settings = Settings.from_env()
        first = _gap_tick(settings, server.instance, None)
        [alert] = telegram.texts
        again = _gap_tick(settings, server.instance, first.cursor)
        assert len(telegram.texts) == 1

        back = push(alice, server.url, server.tokens["alice"])  # nothing new: its hello alone
        assert back.returncode == 0 and "0 pushed, 0 unchanged" in back.stderr, back.stderr
        cleared = _gap_tick(settings, server.instance, again.cursor)
        _gap_tick(settings, server.instance, cleared.cursor)
    assert alert.startswith(
        "Librarian capture gap: alice's laptop `lap` has not pushed for 26 h (last at "
    )
    assert telegram.texts == [alert, "Librarian recovered: alice's laptop `lap` pushes again."]
    # The server's own agents' folders do not exist, and nobody copies into them: no alert.
    assert not any("folder" in text for text in telegram.texts)
