"""`python -m librarian_dagster.dagster_daemon WORKSPACE`: Dagster's daemon as `librarian up`
runs it, its storage connections kept (dagster_internals.run_daemon, decision 0043)."""

import contextlib
import sys

from librarian_dagster.dagster_internals import run_daemon


def main(argv: list[str]) -> int:
    [workspace] = argv
    # Ctrl-C in a terminal that runs it by hand: a stop, not an error.
    with contextlib.suppress(KeyboardInterrupt):
        run_daemon(workspace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
