"""Recall: a question in plain words -> the remembered facts that answer it, best first.

The one way through search for every caller: `librarian search`, the MCP tool `search_chunks`,
the prompt hook's endpoint and `librarian eval` all call `recall` and hand on its `SearchResult`.
Results below `min_relevance` are left out, and an empty answer says so: a question nothing
answers gets "nothing relevant", not five confident-looking guesses.
"""

from librarian_dagster.core.embeddings import Embedder
from librarian_dagster.core.models import SearchResult
from librarian_dagster.core.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import (
    DEFAULT_BOOSTS,
    Boosts,
    SearchFilters,
    SearchMode,
    Store,
)

MAX_RESULTS = 50
"""The most chunks one question may ask for."""

NOTHING_RELEVANT = "nothing relevant: no remembered session passes the relevance threshold"


def boosts_for(settings: Settings) -> Boosts:
    """The ranking boosts the settings ask for (LIBRARIAN_RECENCY_BOOST, ..._IMPORTANCE_BOOST)."""
    return Boosts(recency=settings.recency_boost, importance=settings.importance_boost)


def recall(
    store: Store,
    embedder: Embedder,
    query: str,
    filters: SearchFilters | None = None,
    limit: int = 5,
    *,
    min_relevance: float = DEFAULT_THRESHOLD,
    mode: SearchMode = "hybrid",
    boosts: Boosts = DEFAULT_BOOSTS,
) -> SearchResult:
    """Embed the query with `embedder` and search the memories made with the same model."""
    if not 1 <= limit <= MAX_RESULTS:
        raise ValueError(f"limit must be between 1 and {MAX_RESULTS}, got {limit}")
    vector = embedder.embed_query(query)
    hits = store.search(
        query,
        vector,
        embedder.model_name,
        filters or SearchFilters(),
        limit,
        mode=mode,
        boosts=boosts,
    )
    relevant = [h for h in hits if h.score >= min_relevance]
    return SearchResult(
        query=query,
        results=relevant,
        min_relevance=min_relevance,
        note=None if relevant else NOTHING_RELEVANT,
    )
