"""The progress of a long ingest or backfill: a bar on a terminal, plain lines in a log."""

import io
from dataclasses import dataclass

from librarian_dagster.cli.progress import Progress


@dataclass(frozen=True)
class _Outcome:
    session_id: str
    status: str = "ingested"
    detail: str = ""


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_each_tenth_and_each_failure_as_it_comes():
    out, clock = io.StringIO(), _Clock()
    progress = Progress(out, clock, tty=False)
    progress.start(100)
    for i in range(100):
        clock.now += 2.0
        failed = i in (4, 57)
        progress.update(_Outcome(f"s{i}", "failed" if failed else "ingested", "HTTP 500"))
    lines = out.getvalue().splitlines()
    assert [line for line in lines if line.startswith("failed")] == [
        "failed   s4  HTTP 500", "failed   s57  HTTP 500"]  # fmt: skip
    counts = [line for line in lines if "sessions (" in line]
    assert len(counts) == 10
    assert counts[0] == "10/100 sessions (10%), 0.50/s, 3 min 00 s left, 1 failed"
    assert counts[-1] == "100/100 sessions (100%), 0.50/s, 2 failed"


def test_a_slow_tenth_still_gets_a_line_every_30_s():
    out, clock = io.StringIO(), _Clock()
    progress = Progress(out, clock, tty=False)
    progress.start(1000)
    for i in range(5):
        clock.now += 20.0
        progress.update(_Outcome(f"s{i}"))
    lines = out.getvalue().splitlines()
    assert [line.split(" sessions")[0] for line in lines] == ["2/1000", "4/1000"]
    assert "h " in lines[0] and lines[0].endswith("left, 0 failed")


def test_a_terminal_gets_a_bar_with_rate_time_left_and_failures():
    out = io.StringIO()
    progress = Progress(out, tty=True)
    progress.start(4)
    for status in ("ingested", "failed", "ingested", "skipped"):
        progress.update(_Outcome("s-" + status, status, "why"))
    text = out.getvalue()
    assert "failed   s-failed  why" in text
    assert "4/4" in text and "1 failed" in text and "session/s" in text
