"""`python -m librarian_dagster.dagster_daemon WORKSPACE`: Dagster's daemon as `librarian up`
runs it, its storage connections kept (dagster_internals.run_daemon, decision 0043)."""

import contextlib
import sys

from librarian_dagster.core.commandline import imports_uncollected

with imports_uncollected():
    import dagster as dg

    from librarian_dagster.core.service.journal import journal_path, write
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.dagster_internals import run_daemon
    from librarian_dagster.dead_runs import report_dead_runs


def main(argv: list[str]) -> int:
    [workspace] = argv
    end_dead_runs_first()
    # Ctrl-C in a terminal that runs it by hand: a stop, not an error.
    with contextlib.suppress(KeyboardInterrupt):
        run_daemon(workspace)
    return 0


def end_dead_runs_first() -> None:
    """Runs a killed `up` or run worker left STARTED, ended before the daemon's loops start, so
    that its run retries see them fail and run them again (dead_runs.py).

    Here rather than in `librarian up` itself: `up` then never imports Dagster, about 60 MB of
    its idle memory (issue 42). `up` prints the journal, so the user still hears of each run.
    """
    settings = Settings.from_env()
    journal = journal_path(settings.log_dir)
    with dg.DagsterInstance.get() as instance:
        report_dead_runs(
            instance, settings, "librarian up", lambda line: write(journal, "alert", line)
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
