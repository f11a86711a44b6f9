"""How well recall answers: golden questions in, recall@k, MRR, nDCG@10 and abstention out.

A golden file holds one JSON object a line: `query`, `relevant` (the session ids that answer it;
empty for a question nothing in the memory answers), and optionally `kind`, `style` and `project`,
by which the figures are also broken down (other keys, such as `id`, are ignored). A line that
names no project is counted under the project of its first relevant session the store holds
(`with_projects`), an unanswerable one under `unspecified`.

The metrics are pure: `evaluate` takes a callable `ask(query) -> ranked session ids`, so they are
computed the same way over the real store (`session_asker`), in a test, or in the Dagster asset
that tracks them over time. Ranking quality is measured over the answerable questions; whether
recall knows when it does not know is measured apart:

- `abstain_rate`: of the questions nothing answers, the share answered with nothing (higher is
  better);
- `false_abstain_rate`: of the answerable questions, the share answered with nothing (lower is
  better).

Nothing here imports dagster.
"""

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.answer import MAX_RESULTS, recall
from librarian_dagster.core.recall.ranking import DEFAULT_BOOSTS, Boosts
from librarian_dagster.core.recall.search import Layers, Search, SearchMode
from librarian_dagster.core.store.memories import Memories
from librarian_dagster.core.store.queries import SearchFilters

RECALL_KS = (1, 5, 10)
"""The recall@k every report has; a headline k other than these is added to them."""
NDCG_K = 10
MAX_K = 20
"""The largest k asked for: `session_asker` fetches 50 chunks, at most two per session, so at
least 25 sessions are ranked whenever the store has that many."""
MODES: tuple[SearchMode, ...] = ("hybrid", "vector", "text")
"""The product's search first, then each of its two ranked lists alone, to see what each brings."""
UNSPECIFIED = "unspecified"
"""The kind, style or project of a question whose line (or, for the project, store) does not say."""

Ask = Callable[[str], Sequence[str]]
"""A question in plain words -> the session ids that answer it, best first (empty: nothing)."""
Progress = Callable[[int, int], None]
"""Called with (questions done, questions in all) after each question."""


class GoldenFileError(ValueError):
    """A golden file cannot be read; the message names the file and, for a bad line, its number."""


@dataclass(frozen=True)
class GoldenQuestion:
    query: str
    relevant: frozenset[str]
    """The sessions that answer the question; empty when nothing should."""
    kind: str = UNSPECIFIED
    style: str = UNSPECIFIED
    project: str | None = None
    """The project the line names; None until `with_projects` takes it from the store."""
    listed: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """`relevant` in the line's order: a set forgets which session the line put first, and that
    one's project is the question's when the line names none."""

    @property
    def answerable(self) -> bool:
        return bool(self.relevant)


@dataclass(frozen=True)
class Outcome:
    """One question and the sessions recall ranked for it."""

    question: GoldenQuestion
    ranking: tuple[str, ...]

    @property
    def first_hit(self) -> int | None:
        """The 0-based rank of the first relevant session, None if none was returned."""
        return next((i for i, s in enumerate(self.ranking) if s in self.question.relevant), None)


@dataclass(frozen=True)
class Metrics:
    """The figures for a set of questions; None where the set has no question to measure."""

    questions: int
    answerable: int
    recall_at: Mapping[int, float | None]
    """k -> mean share of a question's relevant sessions found in the top k."""
    mrr: float | None
    ndcg_at_10: float | None
    abstain_rate: float | None
    false_abstain_rate: float | None

    def as_dict(self) -> dict[str, Any]:
        """The figures under their report names: `recall@5`, `mrr`, `ndcg@10`, ..."""
        return {
            "questions": self.questions,
            "answerable": self.answerable,
            **{f"recall@{k}": v for k, v in sorted(self.recall_at.items())},
            "mrr": self.mrr,
            f"ndcg@{NDCG_K}": self.ndcg_at_10,
            "abstain_rate": self.abstain_rate,
            "false_abstain_rate": self.false_abstain_rate,
        }


@dataclass(frozen=True)
class Report:
    """The figures for every question, and per kind, style and project of question."""

    overall: Metrics
    by_kind: Mapping[str, Metrics]
    by_style: Mapping[str, Metrics]
    by_project: Mapping[str, Metrics]
    outcomes: Sequence[Outcome] = field(default=(), repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.overall.as_dict(),
            "by_kind": {k: m.as_dict() for k, m in self.by_kind.items()},
            "by_style": {s: m.as_dict() for s, m in self.by_style.items()},
            "by_project": {p: m.as_dict() for p, m in self.by_project.items()},
        }


# -- golden files ---------------------------------------------------------------------------------


def load_golden(paths: Iterable[Path]) -> list[GoldenQuestion]:
    """Every question of these golden files, in order; blank lines are skipped.

    Raises GoldenFileError naming the file and line of the first line that is not a question.
    """
    questions: list[GoldenQuestion] = []
    for path in paths:
        try:
            with path.open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if line.strip():
                        questions.append(_parse_question(line, f"{path}:{number}"))
        except (OSError, UnicodeDecodeError) as exc:
            raise GoldenFileError(f"{path}: cannot read: {exc}") from None
    return questions


def _parse_question(line: str, where: str) -> GoldenQuestion:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise GoldenFileError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise GoldenFileError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    query, relevant = doc.get("query"), doc.get("relevant")
    if not isinstance(query, str) or not query.strip():
        raise GoldenFileError(f"{where}: `query` must be a non-empty string")
    if not isinstance(relevant, list) or not all(isinstance(s, str) and s for s in relevant):
        raise GoldenFileError(
            f"{where}: `relevant` must be a list of session ids (empty when nothing answers)"
        )
    labels: dict[str, str | None] = {}
    for key in ("kind", "style", "project"):
        value = doc.get(key)
        if key in doc and (not isinstance(value, str) or not value):
            raise GoldenFileError(f"{where}: `{key}` must be a non-empty string when given")
        labels[key] = value
    return GoldenQuestion(
        query,
        frozenset(relevant),
        labels["kind"] or UNSPECIFIED,
        labels["style"] or UNSPECIFIED,
        labels["project"],
        listed=tuple(dict.fromkeys(relevant)),
    )


def with_projects(
    questions: Iterable[GoldenQuestion], projects: Mapping[str, str]
) -> list[GoldenQuestion]:
    """Every question with a project: the one its line names, else the project (`projects`:
    session id -> project) of the first of its relevant sessions found there, else `unspecified`
    (an unanswerable question, or one whose sessions are not in the store)."""
    return [
        q if q.project is not None else replace(q, project=_first_project(q, projects))
        for q in questions
    ]


def _first_project(question: GoldenQuestion, projects: Mapping[str, str]) -> str:
    # A question made in code may leave `listed` empty: its sessions in name order, then.
    listed = question.listed or sorted(question.relevant)
    return next((projects[s] for s in listed if s in projects), UNSPECIFIED)


# -- metrics --------------------------------------------------------------------------------------


def evaluate(
    questions: Sequence[GoldenQuestion],
    ask: Ask,
    *,
    ks: Iterable[int] = RECALL_KS,
    progress: Progress | None = None,
    abstains: bool = True,
) -> Report:
    """Ask every question once and measure the answers, overall and per kind, style and project.

    `abstains` False: `ask` always answers (it has no relevance threshold), so there is no
    abstention to measure and both rates are None rather than a trivial 0.
    """
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"every k must be at least 1, got {ks}")
    outcomes = []
    for done, question in enumerate(questions, 1):
        outcomes.append(Outcome(question, _distinct(ask(question.query))))
        if progress is not None:
            progress(done, len(questions))
    return Report(
        overall=summarize(outcomes, ks, abstains=abstains),
        by_kind=_grouped(outcomes, ks, abstains, lambda q: q.kind),
        by_style=_grouped(outcomes, ks, abstains, lambda q: q.style),
        by_project=_grouped(outcomes, ks, abstains, lambda q: q.project or UNSPECIFIED),
        outcomes=tuple(outcomes),
    )


def summarize(
    outcomes: Sequence[Outcome], ks: Iterable[int] = RECALL_KS, *, abstains: bool = True
) -> Metrics:
    """The metrics of these outcomes (means over the answerable ones, rates as shares)."""
    answerable = [o for o in outcomes if o.question.answerable]
    unanswerable = [o for o in outcomes if not o.question.answerable] if abstains else []
    return Metrics(
        questions=len(outcomes),
        answerable=len(answerable),
        recall_at={k: _mean(recall_at(o, k) for o in answerable) for k in ks},
        mrr=_mean(reciprocal_rank(o) for o in answerable),
        ndcg_at_10=_mean(ndcg_at(o, NDCG_K) for o in answerable),
        abstain_rate=_mean(float(not o.ranking) for o in unanswerable),
        false_abstain_rate=_mean(float(not o.ranking) for o in answerable) if abstains else None,
    )


def recall_at(outcome: Outcome, k: int) -> float:
    """1 if a session that answers the question is among the first k returned, else 0.

    What a user asks of recall ("does it find the session that answers me?"): one answering
    session is enough. Averaged over questions, this is the share of questions answered in the
    top k, the figure memory tools report as recall@k.
    """
    return 1.0 if outcome.question.relevant.intersection(outcome.ranking[:k]) else 0.0


def reciprocal_rank(outcome: Outcome) -> float:
    first = outcome.first_hit
    return 0.0 if first is None else 1.0 / (first + 1)


def ndcg_at(outcome: Outcome, k: int) -> float:
    """Binary-relevance nDCG: the gain of the first k, over the gain of a perfect ranking."""
    relevant = outcome.question.relevant
    gain = sum(_discount(i) for i, s in enumerate(outcome.ranking[:k]) if s in relevant)
    ideal = sum(_discount(i) for i in range(min(k, len(relevant))))
    return gain / ideal


def _discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 2)


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _distinct(sessions: Iterable[str]) -> tuple[str, ...]:
    # A session counts once, at its best rank: a second chunk of it is not a second answer.
    return tuple(dict.fromkeys(sessions))


def _grouped(
    outcomes: Sequence[Outcome],
    ks: Sequence[int],
    abstains: bool,
    label: Callable[[GoldenQuestion], str],
) -> dict[str, Metrics]:
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(label(o.question), []).append(o)
    return {name: summarize(group, ks, abstains=abstains) for name, group in sorted(groups.items())}


# -- over the real store --------------------------------------------------------------------------


def store_projects(memories: Memories, page_size: int = 500) -> dict[str, str]:
    """Session id -> project, of every session the store remembers (private ones too)."""
    projects: dict[str, str] = {}
    cursor = None
    while True:
        page = memories.list_sessions(SearchFilters(include_private=True), page_size, cursor)
        projects.update((s.session_id, s.project) for s in page.sessions)
        if page.next_cursor is None:
            return projects
        cursor = page.next_cursor


def session_asker(
    search: Search,
    embedder: Embedder,
    *,
    min_relevance: float = 0.0,
    mode: SearchMode = "hybrid",
    boosts: Boosts = DEFAULT_BOOSTS,
    layers: Layers = "both",
) -> Ask:
    """`ask` over `recall`: sessions ranked by their best chunk among the top 50 chunks."""

    def ask(query: str) -> list[str]:
        result = recall(
            search,
            embedder,
            query,
            # The owner measures their own store: a golden question may be about private work.
            SearchFilters(include_private=True),
            limit=MAX_RESULTS,
            min_relevance=min_relevance,
            mode=mode,
            boosts=boosts,
            layers=layers,
        )
        return list(_distinct(hit.session_id for hit in result.results))

    return ask


def compare_modes(
    questions: Sequence[GoldenQuestion],
    search: Search,
    embedder: Embedder,
    *,
    min_relevance: float = 0.0,
    boosts: Boosts = DEFAULT_BOOSTS,
    modes: Sequence[SearchMode] = MODES,
    ks: Iterable[int] = RECALL_KS,
    progress: Callable[[SearchMode, int, int], None] | None = None,
    layers: Layers = "both",
) -> dict[SearchMode, Report]:
    """The same questions through each search mode, every one at the same `min_relevance` and
    over the same `layers`."""
    # Each question is embedded once, not once per mode: the vector is the same for all three.
    cached = _QueryCache(embedder)
    ks = tuple(ks)
    reports: dict[SearchMode, Report] = {}
    for mode in modes:
        step = None if progress is None else _progress_for(progress, mode)
        ask = session_asker(
            search, cached, min_relevance=min_relevance, mode=mode, boosts=boosts, layers=layers
        )
        reports[mode] = evaluate(questions, ask, ks=ks, progress=step)
    return reports


def _progress_for(progress: Callable[[SearchMode, int, int], None], mode: SearchMode) -> Progress:
    return lambda done, total: progress(mode, done, total)


class _QueryCache:
    """An Embedder that remembers the query vectors it has computed."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.model_name = embedder.model_name
        self.dimension = embedder.dimension
        self._queries: dict[str, list[float]] = {}

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embedder.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        if text not in self._queries:
            self._queries[text] = self._embedder.embed_query(text)
        return self._queries[text]
