"""`librarian backfill`: run remembered sessions again (re-digest or re-embed), with progress."""

import argparse
import sys

from librarian_dagster.cli.progress import Progress
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


def cmd_backfill(args: argparse.Namespace) -> int:
    from librarian_dagster.cli.run import end_with_the_embedded_server
    from librarian_dagster.core.commandline import imports_uncollected
    from librarian_dagster.core.settings import Settings

    with imports_uncollected():
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
    progress.close()
    if not outcomes:
        print("no sessions to backfill", file=sys.stderr)
        return 0
    counts = {
        s: sum(o.status == s for o in outcomes)
        for s in ("ingested", "skipped", "deferred", "failed")
    }
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["failed"] else 0
