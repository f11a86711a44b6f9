"""Recall: a question in plain words -> the remembered facts that answer it, best first.

The one way through search for every caller: `librarian search` and the MCP tool `search_chunks`
both call `recall` and hand on its `SearchResult` as it is.
"""

from librarian_dagster.core.embeddings import Embedder
from librarian_dagster.core.models import SearchResult
from librarian_dagster.core.store import SearchFilters, Store

MAX_RESULTS = 50
"""The most chunks one question may ask for."""


def recall(
    store: Store,
    embedder: Embedder,
    query: str,
    filters: SearchFilters | None = None,
    limit: int = 5,
) -> SearchResult:
    """Embed the query with `embedder` and search the memories made with the same model."""
    if not 1 <= limit <= MAX_RESULTS:
        raise ValueError(f"limit must be between 1 and {MAX_RESULTS}, got {limit}")
    vector = embedder.embed_query(query)
    hits = store.search(query, vector, embedder.model_name, filters or SearchFilters(), limit)
    return SearchResult(query=query, results=hits)
