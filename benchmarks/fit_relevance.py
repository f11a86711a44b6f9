"""Fit recall's relevance model on golden questions, and measure it on projects left out of the fit.

    uv run python benchmarks/fit_relevance.py --home H GOLDEN.jsonl... [--default-project P]
        [--held-out MORE.jsonl...] [--json]

e.g. GOLDEN = ../shared/eval/{golden-dev,negatives-dev,golden-xdev,golden-far}.jsonl,
--held-out benchmarks/eval/extra-dev.jsonl, --default-project cli (the lines of golden-dev and
negatives-dev name none).

Each question goes through the product's own search (hybrid, as `recall` ranks). The evidence of
its best ranked session (`core.relevance.features`: the standardized cosines of its best chunk
and of the session as a whole, and the share of the question's names the store never held) is
what the gate judges.
A logistic regression of "the question is answerable" on that evidence is then fitted:

- leaving one project out: fitted on the others' questions, judged on the left-out project's,
  which is what a project never seen gets (the figures to trust);
- on every question: the weights to put in core/recall/relevance.py.

Questions are grouped by the `project` of their line, else that of their first relevant
session in the store, else `--default-project`. `--held-out` files are never fitted on: they are
judged by the model fitted on everything else. For each threshold the report gives, per project
and pooled: unanswerable questions answered with nothing (abstain), answerable ones answered
with nothing (false abstain), and the same for the answerable ones whose answer ranks in the top
5 (what a user loses when the gate shuts on a good answer). Ends with one JSON line.
"""

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _results import add_record_option, record

THRESHOLDS = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
FEATURES = ("best_chunk", "session", "unseen")
L2 = 0.1
_NOTHING = (0.0, 0.0, 0.0)  # no session ranked, or none with a chunk: no evidence


@dataclass(frozen=True)
class Case:
    source: str
    project: str
    answerable: bool
    first_hit: int | None
    features: tuple[float, ...]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a LIBRARIAN_HOME with a store")
    parser.add_argument("golden", nargs="+", type=Path, help="golden files to fit on")
    parser.add_argument("--held-out", nargs="*", type=Path, default=[], help="never fitted on")
    parser.add_argument("--default-project", default="unspecified")
    parser.add_argument("--json", action="store_true", help="only the closing JSON line")
    add_record_option(parser)
    args = parser.parse_args()
    # The one place this script sets the environment: the store and embedder read it.
    os.environ["LIBRARIAN_HOME"] = str(args.home)

    fit_on = _cases(args.golden, args.default_project)
    held = _cases(args.held_out, args.default_project) if args.held_out else []
    projects = sorted({c.project for c in fit_on if c.answerable})
    report: dict = {"projects": projects, "left_out": {}, "thresholds": list(THRESHOLDS)}
    report["questions"] = len(fit_on)
    left_out: list[tuple[Case, float]] = []
    for project in projects:
        train = [c for c in fit_on if c.project != project]
        judged = [c for c in fit_on if c.project == project]
        weights = fit(train)
        left_out += [(c, p) for c, p in zip(judged, predict(weights, judged), strict=True)]
    everything = fit(fit_on)
    report["weights"] = dict(zip((*FEATURES, "bias"), map(float, everything), strict=True))
    report["leave_one_project_out"] = _sweep(left_out)
    for project in projects:
        report["left_out"][project] = _sweep([(c, p) for c, p in left_out if c.project == project])
    report["left_out_by_file"] = {
        source: _sweep([(c, p) for c, p in left_out if c.source == source])
        for source in sorted({c.source for c in fit_on})
    }
    if held:
        report["held_out"] = _sweep(list(zip(held, predict(everything, held), strict=True)))
    if not args.json:
        _print(report)
    print(json.dumps(report))
    if args.record:
        _record(report)
    return 0


def _record(report: dict) -> None:
    """At recall's own threshold: the pooled leave-one-project-out shares, and the held-out's."""
    from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD

    at = f"{DEFAULT_THRESHOLD:g}"
    pooled = report["leave_one_project_out"].get(at, {})
    held = report.get("held_out", {}).get(at, {})

    def shown(value: float | None) -> object:
        return "-" if value is None else round(value, 3)

    record("fit_relevance", {
        "threshold": at, "questions": report["questions"],
        "unanswerable abstain": shown(pooled.get("abstain")),
        "answerable abstain": shown(pooled.get("false_abstain")),
        "top-5 abstain": shown(pooled.get("top5_false_abstain")),
        "held-out unanswerable abstain": shown(held.get("abstain")),
        "held-out answerable abstain": shown(held.get("false_abstain")),
    })  # fmt: skip


def _cases(paths: Sequence[Path], default_project: str) -> list[Case]:
    from librarian_dagster.core.assembly.providers import configured_embedder
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.recall.answer import MAX_RESULTS
    from librarian_dagster.core.recall.evaluation import load_golden, store_projects, with_projects
    from librarian_dagster.core.recall.relevance import Evidence, SpaceCalibration, features
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.core.store.queries import SearchFilters

    settings = Settings.from_env()
    store, embedder = open_store(settings), configured_embedder(settings)
    projects = store_projects(store.memories)
    cases = []
    for path in paths:
        for question in with_projects(load_golden([path]), projects):
            seen: list[tuple[Evidence, SpaceCalibration]] = []

            def judged(_session: str, evidence: Evidence, space: SpaceCalibration) -> None:
                seen.append((evidence, space))  # noqa: B023 (called within this iteration)

            hits = store.search.find(
                question.query,
                embedder.embed_query(question.query),
                embedder.model_name,
                SearchFilters(include_private=True),
                MAX_RESULTS,
                judged=judged,
            )
            ranking = list(dict.fromkeys(h.session_id for h in hits))
            first = next((i for i, s in enumerate(ranking) if s in question.relevant), None)
            project = question.project
            if project is None or project == "unspecified":
                project = default_project
            cases.append(Case(path.name, project, question.answerable, first,
                              (features(*seen[0]) or _NOTHING) if seen else _NOTHING))  # fmt: skip
    return cases


def fit(cases: Sequence[Case]) -> np.ndarray:
    """Logistic regression by Newton's method, lightly L2-regularised (not the bias)."""
    x = np.array([(*c.features, 1.0) for c in cases])
    y = np.array([float(c.answerable) for c in cases])
    w = np.zeros(x.shape[1])
    ridge = L2 * np.diag([1.0] * (x.shape[1] - 1) + [0.0])
    for _ in range(100):
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) + ridge @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + ridge + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def predict(w: np.ndarray, cases: Sequence[Case]) -> list[float]:
    x = np.array([(*c.features, 1.0) for c in cases])
    return list(1 / (1 + np.exp(-x @ w)))


def _sweep(judged: Sequence[tuple[Case, float]]) -> dict[str, dict[str, float | None]]:
    out = {}
    for t in THRESHOLDS:
        out[f"{t:g}"] = {
            "abstain": _share([p < t for c, p in judged if not c.answerable]),
            "false_abstain": _share([p < t for c, p in judged if c.answerable]),
            "top5_false_abstain": _share(
                [
                    p < t
                    for c, p in judged
                    if c.answerable and c.first_hit is not None and c.first_hit < 5
                ]
            ),
        }
    return out


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _print(report: dict) -> None:
    print("weights fitted on every question:",
          ", ".join(f"{k} {v:.3f}" for k, v in report["weights"].items()))  # fmt: skip
    blocks = [("leave one project out, pooled", report["leave_one_project_out"])]
    blocks += [(f"left out: {p}", s) for p, s in report["left_out"].items()]
    blocks += [(f"left out, questions of {f}", s) for f, s in report["left_out_by_file"].items()]
    if "held_out" in report:
        blocks.append(("held-out files (model fitted on all the rest)", report["held_out"]))
    for title, sweep in blocks:
        print(f"\n{title}\n  threshold  abstain  false_abstain  top5_false_abstain")
        for t, row in sweep.items():
            cells = ["-" if v is None else f"{v:.3f}" for v in row.values()]
            print(f"  {t:>9}  {cells[0]:>7}  {cells[1]:>13}  {cells[2]:>18}")


if __name__ == "__main__":
    sys.exit(main())
