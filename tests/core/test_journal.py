"""The journal `librarian up` prints: each event written where it happens, read back once, in
order, whole; a secret never written; a journal that cannot be written costs its line only."""

import json
import os
import threading

from librarian_dagster.core.service import journal
from librarian_dagster.core.service.journal import Event, Tail, write

TOKEN = "ghp_FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6"


def test_a_tail_reads_each_event_written_after_it_once_in_order(tmp_path):
    path = tmp_path / "logs" / "events.jsonl"
    write(path, "remembered", "before the tail: not its to show", now=1.0)
    tail = Tail(path)
    assert tail.read() == []
    write(path, "remembered", "app · codex · Fix the parser · 12 chunks", now=2.0)
    write(path, "skipped", "app/2026-12/x: nothing to remember: empty", now=3.0)
    assert tail.read() == [
        Event("remembered", "app · codex · Fix the parser · 12 chunks", 2.0),
        Event("skipped", "app/2026-12/x: nothing to remember: empty", 3.0),
    ]
    assert tail.read() == []


def test_a_line_cut_mid_write_waits_for_its_end_and_a_bad_line_is_passed_over(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = Tail(path)  # before the file exists
    line = json.dumps({"kind": "failed", "text": "s: boom (http://ui/runs/1)", "at": 5.0})
    with path.open("a") as fh:
        fh.write('{"kind": "shouted", "text": "no such kind", "at": 1}\nnot json\n')
        fh.write(line[:10])
    assert tail.read() == []
    with path.open("a") as fh:
        fh.write(line[10:] + "\n")
    assert tail.read() == [Event("failed", "s: boom (http://ui/runs/1)", 5.0)]


def test_a_secret_never_reaches_the_journal_and_a_text_is_one_short_line(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, "failed", f"s: push refused for {TOKEN}\n  at line 3\n" + "x" * 2000)
    raw = path.read_text()
    assert TOKEN not in raw and "[REDACTED:" in raw
    [event] = Tail(path, start=0).read()
    assert "\n" not in event.text and len(event.text) == journal.MAX_TEXT
    assert event.line().endswith(event.text) and "failed" in event.line()


def test_a_full_journal_moves_aside_and_the_tail_follows(tmp_path, monkeypatch):
    monkeypatch.setattr(journal, "MAX_BYTES", 300)
    path = tmp_path / "events.jsonl"
    tail = Tail(path)
    for i in range(5):
        write(path, "remembered", f"app · claude-code · session {i} · 3 chunks", now=float(i))
        seen = tail.read()
        assert [e.at for e in seen] == [float(i)], (i, seen)
    assert (tmp_path / "events.jsonl.1").exists()
    assert path.stat().st_size <= 300


def test_writers_at_once_never_interleave(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = Tail(path)

    def writer(n: int) -> None:
        for i in range(200):
            write(path, "remembered", f"writer {n} line {i} " + "y" * 150)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tail.read()) == 800


def test_a_journal_that_cannot_be_written_costs_its_line_only(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    write(blocked / "events.jsonl", "remembered", "nowhere to go")  # no folder can be made
    assert blocked.read_text() == ""
    if os.geteuid() != 0:  # root writes through permissions
        readonly = tmp_path / "ro"
        readonly.mkdir(mode=0o500)
        write(readonly / "events.jsonl", "remembered", "nowhere to go")
        assert list(readonly.iterdir()) == []
