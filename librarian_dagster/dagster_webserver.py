"""`python -m librarian_dagster.dagster_webserver ARGS`: `dagster-webserver ARGS` as `librarian up`
runs it, asking the code server whether it was started again every 10 s instead of every second
(dagster_internals.watch_code_servers_every, decision 0043)."""

from librarian_dagster.core.commandline import imports_uncollected

with imports_uncollected():
    from dagster_webserver.cli import main as webserver_main

    from librarian_dagster.dagster_internals import CODE_SERVER_WATCH_S, watch_code_servers_every


def main() -> None:
    watch_code_servers_every(CODE_SERVER_WATCH_S)
    webserver_main()  # reads sys.argv, as `python -m dagster_webserver` does


if __name__ == "__main__":
    main()
