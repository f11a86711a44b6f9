"""A naive index over the same sessions, built in memory: the reference recall is measured against.

What a plain retrieval setup would do with the sessions, with none of Librarian's own choices (no
digest, no windows, no ranking boosts, no relevance threshold):

- one chunk per typed prompt and one per final reply (the main agent's last text before the next
  prompt) of each session; the embedder reads the head of a long one (MiniLM: 256 tokens), BM25
  all of it;
- the configured embedder (cosine) and Okapi BM25 over lowercase word tokens each rank every
  chunk; reciprocal rank fusion (k=60) joins the two lists;
- sessions are ranked by their best chunk. It always answers: it has no abstention to measure.

The texts come from the redacted sessions the pipeline staged; a session with no readable staged
file falls back to its exchange chunks in the store (each starts with the head of its prompt).
Nothing here imports dagster.
"""

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import TypeAdapter, ValidationError

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.offline import exchanges
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.lexical import BM25_B, BM25_K1
from librarian_dagster.core.store.memories import Memories

RRF_K = 60
"""Reciprocal rank fusion's constant, as Cormack et al. set it: a chunk at place r adds 1/(60+r)."""
_EMBED_BATCH = 256  # texts per embedding call: bounded memory, whatever the store's size
_WORD = re.compile(r"\w+")
_SESSION = TypeAdapter(Session)


def session_texts(session: Session) -> list[str]:
    """A session's typed prompts and final replies, in order, each once."""
    texts: list[str] = []
    for exchange in exchanges(session.turns):
        texts.append(exchange.prompt.strip())
        if exchange.replies:
            texts.append(exchange.replies[-1].strip())
    return list(dict.fromkeys(t for t in texts if t))


def read_staged_session(path: Path) -> Session | None:
    """The redacted session staged at `path`; None when it is missing or not a session."""
    try:
        return _SESSION.validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


@dataclass(frozen=True)
class Documents:
    """The texts the naive index holds, by session, and where they came from."""

    texts: Mapping[str, Sequence[str]]
    staged: int
    """Sessions whose prompts and replies came from their staged redacted session."""
    from_chunks: int
    """Sessions with no readable staged file, whose exchange chunks stood in."""


def gather_documents(
    memories: Memories, session_ids: Iterable[str], staged_path: Callable[[str], Path]
) -> Documents:
    """Each session's prompts and final replies from its staged file (`staged_path(id)`), else
    its exchange chunks from the store."""
    texts: dict[str, Sequence[str]] = {}
    missing: list[str] = []
    for session_id in session_ids:
        session = read_staged_session(staged_path(session_id))
        if session is None:
            missing.append(session_id)
        else:
            texts[session_id] = session_texts(session)
    stand_ins = memories.exchange_texts(missing) if missing else {}
    for session_id in missing:
        texts[session_id] = stand_ins.get(session_id, [])
    return Documents(texts, staged=len(texts) - len(missing), from_chunks=len(missing))


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Bm25:
    """Okapi BM25 over in-memory documents (Lucene's idf, never negative)."""

    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        self._size = len(documents)
        lengths = np.array([len(d) for d in documents], dtype=np.float64)
        mean = float(lengths.mean()) if self._size else 0.0
        self._norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / max(mean, 1.0))
        rows: dict[str, list[int]] = {}
        counts: dict[str, list[int]] = {}
        for row, document in enumerate(documents):
            for term, tf in Counter(document).items():
                rows.setdefault(term, []).append(row)
                counts.setdefault(term, []).append(tf)
        self._postings = {
            term: (np.array(rows[term]), np.array(counts[term], dtype=np.float64)) for term in rows
        }

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """Each document's score for the query's distinct terms (0 where it holds none)."""
        scores = np.zeros(self._size)
        for term in dict.fromkeys(query):
            posting = self._postings.get(term)
            if posting is None:
                continue
            rows, tf = posting
            idf = math.log(1 + (self._size - len(rows) + 0.5) / (len(rows) + 0.5))
            scores[rows] += idf * tf * (BM25_K1 + 1) / (tf + self._norm[rows])
        return scores


class NaiveIndex:
    """The chunks of `documents` (session id -> texts), embedded and indexed for BM25."""

    def __init__(self, documents: Mapping[str, Sequence[str]], embedder: Embedder) -> None:
        pairs = [(s, t) for s, texts in documents.items() for t in texts]
        self.sessions = [s for s, _ in pairs]
        self.chunks = len(pairs)
        self._embedder = embedder
        texts = [t for _, t in pairs]
        vectors = [
            v
            for start in range(0, len(texts), _EMBED_BATCH)
            for v in embedder.embed_documents(texts[start : start + _EMBED_BATCH])
        ]
        self._vectors = np.array(vectors, dtype=np.float32).reshape(len(texts), embedder.dimension)
        self._bm25 = Bm25([tokens(t) for t in texts])

    def ask(self, query: str) -> list[str]:
        """Every session holding a chunk, best first (fused score of its best chunk, then id)."""
        if not self.chunks:
            return []
        # Unit vectors (the Embedder contract): the dot product is the cosine.
        cosine = self._vectors @ np.array(self._embedder.embed_query(query), dtype=np.float32)
        fused = np.zeros(self.chunks)
        fused[np.argsort(-cosine, kind="stable")] += 1.0 / (RRF_K + np.arange(1, self.chunks + 1))
        lexical = self._bm25.scores(tokens(query))
        held = np.flatnonzero(lexical > 0)  # a chunk without a query word is not in BM25's list
        ranked = held[np.argsort(-lexical[held], kind="stable")]
        fused[ranked] += 1.0 / (RRF_K + np.arange(1, len(ranked) + 1))
        best: dict[str, float] = {}
        for row in np.argsort(-fused, kind="stable"):
            best.setdefault(self.sessions[row], float(fused[row]))
        return sorted(best, key=lambda s: (-best[s], s))
