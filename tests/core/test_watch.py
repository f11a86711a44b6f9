"""A watch's rules, with a scripted probe: one alert an incident, a recovery message,
restarts with pauses, and a line to exit with when nothing brings the database back."""

import threading
import time

from librarian_dagster.core.service.watch import Watch


def _watch(answers, restart_fails=0, restartable=True):
    """A watch whose probe answers from `answers` (None: up; a text: why down) and then stays
    up; its restart fails `restart_fails` times first."""
    answers = list(answers)
    alerts, restarts = [], []

    def probe():
        return answers.pop(0) if answers else None

    def restart():
        restarts.append(1)
        if len(restarts) <= restart_fails:
            raise RuntimeError("could not start: pre-existing shared memory\\nblock in use")

    watch = Watch(
        what="the database", where="embedded: /h/pgdata", probe=probe,
        restart=restart if restartable else None, alert=alerts.append, interval_s=0.001,
        pauses_s=(0.001, 0.001, 0.001),
    )  # fmt: skip
    return watch, alerts, restarts, answers


def _run(watch, until, seconds=5.0):
    stopping = threading.Event()
    thread = threading.Thread(target=watch.run, args=(stopping,))
    thread.start()
    until.wait(seconds) if isinstance(until, threading.Event) else thread.join(seconds)
    stopping.set()
    thread.join(5)


def test_one_failed_probe_is_a_blip():
    watch, alerts, restarts, _ = _watch([None, "timeout", None, None])
    _run(watch, watch.healed, 0.3)  # never healed: nothing was ever down
    assert alerts == [] and restarts == [] and watch.incidents == 0


def test_a_dead_server_is_restarted_with_one_alert_and_one_recovery():
    # Down twice in a row, the first restart fails, the second brings it back.
    watch, alerts, restarts, _ = _watch(["refused", "refused"], restart_fails=1)
    _run(watch, watch.healed)
    assert watch.healed.is_set() and not watch.down and watch.lost is None
    assert len(restarts) == 2 and watch.incidents == 1
    assert len(alerts) == 2
    assert alerts[0].startswith("Librarian: the database stopped answering (embedded: /h/pgdata)")
    assert "refused" in alerts[0] and "restarting it" in alerts[0]
    assert "was restarted (try 2)" in alerts[1]


def test_when_no_restart_helps_the_watch_ends_with_the_line_to_exit_with():
    watch, alerts, restarts, _ = _watch(["timeout"] * 50)
    _run(watch, None)
    assert len(restarts) == 3 and not watch.healed.is_set()
    assert watch.lost is not None and "3 restarts did not bring it back: timeout" in watch.lost
    assert len(alerts) == 2 and "exiting" in alerts[1]


def test_an_external_database_is_waited_for_and_said_to_be_back():
    watch, alerts, _, _ = _watch(["refused"] * 6, restartable=False)
    _run(watch, watch.healed)
    assert watch.healed.is_set() and watch.lost is None
    assert "nothing here can restart it" in alerts[0] and "answers again" in alerts[1]
    assert len(alerts) == 2


def test_with_nothing_to_restart_a_bounded_wait_ends_in_the_line_to_exit_with():
    alerts = []
    watch = Watch(
        what="LIBRARIAN_HOME", where="/h", probe=lambda: "3 MB free", restart=None,
        alert=alerts.append, interval_s=0.001, wait_s=0.05,
    )  # fmt: skip
    _run(watch, None)
    assert watch.lost == "LIBRARIAN_HOME (/h): 3 MB free"
    assert len(alerts) == 2 and alerts[1].endswith("librarian up is exiting.")


def test_a_healed_incident_is_told_with_when_it_began_and_healed():
    told = []
    watch, _, _, _ = _watch(["refused", "refused"])
    watch.on_healed = lambda began, healed: told.append((began, healed))
    before = time.time()
    _run(watch, watch.healed)
    assert watch.healed.is_set() and len(told) == 1
    began, healed = told[0]
    assert before <= began <= healed <= time.time()


def test_a_blip_tells_of_no_incident():
    told = []
    watch, _, _, _ = _watch([None, "timeout", None])
    watch.on_healed = lambda began, healed: told.append((began, healed))
    _run(watch, watch.healed, 0.3)
    assert told == []


def test_two_watches_healing_at_once_both_keep_their_incidents(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from librarian_dagster.core.service.incidents import Incident, read_incidents, record_incident

    path, now = tmp_path / "incidents.jsonl", time.time()

    def heal(what: str) -> None:
        for n in range(40):
            record_incident(path, Incident(what, now + n, now + n + 1), now)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(heal, ["the database", "the mirror folder"]))
    kept = read_incidents(path)
    assert sorted((i.what, i.began) for i in kept) == sorted(
        (what, now + n) for what in ("the database", "the mirror folder") for n in range(40)
    )
