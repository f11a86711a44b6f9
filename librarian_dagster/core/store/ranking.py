"""How search's ranked lists become one ranking of sessions, and what a result shows of its session.

Reciprocal-rank fusion of the lists, with small boosts (recency, importance) and larger ones for
the caller's own project and branch (`RecallContext`); a session's best chunks across the lists
are the ones shown, with a few distilled lines of its digest (`highlights`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from librarian_dagster.core.digest.distil import cut

# Reciprocal-rank-fusion constant: 60 is the value from Cormack et al. that most hybrid
# search engines keep; it damps the difference between the first few ranks of either list.
RRF_K = 60


@dataclass(frozen=True)
class Boosts:
    """Tie-breakers on a session's fused rank score: recent and important work first.

    The fused score is multiplied by `1 + recency * 0.5 ** (age_days / half_life_days)` and by
    `1 + importance * (importance - 3)` (importance 1 to 5). They are kept below the gap between
    two neighbouring places in the fused lists (about 1.4% at place 10, more above), so they order
    sessions the lists rank (nearly) alike and never lift a worse match over a better one: at 4%
    the importance boost alone cost MRR 0.934 -> 0.906 on the dev questions.
    """

    recency: float = 0.005
    half_life_days: float = 90.0
    importance: float = 0.002
    project: float = 0.25
    """With a `RecallContext`: the fused score of a session of the caller's project is multiplied
    by `1 + project`. Unlike the tie-breakers above, strong enough to lift it over sessions of
    other projects that the lists rank a few places better: of the sessions the prompt hook names
    on the dev store, 95% -> 97% are of the prompt's project (benchmarks/replay.py)."""
    branch: float = 0.5
    """...and by `1 + branch` more when it is also of the caller's feature branch (not a trunk).
    As large as it is because a prompt that continues a branch ("review this PR", "why is lint
    failing") has words that rank that branch's earlier sessions 10th to 40th: the hook names one
    in 58% of such sessions without it, 78% at 0.25, 82% at 0.5 (cli + cipher-box; FitToday 33%
    -> 89%), 89% at 1.0 (benchmarks/replay.py, docs/benchmarks.md)."""


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


def sessions_of(chunks: Sequence[tuple[int, str]]) -> list[str]:
    """The sessions of ranked chunks, each once, at the place of its best chunk."""
    return list(dict.fromkeys(session for _, session in chunks))


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


def fuse_sessions(lists: Sequence[tuple[float, Sequence[str]]]) -> dict[str, float]:
    """Weighted reciprocal-rank fusion: each (weight, ranked sessions) list gives a session
    weight / (k + its place there). Summed exactly (fsum), so equal votes tie."""
    votes: dict[str, list[float]] = {}
    for weight, ranked in lists:
        for place, session_id in enumerate(ranked, start=1):
            votes.setdefault(session_id, []).append(weight / (RRF_K + place))
    return {session: math.fsum(v) for session, v in votes.items()}


def shown_chunks(
    lists: Sequence[Sequence[tuple[int, str]]], sessions: Sequence[str], per_session: int
) -> dict[str, list[int]]:
    """Per session, its `per_session` chunks voted best across the lists (then by id)."""
    votes: dict[int, list[float]] = {}
    owner: dict[int, str] = {}
    for ranked in lists:
        for rank, (chunk_id, session_id) in enumerate(ranked, start=1):
            votes.setdefault(chunk_id, []).append(1.0 / (RRF_K + rank))
            owner[chunk_id] = session_id
    vote = {chunk_id: math.fsum(v) for chunk_id, v in votes.items()}
    shown: dict[str, list[int]] = {s: [] for s in sessions}
    for chunk_id in sorted(vote, key=lambda c: (-vote[c], c)):
        picked = shown.get(owner[chunk_id])
        if picked is not None and len(picked) < per_session:
            picked.append(chunk_id)
    return shown
