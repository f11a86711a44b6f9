"""What a ranked session shows: its facts, its relevance judged from its best cosines to the
question, its chunks voted best and a few distilled lines of its digest (`highlights`)."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import DictRow

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.distil import cut
from librarian_dagster.core.recall.ranking import Relation
from librarian_dagster.core.recall.relevance import Evidence, SpaceCalibration, relevance
from librarian_dagster.core.store.queries import VISIBLE, ours
from librarian_dagster.core.store.rows import ChunkResult

HIGHLIGHTS = 3
"""Digest lines a result carries for its session (`ChunkResult.highlights`)..."""
HIGHLIGHT_CHARS = 200
"""...each at most this long: the prompt hook shows several sessions in 1,500 characters."""
# What a session found, decided or fixed, in that order: `worked_on` is left out (the offline
# digester fills it with the session's own prompts, not with what came of them).
_HIGHLIGHT_SECTIONS = ("solution", "problem", "open_items")


def highlights(facts: dict[str, Any], shown: Sequence[dict[str, Any]]) -> list[str]:
    """The session's best distilled lines: its shown digest bullets (the ones that matched the
    query) first, then the first bullets of solution, problem and open items, taken in turn."""
    found = [c["text"] for c in shown if c["section"] in _HIGHLIGHT_SECTIONS]
    sections = [b if isinstance(b, list) else [] for b in map(facts.get, _HIGHLIGHT_SECTIONS)]
    for row in range(max(map(len, sections), default=0)):
        found += [bullets[row] for bullets in sections if row < len(bullets)]
    lines: list[str] = []
    for text in found:
        line = cut(str(text), HIGHLIGHT_CHARS)
        if line and line not in lines:
            lines.append(line)
        if len(lines) == HIGHLIGHTS:
            break
    return lines


Judged = Callable[[str, Evidence, SpaceCalibration], None]
"""Told each ranked session's relevance evidence, best first (benchmarks/fit_relevance.py)."""


def session_facts(
    conn: psycopg.Connection[DictRow], dim: int, params: dict[str, Any]
) -> dict[str, DictRow]:
    """The facts of the `top` sessions a result shows, and their best cosines to the question
    (the relevance's evidence), by session."""
    rows = conn.execute(
        ours(f"""
        SELECT m.session_id, m.project, m.agent, m.person,
               COALESCE(m.ended_at, m.started_at) AS date,
               m.summary, m.domain, m.tags, e.exchange_cosine, e.digest_cosine,
               1 - (v.embedding::vector({dim}) <=> %(vector)s::vector({dim}))
                   AS session_cosine,
               m.title, m.git_branch, m.started_at, m.files,
               m.digest -> 'solution' AS solution,
               m.digest -> 'problem' AS problem, m.digest -> 'open_items' AS open_items
        FROM memories m JOIN (
            SELECT c.session_id,
                   MAX(1 - (c.embedding::vector({dim}) <=> %(vector)s::vector({dim})))
                       FILTER (WHERE c.section = '{EXCHANGE}') AS exchange_cosine,
                   MAX(1 - (c.embedding::vector({dim}) <=> %(vector)s::vector({dim})))
                       FILTER (WHERE c.section <> '{EXCHANGE}') AS digest_cosine
            FROM indexed_chunks c
            WHERE c.session_id = ANY(%(top)s) AND c.embedding_dim = {dim}
            GROUP BY c.session_id
        ) e USING (session_id)
        LEFT JOIN session_vectors v
            ON v.session_id = m.session_id AND v.embedding_model = %(model)s
               AND v.embedding_dim = {dim}
        WHERE m.session_id = ANY(%(top)s)
              -- Written private since the facts were read: still never shown.
              AND {VISIBLE}
        """),
        params,
    )
    return {r["session_id"]: r for r in rows}


def chunk_texts(conn: psycopg.Connection[DictRow], ids: Sequence[int]) -> dict[int, DictRow]:
    rows = conn.execute(
        "SELECT id, section, position, text FROM indexed_chunks WHERE id = ANY(%s)", (list(ids),)
    )
    return {r["id"]: r for r in rows}


def session_results(
    top: Sequence[str],
    facts: Mapping[str, DictRow],
    shown: Mapping[str, Sequence[int]],
    texts: Mapping[int, DictRow],
    relations: Mapping[str, Relation],
    unseen: float,
    calibration: SpaceCalibration,
    judged: Judged | None = None,
) -> list[ChunkResult]:
    """The shown chunks of each of the `top` sessions, best session first, each carrying its
    session's relevance (its best cosines to the question, the share of the question's names
    the store does not hold, against this space's `calibration`) as its score."""
    results = []
    for session_id in top:
        session = facts.get(session_id)
        if session is None:  # no chunk of this dimension: nothing to judge it by
            continue
        evidence = Evidence(
            exchange_cosine=session["exchange_cosine"],
            digest_cosine=session["digest_cosine"],
            session_cosine=session["session_cosine"],
            unseen=unseen,
        )
        score = relevance(evidence, calibration)
        if judged is not None:
            judged(session_id, evidence, calibration)
        lines = highlights(session, [texts[i] for i in shown[session_id]])
        for chunk_id in shown[session_id]:
            chunk = texts[chunk_id]
            results.append(ChunkResult(
                text=chunk["text"], score=score, session_id=session_id,
                section=chunk["section"], position=chunk["position"],
                project=session["project"], agent=session["agent"], person=session["person"],
                date=session["date"],
                summary=session["summary"],
                domain=session["domain"], tags=session["tags"], title=session["title"],
                git_branch=session["git_branch"], highlights=lines,
                started_at=session["started_at"], files=session["files"],
                context=relations.get(session_id),
            ))  # fmt: skip
    return results
