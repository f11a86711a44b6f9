"""The store's kept connections: one `psycopg_pool.ConnectionPool` that every concern shares.

A new connection costs ~15 ms (the connect, then pgvector's type look-ups), most of what a
get_digest over MCP would cost if paid per call; a kept one costs nothing. Every connection the
pool makes is set up once by `configure` (pgvector's types, the HNSW scan's settings) and checked
before each use: one the server dropped since (a restart) is thrown away and replaced, and the
caller gets a live one.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

CANDIDATES = 100
"""Chunks search takes from each of its ranked lists, and so how wide the HNSW scan's candidate
list is (`hnsw.ef_search`): a list as wide as what is taken from it."""

MIN_CONNECTIONS = 1
"""Connections kept open while idle: a pipeline process or a command uses one at a time."""
SEARCH_CONNECTIONS = 3
"""Connections one search uses at once (its three vector lists, each in a side thread,
core/recall/search.py): what the recall server keeps open, so that no question waits for a
connect."""
MAX_CONNECTIONS = 16
"""At most this many at once per process: the embedded server allows 100 in all, shared by
Dagster's webserver, daemon, run workers and the recall server."""

CONNECT_TIMEOUT_S = 10
"""An address that drops packets fails a connect in seconds, not after the system's TCP timeout
(libpq waits forever unless told)."""
_PROMPT_S = 1.0
"""A connection is normally handed out at once, or after a connect (~15 ms). Not given one within
this, the pool is either busy or cannot reach the server: `Database.connection` asks the server
itself, so that a server that went away fails at once, with its own reason (see there)."""
_WAIT_S = 30.0
"""How long a caller waits for a busy pool, the server being up."""

NO_VECTOR = (
    "the database has no `vector` extension: install pgvector on that server "
    "(or unset LIBRARIAN_DATABASE_URL to use the embedded one)"
)


class StoreError(RuntimeError):
    """The database cannot be used as Librarian's store; the message says why."""


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set up a new connection as every use of it expects (autocommit: a write opens its own
    transaction with `conn.transaction()`)."""
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        raise StoreError(NO_VECTOR) from None
    # Filters prune what the HNSW scan yields; an iterative scan keeps fetching until the LIMIT
    # is met (pgvector 0.8), and a candidate list as wide as what is taken helps.
    conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(CANDIDATES)))
    conn.execute("SET hnsw.iterative_scan = strict_order")


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` says the server cannot be talked to (gone, shutting down, refusing new
    connections, the line cut), rather than that one statement failed (a timeout, a deadlock)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    # No SQLSTATE: libpq's own failure (no socket, a closed connection); 08: connection
    # exception; 57P01-57P05: the server shutting down, crashed or not accepting connections.
    return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))


def with_connect_timeout(url: str) -> dict[str, Any]:
    """Connect arguments that bound a connect, unless the URL sets its own bound."""
    return (
        {} if "connect_timeout" in conninfo_to_dict(url) else {"connect_timeout": CONNECT_TIMEOUT_S}
    )


class Database:
    """One database's pool of kept connections (autocommit, rows as dicts), for every concern.

    Safe to share between threads: each `connection()` is one caller's until its block ends.
    Close it when done (or use it as a context manager); the pool's threads and connections go
    with it.
    """

    def __init__(self, url: str, *, min_size: int = MIN_CONNECTIONS) -> None:
        self.url = url
        self._connect_args: dict[str, Any] = {
            "autocommit": True,
            "row_factory": dict_row,
            **with_connect_timeout(url),
        }
        self.pool = ConnectionPool(
            url,
            connection_class=psycopg.Connection[DictRow],
            kwargs=self._connect_args,
            min_size=min_size,
            max_size=max(min_size, MAX_CONNECTIONS),
            configure=configure,
            check=self._check,
            timeout=_WAIT_S,
            name="librarian-store",
            open=True,
        )

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A live connection of the pool, given back when the block ends.

        Raises what a connect would when the server cannot be reached (psycopg's
        OperationalError, or StoreError for a database without pgvector): the pool itself
        would only retry in the background and time out.
        """
        try:
            conn = self.pool.getconn(timeout=_PROMPT_S)
        except PoolTimeout:
            self._connect_once()  # raises the server's own reason when it cannot serve
            conn = self.pool.getconn()  # the server is there: the pool is busy, wait for it
        try:
            with conn:  # psycopg's block: on an error, a transaction left open is rolled back
                yield conn
        finally:
            self.pool.putconn(conn)

    def _connect_once(self) -> None:
        with psycopg.connect(self.url, **self._connect_args) as conn:
            configure(conn)

    def _check(self, conn: psycopg.Connection[DictRow]) -> None:
        try:
            self.pool.check_connection(conn)
        except psycopg.OperationalError:
            # The server dropped this idle connection, and with it (a restart) every other one
            # the pool holds: all are replaced at once, rather than each found dead in turn, with
            # a growing pause between two (the pool's back-off for failed checks).
            self.pool.drain()
            raise

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
