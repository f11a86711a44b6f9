"""The candidates of a question: the ranked lists its sessions come from, each with its vote.

By vector (cosine over the HNSW indexes) for each layer, digest bullets and exchanges, and for
the sessions as a whole (their mean vectors); by BM25 (core/recall/lexical.py) for each layer.
Each list gives a session one vote, at the place of its best chunk there (core/recall/ranking.py
fuses them).
"""

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Literal

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.recall.lexical import BM25Lists
from librarian_dagster.core.recall.ranking import Ranked, session_places
from librarian_dagster.core.recall.terms import QuestionTerms
from librarian_dagster.core.store.pool import CANDIDATES, Database
from librarian_dagster.core.store.queries import ours, vector_literal

SearchMode = Literal["hybrid", "vector", "text"]
"""Both kinds of list fused (the product), or one alone (to measure what each brings)."""

Layers = Literal["both", "bullets", "exchanges"]
"""Which layers a search reads: both (the product), or one alone (to measure what each brings:
`librarian eval --layer`). The sessions' mean vectors are the exchange layer's."""


@dataclass(frozen=True)
class Scope:
    """What a search may read: the caller's filters as SQL (`where`, our own text, with its
    values in `params`), and which layers."""

    where: str
    params: dict[str, Any]
    layers: Layers

    @property
    def bullets(self) -> bool:
        return self.layers != "exchanges"

    @property
    def exchanges(self) -> bool:
        return self.layers != "bullets"


@dataclass
class Candidates:
    chunks: list[Ranked] = field(default_factory=list)
    """The lists of chunks, from which each session's best are picked to be shown."""
    sessions: list[tuple[float, Sequence[tuple[str, int]]]] = field(default_factory=list)
    """(vote, sessions at their places) for each list, fused into one ranking."""

    def add(self, ranked: Ranked, vote: float, *, chunks: bool = True) -> None:
        if chunks:
            self.chunks.append(ranked)
        self.sessions.append((vote, session_places(ranked)))


def start_vector_lists(
    reads: Executor,
    database: Database,
    embedding: Callable[[], Sequence[float]],
    scope: Scope,
) -> tuple[Future[Ranked], Future[Ranked], Future[Ranked]]:
    """The `CANDIDATES` nearest bullets, exchanges and whole sessions, started on `reads` (each
    on a connection of its own, each waiting for the question's vector) while the caller scores
    BM25: three index scans at once on three server processes, beside the numpy work. A layer
    not in `scope` gives an empty list."""

    def nearest(table: str, layer: str) -> Ranked:
        vector = embedding()
        dim = len(vector)
        # Only a filter needs the memories row: without one the plan is the index scan alone.
        source = f"{table} c JOIN memories m USING (session_id)" if scope.where else f"{table} c"
        key = "c.id" if table == "indexed_chunks" else "0"
        distance = f"c.embedding::vector({dim}) <=> %(vector)s::vector({dim})"
        with database.connection() as conn:
            rows = conn.execute(
                ours(f"""
                SELECT {key} AS id, c.session_id, {distance} AS distance FROM {source}
                WHERE c.embedding_model = %(model)s AND c.embedding_dim = {dim} {layer}
                      AND c.session_id <> ALL(%(hidden)s::text[]) {scope.where}
                ORDER BY {distance} LIMIT {CANDIDATES}
                """),
                {**scope.params, "vector": vector_literal(vector)},
            ).fetchall()
        rows.sort(key=lambda r: (r["distance"], r["id"], r["session_id"]))
        return [(r["id"], r["session_id"], r["distance"]) for r in rows]

    def started(wanted: bool, table: str, layer: str) -> Future[Ranked]:
        return reads.submit(nearest, table, layer) if wanted else reads.submit(list)

    return (
        started(scope.bullets, "indexed_chunks", f"AND c.section <> '{EXCHANGE}'"),
        started(scope.exchanges, "indexed_chunks", f"AND c.section = '{EXCHANGE}'"),
        started(scope.exchanges, "session_vectors", ""),
    )


def gather(
    vector: tuple[Future[Ranked], ...] | None,
    scored: BM25Lists | None,
    terms: QuestionTerms,
    scope: Scope,
    mode: SearchMode,
) -> Candidates:
    """The lists of a search, with their votes: one each for the vector lists; for the BM25
    lists, in hybrid mode, the share of the question's idf mass its best chunk holds. A question
    in a user's own words, which shares few words with the session that answers it, is then
    ranked by meaning, not by the chunks that happen to share its filler words
    (docs/decisions/0021)."""
    candidates = Candidates()
    if vector is not None:
        bullets, exchanges, whole = (lists.result() for lists in vector)
        candidates.add(bullets, 1.0)
        candidates.add(exchanges, 1.0)
        candidates.add(whole, 1.0, chunks=False)
    if scored is not None:
        vote = (terms.share(scored.best_covered) or 0.0) if mode == "hybrid" else 1.0
        for wanted, exchange in ((scope.bullets, False), (scope.exchanges, True)):
            candidates.add(scored.top(exchange, CANDIDATES) if wanted else [], vote)
    return candidates
