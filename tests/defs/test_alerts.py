"""The alert sensors against a fake Telegram on 127.0.0.1, a real instance and a real store.

A failed run gives exactly one alert with its link; a capture gap one alert and, once the
session is ingested, one recovery; a machine that stopped pushing one alert by name and one when
it pushes again; a new digest one message; a Telegram outage loses no run.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture import uploads
from librarian_dagster.core.capture.agents import folders
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.capture.uploads import StagedFile
from librarian_dagster.core.service.alerts import folders_retired
from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.core.service.journal import Tail, journal_path
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import (
    dispose_instance,
    last_good_sensor_tick,
    sensor_known,
)
from librarian_dagster.dead_runs import STOPPED_TAG
from librarian_dagster.definitions import build_definitions
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.partitions import SESSIONS
from librarian_dagster.defs.resources import ClockResource, build_resources
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import age, write_transcript
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram

SESSION = "55555555-5555-4555-8555-555555555555"
HOUR = 3600.0


@pytest.fixture
def telegram():
    with fake_telegram() as fake:
        yield fake


@pytest.fixture
def env(tmp_path, database_url, telegram, monkeypatch):
    """Settings from the environment, as the code location reads them, pointing at the fake."""
    folder = tmp_path / "mirror" / "-work-app"
    values = {
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MIRROR": str(folder.parent),
        "LIBRARIAN_DATABASE_URL": database_url,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_CHAT_ID": CHAT_ID,
        "LIBRARIAN_TELEGRAM_BASE_URL": telegram.url,
        "LIBRARIAN_UI_URL": "http://dagster.test:3000",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env()
    instance = open_instance(settings)
    yield settings, instance, folder
    dispose_instance(instance)


def _tick(settings: Settings, instance, name: str, cursor: str | None, now: float | None = None):
    definitions = build_definitions(settings)
    resources = {**build_resources(settings), "clock": ClockResource(frozen_at=now)}
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=definitions, resources=resources
    ) as context:
        return definitions.resolve_sensor_def(name)(context)


def _fail_a_run(settings: Settings, instance, session=SESSION) -> dg.ExecuteInProcessResult:
    # A partition whose files were never recorded: the first stage fails, as it says.
    instance.add_dynamic_partitions(SESSIONS, [session])
    job = build_definitions(settings).resolve_job_def(INGEST_SESSION)
    result = job.execute_in_process(partition_key=session, instance=instance, raise_on_error=False)
    assert not result.success
    return result


def _alert_run_failure(settings: Settings, instance, result: dg.ExecuteInProcessResult) -> None:
    sensor = build_definitions(settings).resolve_sensor_def("run_failure_alerts")
    with dg.build_run_status_sensor_context(
        sensor_name="run_failure_alerts",
        dagster_event=result.get_run_failure_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        resources=build_resources(settings),
    ) as context:
        sensor(context.for_run_failure())


def test_a_failed_run_gives_exactly_one_alert_with_its_link(env, telegram):
    settings, instance, _folder = env
    result = _fail_a_run(settings, instance)
    _alert_run_failure(settings, instance, result)
    [message] = telegram.messages
    assert message["chat_id"] == CHAT_ID
    lines = message["text"].splitlines()
    assert lines[0] == f"Librarian run failed: ingest_session for session {SESSION}"
    assert lines[1].startswith(f"transcript: Failure: no transcript recorded for session {SESSION}")
    assert lines[2] == f"http://dagster.test:3000/runs/{result.run_id}"
    # And one line for whoever runs `librarian up` in a terminal.
    [said] = Tail(journal_path(settings.log_dir), start=0).read()
    assert said.kind == "failed" and said.text.startswith(f"{SESSION}: transcript: Failure: no ")
    assert said.text.endswith(f"(http://dagster.test:3000/runs/{result.run_id})")


def test_a_run_failed_by_the_stop_of_librarian_up_alerts_nothing(env, telegram):
    settings, instance, _folder = env
    result = _fail_a_run(settings, instance)
    instance.add_run_tags(result.run_id, {STOPPED_TAG: "true"})
    stopped = instance.get_run_by_id(result.run_id)
    sensor = build_definitions(settings).resolve_sensor_def("run_failure_alerts")
    with dg.build_run_status_sensor_context(
        sensor_name="run_failure_alerts", dagster_event=result.get_run_failure_event(),
        dagster_instance=instance, dagster_run=stopped, resources=build_resources(settings),
    ) as context:  # fmt: skip
        sensor(context.for_run_failure())
    assert telegram.messages == []
    assert Tail(journal_path(settings.log_dir), start=0).read() == []


def test_a_capture_gap_gives_one_alert_and_one_recovery(env, telegram):
    settings, instance, folder = env
    age(write_transcript(folder, SESSION, "Why is the cache cold?", "The TTL was 0."), 600)
    start = time.time()

    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    assert telegram.texts == []  # settled 8 minutes ago: not late yet
    late = _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 2 * HOUR)
    [alert] = telegram.texts
    assert alert.startswith("Librarian capture gap: 1 settled session(s) not ingested after ")
    assert f"{SESSION} (-work-app)" in alert and "after 60 min" in alert
    again = _tick(settings, instance, "capture_gap_alerts", late.cursor, start + 2.1 * HOUR)
    assert len(telegram.texts) == 1  # the same incident: no second alert

    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested"
    cleared = _tick(settings, instance, "capture_gap_alerts", again.cursor, start + 2.2 * HOUR)
    assert len(telegram.texts) == 2
    assert telegram.texts[1].startswith("Librarian recovered: every settled session")
    _tick(settings, instance, "capture_gap_alerts", cleared.cursor, start + 2.3 * HOUR)
    assert len(telegram.texts) == 2
    # The terminal of `librarian up` hears the opening and the clearing, once each.
    said = Tail(journal_path(settings.log_dir), start=0).read()
    assert [(e.kind, e.text) for e in said if e.kind == "alert"] == [
        ("alert", telegram.texts[0]), ("alert", telegram.texts[1])]  # fmt: skip


def test_a_session_with_nothing_to_remember_is_no_gap(env, telegram):
    settings, instance, folder = env
    folder.mkdir(parents=True)
    empty = folder / f"{SESSION}.jsonl"
    empty.write_text("", encoding="utf-8")
    age(empty, 600)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "skipped"
    start = time.time()
    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 3 * HOUR)
    assert telegram.texts == []


def test_quiet_folders_are_a_gap_and_zero_quiet_hours_turn_it_off(env, telegram, monkeypatch):
    settings, instance, folder = env
    age(write_transcript(folder, SESSION, "Which port?", "3201."), 600)
    ingest_sessions(session_files_for([folder]), settings, instance)
    start = time.time()
    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    quiet = _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 25 * HOUR)
    [alert] = telegram.texts
    assert "have not changed for 25 h" in alert and f"Claude Code's {folder.parent}" in alert
    age(write_transcript(folder, "66666666-6666-4666-8666-666666666666", "New?", "Yes."), 0)
    _tick(settings, instance, "capture_gap_alerts", quiet.cursor, time.time())
    assert telegram.texts[1] == "Librarian recovered: the agents' folders here are filling again."

    ingest_sessions(session_files_for([folder]), settings, instance)  # no ingest gap either
    monkeypatch.setenv("LIBRARIAN_QUIET_HOURS", "0")
    off = Settings.from_env()
    first = _tick(off, instance, "capture_gap_alerts", None, start)
    _tick(off, instance, "capture_gap_alerts", first.cursor, start + 300 * HOUR)
    assert len(telegram.texts) == 2


def test_a_new_digest_gives_one_message(env, telegram, monkeypatch):
    settings, instance, folder = env
    baseline = _tick(settings, instance, "digest_alerts", None)
    write_transcript(folder, SESSION, "Why does the cache test hang on CI?", "The lock was held.")
    files = session_files_for([folder])
    ingest_sessions(files, settings, instance)
    announced = _tick(settings, instance, "digest_alerts", baseline.cursor)
    [text] = telegram.texts
    with Store(settings.database_url or "") as store:
        memory = store.memories.memory_record(SESSION)
    assert memory is not None and memory.project == "app"  # from the session's cwd
    assert text == (
        f"New memory · app · importance {memory.importance}/5\n{memory.summary}\n"
        f"(session {SESSION})"
    )
    # The same session ingested again, unchanged: its digest is reused, nothing new to say.
    ingest_sessions(files, settings, instance)
    quiet = _tick(settings, instance, "digest_alerts", announced.cursor)
    assert len(telegram.texts) == 1 and quiet.cursor != announced.cursor

    monkeypatch.setenv("LIBRARIAN_NOTIFY_DIGESTS", "false")
    off = Settings.from_env()
    write_transcript(folder, SESSION, "Why does the cache test hang on CI?", "Fixed: timeout.")
    ingest_sessions(files, off, instance)
    _tick(off, instance, "digest_alerts", quiet.cursor)
    assert len(telegram.texts) == 1


def test_a_telegram_outage_loses_no_run_and_the_gap_alert_comes_later(env, telegram):
    settings, instance, folder = env
    telegram.fail_with = 500
    write_transcript(folder, SESSION, "Why is the cache cold?", "The TTL was 0.")
    baseline = _tick(settings, instance, "digest_alerts", None)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested"  # the run does not wait for or depend on Telegram
    after = _tick(settings, instance, "digest_alerts", baseline.cursor)
    assert after.cursor != baseline.cursor  # the tick ended normally, the message was logged
    failed = _fail_a_run(settings, instance, "88888888-8888-4888-8888-888888888888")
    _alert_run_failure(settings, instance, failed)  # does not raise
    assert telegram.messages == [] and telegram.calls >= 3

    other = "77777777-7777-4777-8777-777777777777"
    age(write_transcript(folder, other, "Still there?", "Yes."), 600)
    start = time.time()
    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    down = _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 2 * HOUR)
    assert telegram.messages == []
    telegram.fail_with = None  # Telegram is back: the undelivered alert goes out, once
    back = _tick(settings, instance, "capture_gap_alerts", down.cursor, start + 2.1 * HOUR)
    _tick(settings, instance, "capture_gap_alerts", back.cursor, start + 2.2 * HOUR)
    [alert] = telegram.texts
    assert other in alert and SESSION not in alert
    with Store(settings.database_url or "") as store:
        assert store.memories.memory_record(SESSION) is not None


def test_the_alert_sensors_are_on_by_default_and_the_token_is_bound_by_name(env):
    settings, _instance, _folder = env
    defs = build_definitions(settings)
    for name in ("digest_alerts", "run_failure_alerts", "capture_gap_alerts"):
        assert defs.resolve_sensor_def(name).default_status == dg.DefaultSensorStatus.RUNNING
    notifier = (defs.resources or {})["notifier"]
    # The resource holds the variable's name, so the UI's resource page never shows the token.
    assert (
        isinstance(notifier.token, dg.EnvVar)
        and notifier.token.env_var_name == "TELEGRAM_BOT_TOKEN"
    )
    assert TOKEN not in repr(notifier) and notifier.chat_id == CHAT_ID
    unset = build_resources(Settings.from_env({"LIBRARIAN_HOME": str(settings.home)}))
    assert unset["notifier"].token is None  # type: ignore[union-attr]


def test_a_real_daemon_s_sessions_sensor_ticks_are_seen_and_their_silence_alerted(env, telegram):
    settings, instance, folder = env
    folder.mkdir(parents=True)
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-m",
         "librarian_dagster.definitions"],
        env={**os.environ, **prepare_dagster_home(settings)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while (tick := last_good_sensor_tick(instance, "sessions_sensor")) is None:
            assert daemon.poll() is None, "dagster-daemon exited"
            assert time.monotonic() < deadline, "the sessions sensor never ticked"
            time.sleep(1)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
    assert sensor_known(instance, "sessions_sensor") and abs(time.time() - tick) < 300
    first = _tick(settings, instance, "capture_gap_alerts", None, tick + 60)
    assert not any("sessions_sensor" in t for t in telegram.texts)
    _tick(settings, instance, "capture_gap_alerts", first.cursor, tick + 11 * 60)
    [silent] = [t for t in telegram.texts if "sessions_sensor" in t]
    assert silent.startswith(
        "Librarian capture gap: the sensor that finds new sessions (sessions_sensor) has not "
        "ticked for 11 min"
    )


def _pushed(settings: Settings, person: str, machine: str) -> None:
    """A push, or the hello of a watch, of `person`'s `machine`, as POST /push records it."""
    with Store(settings.database_url or "") as store:
        store.pushes.machine_pushed(person, machine)


def _quiet_since(settings: Settings, hours: float) -> None:
    """Every pushing machine last heard of `hours` ago, first heard of a week before."""
    with psycopg.connect(settings.database_url or "") as conn:
        conn.execute(
            "UPDATE push_machines SET last_push = now() - make_interval(secs => %s), "
            "first_push = now() - make_interval(secs => %s)",
            (hours * HOUR, (hours + 168) * HOUR),
        )


def test_a_machine_that_stopped_pushing_gives_one_alert_by_name_and_one_when_back(env, telegram):
    settings, instance, _folder = env  # no mirror here: the sessions come by push
    _pushed(settings, "alice", "lap")
    _pushed(settings, "bob", "desk")
    _quiet_since(settings, 26)
    _pushed(settings, "bob", "desk")  # bob's watch said hello just now
    first = _tick(settings, instance, "capture_gap_alerts", None)
    [alert] = telegram.texts
    assert alert.startswith(
        "Librarian capture gap: alice's laptop `lap` has not pushed for 26 h (last at "
    )
    again = _tick(settings, instance, "capture_gap_alerts", first.cursor)
    assert len(telegram.texts) == 1  # the same silence: no second alert
    _pushed(settings, "alice", "lap")  # her laptop is back
    back = _tick(settings, instance, "capture_gap_alerts", again.cursor)
    _tick(settings, instance, "capture_gap_alerts", back.cursor)
    assert telegram.texts == [alert, "Librarian recovered: alice's laptop `lap` pushes again."]
    said = Tail(journal_path(settings.log_dir), start=0).read()
    assert [e.text for e in said if e.kind == "alert"] == telegram.texts


def test_folders_nobody_copies_into_are_no_gap_once_machines_push(env, telegram):
    settings, instance, folder = env
    first = _tick(settings, instance, "capture_gap_alerts", None)
    [gone] = telegram.texts  # nobody pushes yet: the folders are the only way sessions come
    assert gone.startswith("Librarian capture gap: no agent's folder exists here (Claude Code's ")
    assert str(folder.parent) in gone
    _pushed(settings, "alice", "lap")
    turned = _tick(settings, instance, "capture_gap_alerts", first.cursor)
    _tick(settings, instance, "capture_gap_alerts", turned.cursor, time.time() + 2 * HOUR)
    assert telegram.texts == [
        gone,
        folders_retired(folders(settings)),
    ]


def test_a_pushed_session_not_ingested_is_a_gap(env, telegram):
    settings, instance, folder = env
    written = write_transcript(folder, SESSION, "Why is the cache cold?", "The TTL was 0.")
    age(written, 600)
    staged = StagedFile(f"-work-app/{SESSION}.jsonl", written.read_bytes(), written.stat().st_mtime)
    uploads.stage(settings.uploads, "claude-code", SESSION, [staged], "0" * 64)
    written.unlink()  # on the laptop only: the server's mirror holds nothing
    _pushed(settings, "alice", "lap")
    start = time.time()
    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    assert telegram.texts == []
    _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 2 * HOUR)
    [alert] = telegram.texts
    assert alert.startswith("Librarian capture gap: 1 settled session(s) not ingested after 60")
    assert f"{SESSION} (-work-app)" in alert


def test_a_session_the_sessions_sensor_never_asks_for_is_no_gap(env, telegram, monkeypatch):
    settings, instance, folder = env
    age(write_transcript(folder, SESSION, "Private?", "Yes."), 600)
    monkeypatch.setenv("LIBRARIAN_EXCLUDE", "-work-app")
    excluded = Settings.from_env()
    start = time.time()
    first = _tick(excluded, instance, "capture_gap_alerts", None, start)
    _tick(excluded, instance, "capture_gap_alerts", first.cursor, start + 3 * HOUR)
    assert telegram.texts == []
    # The same session, not excluded: late.
    first = _tick(settings, instance, "capture_gap_alerts", None, start)
    _tick(settings, instance, "capture_gap_alerts", first.cursor, start + 3 * HOUR)
    [alert] = telegram.texts
    assert f"{SESSION} (-work-app)" in alert
