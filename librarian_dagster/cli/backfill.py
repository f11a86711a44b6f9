"""`librarian backfill`: run remembered sessions again (re-digest or re-embed), with progress."""

import argparse
import sys
from typing import TextIO

from librarian_dagster.core.commandline import AddParser, iso_date


def register(add_parser: AddParser) -> None:
    parser = add_parser(
        "backfill",
        help="run a project's sessions, a date range or everything again, through the same job",
    )
    parser.add_argument("--project", help="only this project's sessions")
    parser.add_argument(
        "--since", type=iso_date, help="only sessions active on or after this date (ISO)"
    )
    parser.add_argument(
        "--reembed",
        action="store_true",
        help="only the vectors and the memory, from the staged chunks",
    )
    parser.add_argument("--per-run", type=int, default=None, help="sessions per run (default 25)")
    parser.set_defaults(handler=cmd_backfill)


class Progress:
    """A bar redrawn in place on a terminal; one line per session anywhere else (logs, CI)."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.total, self.done = out, 0, 0
        self.counts = {"ingested": 0, "skipped": 0, "deferred": 0, "failed": 0}
        self.tty = out.isatty()

    def start(self, total: int) -> None:
        self.total = total
        if self.tty and total:
            self._draw()

    def update(self, outcome) -> None:
        self.done += 1
        self.counts[outcome.status] += 1
        if self.tty:
            if outcome.status == "failed":
                self.out.write(f"\r\033[Kfailed   {outcome.session_id}  {outcome.detail}\n")
            self._draw()
        else:
            self.out.write(f"{outcome.status:8} {outcome.session_id}  {outcome.detail}\n")
        self.out.flush()

    def _draw(self) -> None:
        width = 30
        filled = width * self.done // max(1, self.total)
        counts = ", ".join(f"{n} {s}" for s, n in self.counts.items())
        bar = "#" * filled + "." * (width - filled)
        self.out.write(f"\r\033[K[{bar}] {self.done}/{self.total}  {counts}")
        if self.done == self.total:
            self.out.write("\n")


def cmd_backfill(args: argparse.Namespace) -> int:
    from librarian_dagster.cli.run import end_with_the_embedded_server
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.defs.partitions import SESSIONS_PER_RUN
    from librarian_dagster.ingest import backfill

    settings = Settings.from_env()
    end_with_the_embedded_server(settings, "backfill")
    progress = Progress(sys.stderr)
    outcomes = backfill(
        settings,
        project=args.project,
        since=args.since,
        reembed=args.reembed,
        per_run=args.per_run or SESSIONS_PER_RUN,
        on_start=progress.start,
        on_outcome=progress.update,
    )
    if not outcomes:
        print("no sessions to backfill", file=sys.stderr)
        return 0
    counts = {
        s: sum(o.status == s for o in outcomes)
        for s in ("ingested", "skipped", "deferred", "failed")
    }
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["failed"] else 0
