"""The capture-gap rules and the one-alert-per-incident bookkeeping, on an injected clock."""

import json
from datetime import UTC, datetime
from pathlib import Path

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.ingest_plan import Snapshot
from librarian_dagster.core.service.alerts import (
    FOLDERS_QUIET,
    INGEST_GAP,
    MACHINE_QUIET,
    SESSIONS_SENSOR_SILENT,
    GapState,
    Incident,
    advance,
    capture_incidents,
    due_sessions,
    first_line,
    folders_in_use,
    folders_retired,
    machine_gaps,
    run_failure_message,
    transcript_folder_of,
)
from librarian_dagster.core.store.pushes import PushMachine

T0 = 1_800_000_000.0
MIN, HOUR = 60.0, 3600.0
CLAUDE = Path("/sessions/claude")
FOLDERS = {"claude-code": CLAUDE, "codex": Path("/sessions/codex")}
"""Every agent's folder here; Claude Code's alone exists, unless a test says none does."""


def _snap(sid: str, modified: float, fingerprint: str = "f1", project: str = "-work-app"):
    return Snapshot(SessionFiles(sid, CLAUDE / project / f"{sid}.jsonl"), fingerprint, modified)


def _due(snaps, handled=None, requested=None, now=T0, gap=60.0):
    return due_sessions(
        snaps, handled or {}, requested or {}, now=now, settle_seconds=120, gap_minutes=gap
    )


def test_a_session_is_late_gap_minutes_after_it_settled_unless_handled_since():
    snaps = [_snap("a", T0 - 2 * HOUR), _snap("b", T0 - 30 * MIN), _snap("c", T0 - 60)]
    assert [o.session_id for o in _due(snaps)] == ["a"]  # b is not late yet, c still settling
    [late] = _due(snaps)
    assert late.due_since == T0 - 2 * HOUR + 120 and late.folder == "-work-app"
    assert _due(snaps, handled={"a": T0 - HOUR}) == []  # a run got to it after its last write
    assert [o.session_id for o in _due(snaps, handled={"a": T0 - 3 * HOUR})] == ["a"]  # before
    assert [o.session_id for o in _due(snaps, now=T0 + HOUR)] == ["a", "b"]


def test_no_session_is_late_for_a_watch_that_had_not_begun():
    # The first start, over a backlog the sessions sensor has not even requested yet.
    snaps = [_snap("a", T0 - 100 * HOUR)]

    def due(now, since):
        return due_sessions(snaps, {}, {}, now=now, settle_seconds=120, gap_minutes=60,
                            watching_since=since)  # fmt: skip

    assert due(T0, since=T0 - 30 * MIN) == []
    [late] = due(T0, since=T0 - 2 * HOUR)
    assert late.due_since == T0 - 2 * HOUR


def test_a_requested_session_waits_in_the_queue_from_its_request_not_its_write():
    snaps = [_snap("a", T0 - 30 * 24 * HOUR)]  # an old session, first seen by a backfill
    assert _due(snaps, requested={"a": ("f1", T0 - 10 * MIN)}) == []
    assert len(_due(snaps, requested={"a": ("f1", T0 - 2 * HOUR)})) == 1
    # Requested at another fingerprint: this version was never requested, so it is late.
    assert len(_due(snaps, requested={"a": ("f0", T0 - 10 * MIN)})) == 1


def _incidents(
    now=T0, snaps=(), overdue=(), watched=True, tick=T0, exists=True, quiet=24.0, machines=()
):
    return {
        i.key: i
        for i in capture_incidents(
            now=now,
            folders=FOLDERS,
            present={"claude-code": CLAUDE} if exists else {},
            snapshots=list(snaps),
            overdue=list(overdue),
            sensor_watched=watched,
            last_sensor_tick=tick,
            watching_since=T0 - HOUR,
            gap_minutes=60,
            quiet_hours=quiet,
            machines=list(machines),
        )
    }


def test_the_three_kinds_of_gap():
    fresh = [_snap("a", T0 - HOUR)]
    assert _incidents(snaps=fresh) == {}
    late = _due([_snap(f"s{i}", T0 - 3 * HOUR) for i in range(5)])
    gap = _incidents(snaps=fresh, overdue=late)[INGEST_GAP]
    assert gap.alert.startswith("Librarian capture gap: 5 settled session(s) not ingested after 60")
    assert "s0 (-work-app)" in gap.alert
    assert "and 2 more" in gap.alert

    quiet = _incidents(snaps=[_snap("a", T0 - 30 * HOUR)])[FOLDERS_QUIET].alert
    assert quiet.startswith(
        "Librarian capture gap: the agents' folders here (Claude Code's /sessions/claude) have "
        "not changed for 30 h"
    )
    assert _incidents(snaps=[_snap("a", T0 - 30 * HOUR)], quiet=0) == {}
    gone = _incidents(exists=False, quiet=0)[FOLDERS_QUIET].alert
    assert gone.startswith(
        "Librarian capture gap: no agent's folder exists here (Claude Code's /sessions/claude, "
        "Codex's /sessions/codex)"
    )

    silent = _incidents(snaps=fresh, tick=T0 - 11 * MIN)[SESSIONS_SENSOR_SILENT]
    assert "(sessions_sensor) has not ticked for 11 min" in silent.alert
    assert _incidents(snaps=fresh, tick=T0 - 9 * MIN) == {}
    # Never a good tick: silent since the watch began (an hour ago here).
    assert SESSIONS_SENSOR_SILENT in _incidents(snaps=fresh, tick=None)
    # No stored state for the sessions sensor (no daemon ran it): nothing to judge.
    assert _incidents(snaps=fresh, tick=None, watched=False) == {}


def test_one_alert_per_incident_one_recovery_and_a_retry_until_delivered():
    sent: list[str] = []
    up = True

    def send(text: str) -> bool:
        if up:
            sent.append(text)
        return up

    gap = Incident(INGEST_GAP, "gap!", "gap over")
    quiet = Incident(FOLDERS_QUIET, "quiet!", "quiet over")
    state = GapState.from_cursor(None, T0)
    assert state.watching_since == T0 and state.open == {}
    state = advance(state, [gap], T0, send)
    state = GapState.from_cursor(state.to_cursor(), T0 + 1)  # through the cursor, as a tick does
    state = advance(state, [gap], T0 + 300, send)
    assert sent == ["gap!"]

    up = False  # Telegram down: the new alert is kept as not delivered
    state = advance(GapState.from_cursor(state.to_cursor(), 0), [gap, quiet], T0 + 600, send)
    assert state.open[FOLDERS_QUIET].sent is False
    up = True
    state = advance(GapState.from_cursor(state.to_cursor(), 0), [gap, quiet], T0 + 900, send)
    assert sent == ["gap!", "quiet!"]
    state = advance(state, [quiet], T0 + 1200, send)
    assert sent == ["gap!", "quiet!", "gap over"]
    state = advance(state, [], T0 + 1500, send)
    state = advance(state, [], T0 + 1800, send)
    assert sent == ["gap!", "quiet!", "gap over", "quiet over"]
    assert state.watching_since == T0

    # An incident that cleared before its alert was ever delivered gets no recovery message.
    up = False
    state = advance(state, [gap], T0 + 2100, send)
    up = True
    advance(state, [], T0 + 2400, send)
    assert sent[-1] == "quiet over"


def test_an_unreadable_cursor_starts_a_new_watch():
    for cursor in ("", "not json", "[]", '{"open": {}}', '{"watching_since": 1, "open": 3}'):
        assert GapState.from_cursor(cursor, T0) == GapState(T0)


def test_an_incident_open_under_its_earlier_name_is_neither_alerted_again_nor_said_over():
    cursor = json.dumps({"watching_since": T0, "open": {"mirror_quiet": {
        "alert": "quiet!", "recovery": "over", "opened_at": T0, "sent": True}}})  # fmt: skip
    sent: list[str] = []
    still = _incidents(exists=False)[FOLDERS_QUIET]
    advance(GapState.from_cursor(cursor, T0 + 60), [still], T0 + 60, sent.append)
    assert sent == []


def test_messages():
    message = run_failure_message(
        "ingest_session", "s1", "\n\nValueError: bad\n  trace", "r1", "http://ui:3000/"
    )
    assert (
        message
        == "Librarian run failed: ingest_session for session s1\nValueError: bad\nhttp://ui:3000/runs/r1"
    )
    assert first_line("  ") == "(no error message)"
    sub = Snapshot(
        SessionFiles("s", None, (CLAUDE / "-p" / "s" / "subagents" / "agent-1.jsonl",)), "f", 0
    )
    old = Snapshot(SessionFiles("s", None, (CLAUDE / "-q" / "agent-1.jsonl",)), "f", 0)
    assert (transcript_folder_of(sub), transcript_folder_of(old)) == ("-p", "-q")


def test_without_telegram_a_gap_is_logged_once_not_every_tick():
    from librarian_dagster.core.service.telegram import Notifier

    logged: list[str] = []
    notifier = Notifier("http://127.0.0.1:9", None, None, log_warning=logged.append)
    gap = Incident(INGEST_GAP, "gap!", "gap over")
    state = GapState.from_cursor(None, T0)
    for minute in range(0, 30, 5):
        state = advance(
            GapState.from_cursor(state.to_cursor(), 0), [gap], T0 + minute * 60, notifier.send
        )
    state = advance(state, [], T0 + HOUR, notifier.send)
    assert logged == [
        "alert (Telegram not configured, log only): gap!",
        "alert (Telegram not configured, log only): gap over",
    ]


def _machine(person: str, name: str, last: float, first: float | None = None) -> PushMachine:
    def at(t: float) -> datetime:
        return datetime.fromtimestamp(t, UTC)

    return PushMachine(person, name, at(first if first is not None else last), at(last))


def test_a_machine_quiet_longer_than_the_quiet_hours_is_a_gap_by_name():
    alice = _machine("alice", "lap", T0 - 26 * HOUR)
    bob = _machine("bob", "desk", T0 - 23 * HOUR)
    [gap] = machine_gaps([alice, bob], T0, 24.0)
    assert gap.key == f"{MACHINE_QUIET}:alice/lap"
    assert gap.alert == (
        "Librarian capture gap: alice's laptop `lap` has not pushed for 26 h (last at "
        "2027-01-14 06:00 UTC); is `librarian push --watch` still running there?"
    )
    assert gap.recovery == "Librarian recovered: alice's laptop `lap` pushes again."
    assert [g.key for g in machine_gaps([alice, bob], T0 + 2 * HOUR, 24.0)] == [
        f"{MACHINE_QUIET}:alice/lap", f"{MACHINE_QUIET}:bob/desk"]  # fmt: skip
    assert machine_gaps([alice], T0, 0) == []  # LIBRARIAN_QUIET_HOURS=0: never asked
    # Two people may give their machines one name: two machines, two gaps.
    twins = [_machine("alice", "lap", T0 - 30 * HOUR), _machine("bob", "lap", T0 - 30 * HOUR)]
    assert len({g.key for g in machine_gaps(twins, T0, 24.0)}) == 2


def test_one_alert_per_silence_of_a_machine_and_one_when_it_pushes_again():
    sent: list[str] = []

    def send(text: str) -> bool:
        sent.append(text)
        return True

    def tick(state: GapState, now: float, last: float) -> GapState:
        lap = _machine("alice", "lap", last, first=T0 - 90 * HOUR)
        found = _incidents(now=now, tick=now, snaps=[_snap("a", now - HOUR)], machines=[lap])
        return advance(GapState.from_cursor(state.to_cursor(), 0), list(found.values()), now, send)

    state = GapState.from_cursor(None, T0)
    last = T0 - HOUR
    for minute in range(0, 24 * 60, 5):  # heard an hour ago, then silent for a day
        state = tick(state, T0 + minute * MIN, last)
    assert sent == [_machine_alert(24)]
    for minute in range(0, 60, 5):  # back: a hello every round
        now = T0 + 24 * HOUR + minute * MIN
        state = tick(state, now, now - 30)
    assert sent == [_machine_alert(24), "Librarian recovered: alice's laptop `lap` pushes again."]
    last = T0 + 26 * HOUR
    for hour in range(0, 28):  # quiet again: a new silence, alerted once more
        state = tick(state, last + hour * HOUR, last)
    assert len(sent) == 3 and "has not pushed for 25 h" in sent[2]


def _machine_alert(hours: int) -> str:
    return (
        f"Librarian capture gap: alice's laptop `lap` has not pushed for {hours} h (last at "
        "2027-01-15 07:00 UTC); is `librarian push --watch` still running there?"
    )


def test_the_folders_are_watched_only_while_sessions_come_through_them():
    lap = _machine("alice", "lap", T0, first=T0 - 10 * HOUR)
    old, new = [_snap("a", T0 - 20 * HOUR)], [_snap("a", T0 - 5 * HOUR)]
    # Nobody pushes: the folders here are the only way sessions come, absent or quiet.
    assert folders_in_use(False, [], []) and folders_in_use(True, old, [])
    # Machines push: folders absent, empty, or left as before the first push are nobody's.
    assert not folders_in_use(False, [], [lap])
    assert not folders_in_use(True, [], [lap])
    assert not folders_in_use(True, old, [lap])
    # One the copy from a laptop still filled after the first push is watched beside the pushes.
    assert folders_in_use(True, new, [lap])

    assert FOLDERS_QUIET in _incidents(exists=False)
    assert _incidents(exists=False, machines=[lap]) == {}
    assert _incidents(snaps=old, now=T0 + 10 * HOUR, tick=T0 + 10 * HOUR, machines=[lap]) == {}
    quiet = _incidents(snaps=new, now=T0 + 25 * HOUR, tick=T0 + 25 * HOUR, machines=[lap])
    assert "have not changed for 30 h" in quiet[FOLDERS_QUIET].alert


def test_folders_no_longer_watched_are_said_so_not_said_to_be_back():
    sent: list[str] = []

    def send(text: str) -> bool:
        sent.append(text)
        return True

    gone = _incidents(exists=False)[FOLDERS_QUIET]
    state = advance(GapState.from_cursor(None, T0), [gone], T0, send)
    state = advance(state, [], T0 + 300, send, unwatched={FOLDERS_QUIET: folders_retired(FOLDERS)})
    assert sent == [
        gone.alert,
        "Librarian: the agents' folders here (Claude Code's /sessions/claude, Codex's "
        "/sessions/codex) are no longer watched: sessions come by push (`librarian push`), and "
        "each machine that pushes is watched instead.",
    ]
    assert state.open == {}
    # An incident that healed (not one no longer asked) still says its own recovery.
    state = advance(state, [gone], T0 + 600, send)
    advance(state, [], T0 + 900, send, unwatched={})
    assert sent[-1] == gone.recovery
