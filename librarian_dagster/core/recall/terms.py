"""A question's terms: its lexemes with their BM25 idf, the names in it that no chunk holds, and
the collection's statistics the lexical lists need, read in one row kept at write time."""

import math
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow

from librarian_dagster.core.recall.relevance import named_terms

# A question's distinct lexemes with their BM25 idf, those of its names that no chunk holds
# (core/recall/relevance.py), the collection's mean chunk length and the generation the postings
# must be at: one row, from the statistics kept at write time.
_QUERY_TERMS = """
    WITH query_lexemes AS (
        SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(text)s)) u
    ),
    named_lexemes AS (
        SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', %(named)s)) u
    ),
    corpus AS (
        SELECT generation, GREATEST(chunks, 1)::float8 AS n,
               GREATEST(total_length::float8 / GREATEST(chunks, 1), 1) AS avgdl
        FROM chunk_stats
    )
    SELECT corpus.generation, corpus.avgdl, corpus.n AS chunks,
           array_agg(q.lexeme ORDER BY q.lexeme) FILTER (WHERE q.lexeme IS NOT NULL) AS lexemes,
           array_agg(ln(1 + (corpus.n - COALESCE(d.df, 0) + 0.5) / (COALESCE(d.df, 0) + 0.5))
                     ORDER BY q.lexeme) FILTER (WHERE q.lexeme IS NOT NULL) AS idfs,
           array_agg(q.lexeme) FILTER (WHERE COALESCE(d.df, 0) = 0
                                       AND q.lexeme IN (SELECT lexeme FROM named_lexemes)) AS unseen
    FROM corpus LEFT JOIN query_lexemes q ON true LEFT JOIN lexeme_df d ON d.lexeme = q.lexeme
    GROUP BY corpus.generation, corpus.avgdl, corpus.n
"""

# Whether any of a text's lexemes is in some chunk: is any of a rare word's one-edit variants
# ("gitleaks" for "gitlaeks") a word the store holds?
_ANY_HELD = """
    SELECT EXISTS (
        SELECT 1 FROM unnest(to_tsvector('english', %(text)s)) u
        JOIN lexeme_df d ON d.lexeme = u.lexeme WHERE d.df > 0
    ) AS held
"""


@dataclass(frozen=True)
class QuestionTerms:
    generation: int
    """The store's write generation the lexical index must be at to score them."""
    avgdl: float
    """The mean chunk length, in lexemes."""
    chunks: int
    idf: dict[str, float]
    """The question's distinct lexemes and their BM25 idf."""
    unseen: tuple[str, ...]
    """The lexemes of the question's names that no chunk holds."""

    @property
    def total_idf(self) -> float | None:
        return math.fsum(self.idf.values()) or None

    def share(self, part: float | None) -> float | None:
        """`part` as a share of the question's idf mass (None: no mass to share)."""
        whole = self.total_idf
        return part / whole if part is not None and whole else None

    def unseen_share(self) -> float:
        """The share of the question's idf mass in names the store does not hold: evidence
        that it asks about something never remembered (core/recall/relevance.py)."""
        return self.share(math.fsum(self.idf[lexeme] for lexeme in self.unseen)) or 0.0


def question_terms(conn: psycopg.Connection[DictRow], text: str) -> QuestionTerms:
    def store_holds(words: set[str]) -> bool:
        row = conn.execute(_ANY_HELD, {"text": " ".join(words)}).fetchone()
        return bool(row and row["held"])

    named = named_terms(text, store_holds)
    row = conn.execute(_QUERY_TERMS, {"text": text, "named": named}).fetchone()
    assert row is not None  # chunk_stats always holds its one row
    return QuestionTerms(
        generation=row["generation"],
        avgdl=row["avgdl"],
        chunks=int(row["chunks"]),
        idf=dict(zip(row["lexemes"] or (), row["idfs"] or (), strict=True)),
        unseen=tuple(row["unseen"] or ()),
    )
