"""How the candidates' ranked lists become one ranking of sessions.

Reciprocal-rank fusion of the lists, with small boosts (recency, importance) and larger ones for
the caller's own project and branch (`RecallContext`); a session's best chunks across the lists
are the ones it shows.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg.rows import DictRow

from librarian_dagster.core.capture.files import project_of_cwd
from librarian_dagster.core.settings import Settings, default

RRF_K = 60
"""Reciprocal-rank-fusion constant of the chunk votes that pick what a session shows
(`shown_chunks`): 60, the value from Cormack et al. that most hybrid search engines keep."""

SESSION_RRF_K = 5
"""...and of the session votes that rank the sessions (`fuse_sessions`). At 60 the first places of
a list differ by a few percent, so a session that five lists rank middling (10th in each) beat
one that three lists rank first and two miss: a long session, whose mean vector is diluted and
whose detail the digest left out, or one in another language, which BM25 cannot match. At 5 a
first place counts 2.5 times a tenth: MRR 0.860 -> 0.889 on the agents questions' tune split,
0.930 -> 0.939 on the dev golden sets, 0.245 -> 0.298 on golden-far (docs/decisions/0040)."""


@dataclass(frozen=True)
class Boosts:
    """Tie-breakers on a session's fused rank score: recent and important work first.

    The fused score is multiplied by `1 + recency * 0.5 ** (age_days / half_life_days)` and by
    `1 + importance * (importance - 3)` (importance 1 to 5). They are kept below the gap between
    two neighbouring places in the fused lists (about 6.7% at place 10, more above, at
    `SESSION_RRF_K` 5), so they order sessions the lists rank (nearly) alike and never lift a worse
    match over a better one: at 4% the importance boost alone cost MRR 0.934 -> 0.906 on the dev
    questions (then at k 60, where the gap at place 10 was 1.4%). The values are the
    settings' (core/settings.py declares each once); `of` reads them from a `Settings`.
    """

    recency: float = default("recency_boost")
    half_life_days: float = default("recency_half_life_days")
    importance: float = default("importance_boost")
    project: float = default("project_boost")
    """With a `RecallContext`: the fused score of a session of the caller's project is multiplied
    by `1 + project`. Unlike the tie-breakers above, strong enough to lift it over sessions of
    other projects that the lists rank a few places better: of the sessions the prompt hook names
    on the dev store, 95% -> 97% are of the prompt's project (benchmarks/replay.py; 0.25 then, at
    an RRF constant of 60, 1.0 at `SESSION_RRF_K` 5, where places lie further apart)."""
    branch: float = default("branch_boost")
    """...and by `1 + branch` more when it is also of the caller's feature branch (not a trunk).
    As large as it is because a prompt that continues a branch ("review this PR", "why is lint
    failing") has words that rank that branch's earlier sessions 10th to 40th: the hook names one
    in 58% of such sessions without it, 78% at 0.25, 82% at 0.5 (cli + cipher-box; FitToday 33%
    -> 89%), 89% at 1.0 (benchmarks/replay.py, docs/benchmarks.md), all at an RRF constant of 60.
    At `SESSION_RRF_K` 5 it takes 2.0 (with `project` 1.0) to name one as often: 86 of the dev
    store's 101 such sessions at 0.25 / 0.5 then, 88 at 1.0 / 2.0 now (docs/decisions/0040)."""

    @classmethod
    def of(cls, settings: Settings) -> "Boosts":
        return cls(
            recency=settings.recency_boost,
            half_life_days=settings.recency_half_life_days,
            importance=settings.importance_boost,
            project=settings.project_boost,
            branch=settings.branch_boost,
        )

    def of_session(self, age_days: float, importance: float) -> float:
        """What a session's fused score is multiplied by for its age and importance."""
        recency = 1 + self.recency * 0.5 ** (max(age_days, 0.0) / max(self.half_life_days, 1e-6))
        return recency * (1 + self.importance * (importance - MIDDLE_IMPORTANCE))

    def of_context(self, relation: "Relation") -> float:
        """What a session's fused score is multiplied by for being of the caller's project, or
        of its branch too."""
        return (1 + self.project) * (1 + self.branch if relation == "branch" else 1)


MIDDLE_IMPORTANCE = 3
"""A digest's importance is 1 to 5: above the middle is boosted, below it is lowered."""

Relation = Literal["project", "branch"]
"""How a session relates to where the question comes from (`RecallContext`)."""

DEFAULT_BOOSTS = Boosts()


TRUNKS = frozenset({"main", "master", "trunk", "develop", "development", "HEAD"})
"""Branches everyone works on (and `HEAD`, detached): sharing one says nothing about the work."""


def is_feature_branch(branch: str | None) -> bool:
    return bool(branch) and branch not in TRUNKS


@dataclass(frozen=True)
class RecallContext:
    """Where the question is asked from: context for the ranking, never a filter.

    `cwd` names the current project: sessions whose stored cwd is it, inside it or contains it
    (path prefixes on '/' boundaries), or whose project is its project name (the last folder
    name, as ingest names projects). `git_branch`, a feature branch, counts for sessions of that
    project (of any, without a cwd). Sessions that match are ranked up (`Boosts.project`,
    `Boosts.branch`) and say how (`ChunkResult.context`); core/recall/answer.py gives the
    same-branch sessions a prior.
    """

    cwd: str | None = None
    git_branch: str | None = None


Ranked = Sequence[tuple[int, str, float]]
"""(chunk id, session id, score) of one list, best first; the score is the list's own (a cosine
distance, a BM25 score), compared only for equality: equal scores are the same match."""


def session_places(chunks: Ranked) -> list[tuple[str, int]]:
    """The sessions of ranked chunks, each once, at the place (from 1) of its best chunk; a session
    whose best chunk scores the same as the previous session's shares its place (1, 2, 2, 4).

    Ties would otherwise be placed by chunk id: at `SESSION_RRF_K` 5, second place votes 14% less
    than first, more than any tie-breaker (`Boosts`), so identical matches would be ranked by
    id, not by recency or importance."""
    places: list[tuple[str, int]] = []
    seen: set[str] = set()
    previous: float | None = None
    for _, session_id, score in chunks:
        if session_id in seen:
            continue
        seen.add(session_id)
        place = places[-1][1] if places and score == previous else len(places) + 1
        places.append((session_id, place))
        previous = score
    return places


def fuse_sessions(lists: Sequence[tuple[float, Sequence[tuple[str, int]]]]) -> dict[str, float]:
    """Weighted reciprocal-rank fusion: each (weight, sessions at their places) list gives a
    session weight / (SESSION_RRF_K + its place there). Summed exactly (fsum), so equal votes
    tie."""
    votes: dict[str, list[float]] = {}
    for weight, placed in lists:
        for session_id, place in placed:
            votes.setdefault(session_id, []).append(weight / (SESSION_RRF_K + place))
    return {session: math.fsum(v) for session, v in votes.items()}


def shown_chunks(
    lists: Sequence[Ranked], sessions: Sequence[str], per_session: int
) -> dict[str, list[int]]:
    """Per session, its `per_session` chunks voted best across the lists (then by id)."""
    votes: dict[int, list[float]] = {}
    owner: dict[int, str] = {}
    for ranked in lists:
        for rank, (chunk_id, session_id, _) in enumerate(ranked, start=1):
            votes.setdefault(chunk_id, []).append(1.0 / (RRF_K + rank))
            owner[chunk_id] = session_id
    vote = {chunk_id: math.fsum(v) for chunk_id, v in votes.items()}
    shown: dict[str, list[int]] = {s: [] for s in sessions}
    for chunk_id in sorted(vote, key=lambda c: (-vote[c], c)):
        picked = shown.get(owner[chunk_id])
        if picked is not None and len(picked) < per_session:
            picked.append(chunk_id)
    return shown


SECONDS_PER_DAY = 86400


def boosted(
    fused: Mapping[str, float],
    facts: Mapping[str, tuple[float, float]],
    relations: Mapping[str, Relation],
    boosts: Boosts,
    now: float,
) -> dict[str, float]:
    """The fused scores with each session's boosts: for its age and importance (`facts`:
    session -> (importance, when it was written, epoch s); a session written after the facts
    were read gets none until their next refresh), and for being of the caller's project or
    branch (`relations`)."""
    scores = dict(fused)
    for session_id, (importance, dated) in facts.items():
        if session_id in scores:
            age_days = (now - dated) / SECONDS_PER_DAY
            scores[session_id] *= boosts.of_session(age_days, importance)
    for session_id, relation in relations.items():
        if session_id in scores:
            scores[session_id] *= boosts.of_context(relation)
    return scores


def best(scores: Mapping[str, float], limit: int) -> list[str]:
    """The `limit` best sessions, score descending, then by id."""
    return sorted(scores, key=lambda s: (-scores[s], s))[:limit]


def context_relations(
    conn: psycopg.Connection[DictRow], context: RecallContext, sessions: Sequence[str]
) -> dict[str, Relation]:
    """Which of `sessions` are of the context's project ("project"), and of its branch too
    ("branch"); see RecallContext. Sessions of neither are left out."""
    cwd = (context.cwd or "").rstrip("/")
    branch = context.git_branch if is_feature_branch(context.git_branch) else None
    # A cwd of "/" contains every path: it names no project, and the root is nobody's project.
    project = project_of_cwd(cwd) if cwd else None
    rows = conn.execute(
        """
        SELECT m.session_id,
               %(cwd)s::text <> '' AND (
                   m.project = %(project)s::text OR rtrim(m.cwd, '/') = %(cwd)s::text
                   OR starts_with(m.cwd, %(cwd)s::text || '/')
                   OR (rtrim(m.cwd, '/') <> ''
                       AND starts_with(%(cwd)s::text, rtrim(m.cwd, '/') || '/'))
               ) AS in_project,
               m.git_branch = %(branch)s::text AS same_branch
        FROM memories m WHERE m.session_id = ANY(%(sessions)s)
        """,
        {"cwd": cwd, "project": project, "branch": branch, "sessions": sessions},
    ).fetchall()
    relations: dict[str, Relation] = {}
    for row in rows:
        if row["same_branch"] and (row["in_project"] or not cwd):
            relations[row["session_id"]] = "branch"
        elif row["in_project"]:
            relations[row["session_id"]] = "project"
    return relations
