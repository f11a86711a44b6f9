"""Recall quality over time: the golden questions measured against the memory as it is now.

Golden files are `LIBRARIAN_HOME/eval/*.jsonl` (the format `librarian eval` reads). Each
materialization of `recall_quality` records the figures as numeric metadata, so the asset's page
plots them across materializations; a non-blocking check warns when recall@5 falls below
`LIBRARIAN_RECALL_FLOOR`. A daily schedule materializes it; the UI can at any time.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from librarian_dagster.core.recall.evaluation import (
    GoldenFileError,
    Metrics,
    evaluate,
    load_golden,
    session_asker,
    store_projects,
    with_projects,
)
from librarian_dagster.defs.resources import (
    EmbedderResource,
    MemoriesResource,
    QualityResource,
    SearchResource,
)

QUALITY = "quality"
RECALL_FLOOR_CHECK = "recall_at_5_above_floor"
MEASURE_RECALL = "measure_recall"


@dg.asset(
    kinds={"python"},
    group_name=QUALITY,
    check_specs=[
        dg.AssetCheckSpec(
            RECALL_FLOOR_CHECK,
            asset="recall_quality",
            blocking=False,
            description="recall@5 on the golden questions is at least LIBRARIAN_RECALL_FLOOR "
            "(a warning: a drop is worth a look, not a reason to stop anything).",
        )
    ],
)
def recall_quality(
    context: dg.AssetExecutionContext,
    memories: MemoriesResource,
    search: SearchResource,
    embedder: EmbedderResource,
    quality: QualityResource,
) -> dg.MaterializeResult:
    """Recall on the golden questions in LIBRARIAN_HOME/eval/*.jsonl, against the current memory.

    recall@1/5/10, MRR and nDCG@10 over the answerable questions, and how often recall answers
    nothing: rightly (abstain_rate, on questions nothing answers) and wrongly
    (false_abstain_rate); per kind, style and project (a line's, else its first relevant
    session's in the store). Not tied to the session partitions: it reads the whole store as it is.
    """
    folder = Path(quality.eval_dir)
    files = sorted(folder.glob("*.jsonl"))
    db, model = memories.get(), embedder.get()
    metadata: dict[str, Any] = {
        "sessions": db.stats().sessions,
        "embedding_model": model.model_name,
        "golden_dir": dg.MetadataValue.path(str(folder)),
    }
    if not files:
        metadata |= {
            "questions": 0,
            "note": f"no golden files: put *.jsonl question files in {folder} "
            "(see `librarian eval --help` for the format)",
        }
        return _with_floor_check(metadata, None, quality.recall_floor)
    try:
        questions = with_projects(load_golden(files), store_projects(db))
    except GoldenFileError as exc:
        raise dg.Failure(str(exc)) from None
    asker = session_asker(search.get(), model, min_relevance=quality.min_relevance)
    report = evaluate(questions, asker)
    figures = report.overall.as_dict()
    context.log.info(f"{len(questions)} questions from {len(files)} file(s): {figures}")
    metadata |= {
        # Floats, not text: the UI plots numeric metadata across materializations. A figure with
        # no question to measure it (abstain_rate without negatives) is left out, not zero.
        **{k: float(v) for k, v in figures.items() if isinstance(v, float)},
        "questions": len(questions),
        "answerable": report.overall.answerable,
        "min_relevance": float(quality.min_relevance),
        "golden_files": ", ".join(f.name for f in files),
        "by_kind": dg.MetadataValue.md(_markdown("kind", report.by_kind)),
        "by_style": dg.MetadataValue.md(_markdown("style", report.by_style)),
        "by_project": dg.MetadataValue.md(_markdown("project", report.by_project)),
    }
    return _with_floor_check(metadata, report.overall.recall_at[5], quality.recall_floor)


def _with_floor_check(
    metadata: dict[str, Any], recall_at_5: float | None, floor: float
) -> dg.MaterializeResult:
    if recall_at_5 is None:
        # Dagster needs a result for a declared check. With no answerable question there is
        # nothing to judge: a pass that says so, rather than a daily warning that only nags an
        # installation without golden files.
        result = dg.AssetCheckResult(
            check_name=RECALL_FLOOR_CHECK,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            description="not measured: no answerable golden question",
            metadata={"floor": float(floor)},
        )
    else:
        passed = recall_at_5 >= floor
        result = dg.AssetCheckResult(
            check_name=RECALL_FLOOR_CHECK,
            passed=passed,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"recall@5 {recall_at_5:.3f} is {'at or above' if passed else 'below'} "
            f"the floor {floor:g}",
            metadata={"recall@5": recall_at_5, "floor": float(floor)},
        )
    return dg.MaterializeResult(metadata=metadata, check_results=[result])


def _markdown(label: str, groups: Mapping[str, Metrics]) -> str:
    columns = ["questions", "recall@1", "recall@5", "mrr", "ndcg@10", "abstain_rate"]
    columns.append("false_abstain_rate")
    rows = [f"| {label} | {' | '.join(columns)} |", "|---" * (len(columns) + 1) + "|"]
    for name, metrics in groups.items():
        figures = metrics.as_dict()
        cells = [_cell(figures[c]) for c in columns]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(rows)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


measure_recall_job = dg.define_asset_job(
    MEASURE_RECALL,
    selection=dg.AssetSelection.groups(QUALITY),
    description="Measure recall on the golden questions against the current memory.",
    # One step: a process of its own would only pay Dagster's import and the model load again.
    executor_def=dg.in_process_executor,
)

recall_quality_daily = dg.ScheduleDefinition(
    name="recall_quality_daily",
    target=measure_recall_job,
    # One point a day is enough to see a trend; at night, off the hours a user ingests and asks.
    cron_schedule="30 4 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Measure recall quality once a day, so a drop shows up as a point on the plot.",
)
