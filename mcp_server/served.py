"""What the recall server reads: one store's search, memories and files, and the embedder of the
questions. The tools, the hooks' endpoints and the page all read it from one `ServedSlot`, which
the HTTP app's lifespan opens once at start and closes at shutdown (mcp_server/app.py), or which
is handed in open (a test, an in-memory client)."""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.search import Search
from librarian_dagster.core.store.files import Files
from librarian_dagster.core.store.memories import Memories
from librarian_dagster.core.store.pushes import Pushes


@dataclass(frozen=True)
class Served:
    """What the tools read: one store's search and memories, and the embedder of the questions."""

    search: Search
    memories: Memories
    files: Files
    embedder: Embedder
    pushes: Pushes | None = None
    """Where pushed sessions are recorded (None: this server takes no pushes)."""

    @classmethod
    def of(cls, store: Store, embedder: Embedder) -> "Served":
        return cls(store.search, store.memories, store.files, embedder, store.pushes)


Opener = Callable[[], AbstractContextManager[Served]]
"""Opens what the tools read when the server starts; leaving its block closes it."""


class ServedSlot:
    """Where the tools find what they read: given open (the caller's to close), or opened by
    `opened()` for as long as the server runs."""

    def __init__(self, source: Served | Opener) -> None:
        self._served = source if isinstance(source, Served) else None
        self._opener = None if isinstance(source, Served) else source

    def __call__(self) -> Served:
        if self._served is None:
            raise RuntimeError("the recall server is not started: its store is not open")
        return self._served

    @contextmanager
    def opened(self) -> Iterator[None]:
        """Open what the server reads (nothing to do when it was given open), close it after."""
        if self._opener is None:
            yield
            return
        with self._opener() as served:
            self._served = served
            try:
                yield
            finally:
                self._served = None
