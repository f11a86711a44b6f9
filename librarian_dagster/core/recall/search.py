"""Hybrid search over the memories: which sessions best answer a question, and how sure it is.

The stages, each a module of its own: the question's terms (core/recall/terms.py), the candidate
lists by vector and by BM25 (core/recall/candidates.py, core/recall/lexical.py), their fusion and
boosts (core/recall/ranking.py), the relevance judged against the space's background
(core/recall/calibration.py, core/recall/relevance.py), and what each session shows
(core/recall/results.py). Vectors find paraphrases; BM25 finds the exact identifiers (function
names, error strings) that developers type and that a small embedding model blurs.
"""

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from psycopg.rows import class_row

from librarian_dagster.core.recall.calibration import Calibrations
from librarian_dagster.core.recall.candidates import (
    Candidates,
    Layers,
    Scope,
    SearchMode,
    gather,
    start_vector_lists,
)
from librarian_dagster.core.recall.lexical import LexicalIndex, LexicalLists
from librarian_dagster.core.recall.ranking import (
    DEFAULT_BOOSTS,
    Boosts,
    RecallContext,
    best,
    boosted,
    context_relations,
    fuse_sessions,
    shown_chunks,
)
from librarian_dagster.core.recall.relevance import load_word_lists
from librarian_dagster.core.recall.results import (
    Judged,
    chunk_texts,
    session_facts,
    session_results,
)
from librarian_dagster.core.recall.terms import QuestionTerms, question_terms
from librarian_dagster.core.store.pool import CANDIDATES, Database
from librarian_dagster.core.store.queries import (
    NO_FILTERS,
    SearchFilters,
    filter_sql,
    ours,
    vector_literal,
    visible,
)
from librarian_dagster.core.store.rows import ChunkResult, EmbeddingSpace

__all__ = ["Layers", "Search", "SearchMode"]

SIDE_READS = 6
"""Threads that run searches' vector lists, each on a connection of its own, while the search's
own thread scores BM25: two searches' three lists at once."""

EMBEDDERS = 4
"""Threads that embed questions while their words are scored: as many as can usefully run on a
small machine; more questions at once wait their turn rather than share the cores."""


class Search:
    """Hybrid search over the shared pool, with what it keeps in memory between questions: the
    BM25 postings, each embedding space's calibration, and the threads of its vector lists and
    of its questions' embeddings (`close` ends them; the store closes its search).

    No thread holds a connection while it waits for another thread's: a search takes one for
    each step in turn, so searches at once never wait on each other for the pool.
    """

    def __init__(
        self,
        database: Database,
        postings_dir: Path | None = None,
        lexical: LexicalLists | None = None,
    ) -> None:
        """`postings_dir`: where the BM25 postings are kept between processes (None: nowhere,
        each process loads them from the store). `lexical`: another lexical index than ours
        (`LexicalIndex`), to measure one against the other."""
        self._db = database
        self._lexical = lexical or LexicalIndex(postings_dir)
        self._calibrations = Calibrations()
        self._reads = ThreadPoolExecutor(SIDE_READS, thread_name_prefix="librarian-read")
        self._embedding = ThreadPoolExecutor(EMBEDDERS, thread_name_prefix="librarian-embed")

    def close(self) -> None:
        self._reads.shutdown(wait=False, cancel_futures=True)
        self._embedding.shutdown(wait=False, cancel_futures=True)

    def embed_meanwhile(
        self, embed: Callable[[str], Sequence[float]], text: str
    ) -> Future[Sequence[float]]:
        """`embed(text)` started on this search's embedding threads: a question's vector made
        while its words are scored (numpy and ONNX Runtime release the interpreter)."""
        return self._embedding.submit(embed, text)

    def find(
        self,
        query_text: str,
        query_embedding: Sequence[float] | Callable[[], Sequence[float]],
        embedding_model: str,
        filters: SearchFilters = NO_FILTERS,
        limit: int = 5,
        max_per_session: int = 2,
        mode: SearchMode = "hybrid",
        boosts: Boosts = DEFAULT_BOOSTS,
        layers: Layers = "both",
        judged: Judged | None = None,
        context: RecallContext | None = None,
    ) -> list[ChunkResult]:
        """Chunks of the sessions that best answer a query, best session first.

        Sessions are ranked by reciprocal-rank fusion of five lists: each layer (digest bullets,
        exchanges) by vector and by BM25, and the sessions as a whole by vector. `mode` keeps
        the vector or the text lists alone, and `layers` one layer, to measure what each brings.
        Each session's chunks carry its relevance as their score; at most `max_per_session`
        chunks of one session are returned, the ones ranked best across the lists, so one long
        session cannot fill the answer.

        `query_embedding` may be a callable that waits for the vector (core/recall/answer.py
        embeds while BM25 is scored): it is called only once the vector is needed. `judged`,
        when given, is told each ranked session's relevance evidence, best first. `context`
        (where the question comes from) ranks the caller's project and branch first; it filters
        nothing.
        """
        embedding = query_embedding if callable(query_embedding) else lambda: query_embedding
        terms, scope, allowed = self._question(query_text, embedding_model, filters, layers)
        candidates = self._candidates(
            terms, scope, allowed, embedding, embedding_model, filters, mode
        )
        fused = fuse_sessions(candidates.sessions)
        if not fused:
            return []
        vector = embedding()
        with self._db.connection() as conn:
            relations = context_relations(conn, context, list(fused)) if context else {}
            scores = boosted(
                fused, self._lexical.session_facts(fused), relations, boosts, time.time()
            )
            top = best(scores, limit)
            shown = shown_chunks(candidates.chunks, top, max_per_session)
            # A copy: the vector lists' threads read scope.params too.
            asked = {**scope.params, "vector": vector_literal(vector), "top": top}
            facts = session_facts(conn, len(vector), asked)
            texts = chunk_texts(conn, [i for ids in shown.values() for i in ids])
            calibration = self._calibrations.of(conn, embedding_model, len(vector), terms.chunks)
        results = session_results(
            top, facts, shown, texts, relations, terms.unseen_share(), calibration, judged
        )
        return results[:limit]

    def _question(
        self, query_text: str, model: str, filters: SearchFilters, layers: Layers
    ) -> tuple[QuestionTerms, Scope, set[str] | None]:
        """The question's terms, what the search may read, and the sessions the caller's
        filters allow (None: any), with the postings brought up to the store's generation."""
        # Private sessions (those not the viewer's) and the agent are left out of the BM25 lists
        # through the in-memory session facts (no join, no list of every other session); the
        # caller's other filters, when any, in SQL. The vector lists take them all in SQL, the
        # private sessions as the `hidden` list.
        where, params = filter_sql(replace(filters, include_private=True, viewer=None))
        others, others_params = filter_sql(
            replace(filters, include_private=True, viewer=None, agent=None)
        )
        with self._db.connection() as conn:
            terms = question_terms(conn, query_text)
            self._lexical.refresh(conn, terms.generation)
            allowed = None
            if others:  # our own text (fixed clauses, values as named parameters)
                chosen = ours(f"SELECT m.session_id FROM memories m WHERE TRUE {others}")
                allowed = {r["session_id"] for r in conn.execute(chosen, others_params)}
        hidden = _hidden(self._lexical, filters)
        params |= {
            "model": model,
            "hidden": hidden,
            **visible(filters.include_private, filters.viewer),
        }
        return terms, Scope(where, params, layers), allowed

    def _candidates(
        self,
        terms: QuestionTerms,
        scope: Scope,
        allowed: set[str] | None,
        embedding: Callable[[], Sequence[float]],
        model: str,
        filters: SearchFilters,
        mode: SearchMode,
    ) -> Candidates:
        # The vector lists run on their side connections (PostgreSQL's processes) while this
        # thread scores BM25 (numpy): at a million chunks each takes some 20 ms, now at once.
        vector = (
            start_vector_lists(self._reads, self._db, embedding, scope) if mode != "text" else None
        )
        scored = None
        if mode != "vector":
            scored = self._lexical.score(
                list(terms.idf.items()),
                terms.avgdl,
                model,
                allowed,
                filters.include_private,
                pool=CANDIDATES,
                agent=filters.agent,
                viewer=filters.viewer,
            )
        return gather(vector, scored, terms, scope, mode)

    def warm_up(self) -> None:
        """Load what search keeps in memory (the BM25 postings, the word lists that tell jargon)
        now, not at the first question.

        A long-lived reader (the recall server) calls it at start; at 100,000 chunks it takes
        a few seconds, which the first question would otherwise wait for.
        """
        # The word lists (Python's own work) are read while the refresh waits on the store:
        # at a million chunks each takes about half a second.
        words = threading.Thread(target=load_word_lists, daemon=True)
        words.start()
        with self._db.connection() as conn:
            row = conn.execute("SELECT generation FROM chunk_stats").fetchone()
            self._lexical.refresh(conn, row["generation"] if row else 0)
        words.join()

    def keep_postings(self) -> None:
        """Bring the BM25 postings kept between processes up to the store (the `memory` stage
        calls it after each run's writes): a process that starts after a backfill then maps
        them all instead of loading every posting (docs/decisions/0041). Nothing without a
        postings folder or with another lexical index."""
        if not isinstance(self._lexical, LexicalIndex):
            return
        with self._db.connection() as conn:
            self._lexical.keep(conn)

    def embedding_spaces(self) -> list[EmbeddingSpace]:
        """Which embedding models (and dimensions) the stored chunks were made with."""
        with (
            self._db.connection() as conn,
            conn.cursor(row_factory=class_row(EmbeddingSpace)) as cur,
        ):
            return cur.execute(
                """
                SELECT embedding_model AS model, embedding_dim AS dimension,
                       COUNT(DISTINCT session_id) AS sessions, COUNT(*) AS chunks
                FROM indexed_chunks GROUP BY embedding_model, embedding_dim
                ORDER BY COUNT(*) DESC, embedding_model
                """
            ).fetchall()


def _hidden(lexical: LexicalLists, filters: SearchFilters) -> list[str]:
    """The private sessions the caller may not read: every one without the private scope,
    none for this machine's own reading, those of other people for a token's person."""
    if not filters.include_private:
        return lexical.private_sessions()
    return lexical.private_sessions(filters.viewer) if filters.viewer is not None else []
