"""Recall: a question in plain words -> the remembered facts that answer it, best first.

The one way through search for every caller: `librarian search`, the MCP tool `search_chunks`,
the prompt hook's endpoint and `librarian eval` all call `recall` and hand on its `SearchResult`.
Recall knows when it knows: when the best ranked session does not reach `min_relevance` the
answer is empty and says so, so a question nothing answers gets "nothing relevant", not five
confident-looking guesses. When it does, the ranked results come as they are, each with its own
relevance: the ranking is better than the relevance at ordering, and a relevant session just
under the threshold, ranked second, is worth seeing (docs/decisions/0010, 0021).
"""

import math
from collections.abc import Sequence

from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.ranking import DEFAULT_BOOSTS, Boosts, RecallContext
from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.recall.search import Layers, Search, SearchMode
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.rows import ChunkResult, EmbeddingSpace, SearchResult

MAX_RESULTS = 50
"""The most chunks one question may ask for."""

NOTHING_RELEVANT = "nothing relevant: no remembered session reaches the relevance threshold"

REEMBED_HOW = (
    "re-embed by ingesting again: `librarian ingest <your transcripts folder>`, or a backfill "
    "of the `ingest_session` job in the Dagster UI (digests are reused, only the vectors are "
    "made again); or set LIBRARIAN_EMBED_PROVIDER / LIBRARIAN_EMBED_MODEL back"
)


SAME_BRANCH_LOGIT = 1.0
"""The same-branch prior: a session of the caller's own feature branch (same project, same
branch, not a trunk) has its relevance's log-odds raised by this much before the threshold is
applied. Earlier work on the branch one is on is likely to bear on its next prompt ("let's answer
the review comments"), so it may pass with less evidence than a stranger: +1.0 lets a relevance
of 0.36 reach the default threshold of 0.6 and leaves a clear miss (0.1 -> 0.23) a miss. The
branch boost ranks such a session first, and the first session decides whether recall answers:
without the prior the hook fell silent on 2.5% more opening prompts of cli + cipher-box; more
than +1.0 changed nothing there or on FitToday (benchmarks/replay.py). The one place relevance is
adjusted for context: see `branch_prior`."""


def branch_prior(relevance: float, logit: float | None = None) -> float:
    """`relevance` with `logit` (default SAME_BRANCH_LOGIT, read when called, so that
    benchmarks/replay.py can try others) added to its log-odds: the same-branch prior."""
    bonus = SAME_BRANCH_LOGIT if logit is None else logit
    p = min(max(relevance, 1e-12), 1 - 1e-12)
    return 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + bonus)))


def _with_prior(hit: ChunkResult, context: RecallContext | None) -> ChunkResult:
    if context is None or hit.context != "branch":  # "branch": the caller's feature branch
        return hit
    return hit.model_copy(update={"score": branch_prior(hit.score)})


class EmbeddingSpaceMismatch(RuntimeError):
    """The store holds memories of other embedding models only: a search would find nothing."""


def space_problem(spaces: Sequence[EmbeddingSpace], model: str, dimension: int) -> str | None:
    """Why the configured embedder cannot search this store, or None when it can.

    Vectors of different models (or dimensions) are never compared: a store whose chunks were
    all made by another model than the configured one has nothing this embedder can find.
    """
    if not spaces or any(s.model == model and s.dimension == dimension for s in spaces):
        return None
    held = ", ".join(f"{s.sessions} session(s) embedded with {s.model} ({s.dimension}-d)"
                     for s in spaces)  # fmt: skip
    return (
        f"the memory holds {held} and none with {model} ({dimension}-d), the configured "
        f"embedder: {REEMBED_HOW}"
    )


def other_spaces(spaces: Sequence[EmbeddingSpace], model: str, dimension: int) -> int:
    """Sessions whose chunks this embedder cannot search (made by another model)."""
    return sum(s.sessions for s in spaces if (s.model, s.dimension) != (model, dimension))


def recall(
    search: Search,
    embedder: Embedder,
    query: str,
    filters: SearchFilters | None = None,
    limit: int = 5,
    *,
    min_relevance: float = DEFAULT_THRESHOLD,
    mode: SearchMode = "hybrid",
    boosts: Boosts = DEFAULT_BOOSTS,
    context: RecallContext | None = None,
    layers: Layers = "both",
) -> SearchResult:
    """Embed the query with `embedder` and search the memories made with the same model.

    `context` (the caller's cwd and branch) ranks its project's sessions first and gives its
    feature branch's sessions the same-branch prior; it filters nothing.
    """
    if not 1 <= limit <= MAX_RESULTS:
        raise ValueError(f"limit must be between 1 and {MAX_RESULTS}, got {limit}")
    # The question is embedded in another thread while the search scores its words (BM25 needs
    # no vector): the two overlap, numpy and psycopg release the interpreter as they work.
    vector = search.embed_meanwhile(embedder.embed_query, query)
    hits = search.find(
        query,
        vector.result,
        embedder.model_name,
        filters or SearchFilters(),
        limit,
        mode=mode,
        boosts=boosts,
        context=context,
        layers=layers,
    )
    hits = [_with_prior(h, context) for h in hits]
    if not hits:
        # Only now: a store searched in the wrong space yields nothing, and says why.
        problem = space_problem(search.embedding_spaces(), embedder.model_name, embedder.dimension)
        if problem:
            raise EmbeddingSpaceMismatch(problem)
    # The best ranked session decides: the gate must not open wider as more results are asked
    # for (an eval's 50, the hook's 3), and the ranking is the better judge of which is best.
    answered = bool(hits) and hits[0].score >= min_relevance
    return SearchResult(
        query=query,
        results=hits if answered else [],
        min_relevance=min_relevance,
        note=None if answered else NOTHING_RELEVANT,
    )
