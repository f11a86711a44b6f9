"""One store, opened: the memories, the files, search and the ledger over one pool of connections.

PostgreSQL + pgvector. Each concern is its own class, and each caller takes the ones it uses:
`Memories` (core/store/memories.py: the memories written and read back), `Search`
(core/recall/search.py: hybrid search), `Ledger` (core/store/ledger.py: the pipeline's
bookkeeping). The schema is core/store/schema.py's; the pool, core/store/pool.py's.
"""

from pathlib import Path
from types import TracebackType

import psycopg

from librarian_dagster.core.recall.search import Search
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import database_url, unreachable
from librarian_dagster.core.store.files import Files
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.memories import Memories
from librarian_dagster.core.store.pool import MIN_CONNECTIONS, Database
from librarian_dagster.core.store.pushes import Pushes
from librarian_dagster.core.store.schema import attribute_sessions, migrate


class Store:
    """The three concerns of one database, sharing its pool; closing the store closes the pool.

    The schema must be up to date first (`migrate`, or `open_store`, which does both).
    """

    def __init__(
        self,
        url: str,
        *,
        min_connections: int = MIN_CONNECTIONS,
        postings_dir: Path | None = None,
    ) -> None:
        """`postings_dir`: where search keeps its BM25 postings between processes (Search)."""
        self.url = url
        self.database = Database(url, min_size=min_connections)
        self.memories = Memories(self.database)
        self.files = Files(self.database)
        self.search = Search(self.database, postings_dir)
        self.ledger = Ledger(self.database)
        self.pushes = Pushes(self.database)

    def close(self) -> None:
        self.search.close()
        self.database.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def migrated_url(settings: Settings) -> str:
    """The URL of the store the settings point at (embedded server started if needed), its
    schema brought up to date: the check that it can serve at all, made before opening it."""
    url = database_url(settings)
    try:
        migrate(url)
        attribute_sessions(url, settings.own_person)
    except psycopg.OperationalError as exc:
        raise unreachable(settings, exc) from None
    return url


def open_store(settings: Settings, *, min_connections: int = MIN_CONNECTIONS) -> Store:
    """The store the settings point at, schema up to date; close it when done."""
    return Store(
        migrated_url(settings), min_connections=min_connections, postings_dir=settings.postings_dir
    )
