"""`librarian eval`: how well recall answers a set of golden questions, per search mode."""

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from librarian_dagster.core.commandline import AddParser

if TYPE_CHECKING:
    from librarian_dagster.core.models.embeddings import Embedder
    from librarian_dagster.core.recall.evaluation import GoldenQuestion, Metrics, Report
    from librarian_dagster.core.recall.reference import NaiveIndex
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.core.store.memories import Memories

DEFAULT_K = 5
NAIVE = "naive"
_BAR_WIDTH = 30


def register(add_parser: AddParser) -> None:
    ev = add_parser(
        "eval",
        help="measure recall on golden questions: recall@k, MRR, nDCG@10, abstention",
        description="Ask every question of the golden files (one JSON object a line: query, "
        "relevant session ids, kind, style, project) through hybrid, vector-only and text-only "
        "search, and report how well each ranks the sessions that answer it, and whether it "
        "answers nothing when nothing is relevant; pooled, and per kind, style and project. A "
        "line without a project counts under its first relevant session's project in the store "
        "(an unanswerable one under `unspecified`).",
    )
    ev.add_argument(
        "golden",
        nargs="+",
        type=Path,
        metavar="GOLDEN.jsonl",
        help='e.g. {"query": "...", "relevant": ["<session id>"], "kind": "solved", '
        '"style": "keyword", "project": "app"}; "relevant": [] for a question nothing should '
        "answer",
    )
    ev.add_argument("--k", type=int, default=DEFAULT_K, help="the headline recall@k (default 5)")
    ev.add_argument(
        "--min-relevance",
        type=float,
        default=None,
        metavar="X",
        help="leave out chunks scoring below this (default: the configured recall threshold)",
    )
    ev.add_argument(
        "--layer",
        choices=["both", "bullets", "exchanges"],
        default="both",
        help="search both layers (the product, the default), or only the digests' bullets or "
        "only the exchange windows, to measure what each layer finds on its own (relevance "
        "is still judged on both)",
    )
    ev.add_argument(
        "--reference",
        choices=[NAIVE],
        help="also rank with a naive index built now over the same sessions, as a yardstick: "
        "the configured embedder and BM25 over each session's typed prompts and final replies "
        "(one chunk each, read from the redacted sessions staged under LIBRARIAN_HOME/staging; "
        "a session not staged there is represented by its exchange chunks, which start with "
        "their prompt's head), fused by reciprocal rank (k=60), sessions ranked by their best "
        "chunk. It has no relevance threshold and always answers, so its abstention is '-'",
    )
    ev.add_argument("--json", action="store_true", help="one JSON object with every figure")
    ev.add_argument(
        "--show-misses",
        action="store_true",
        help="also list the questions hybrid search got wrong (text report only)",
    )
    ev.set_defaults(handler=cmd_eval)


def _questions(args: argparse.Namespace) -> "list[GoldenQuestion] | None":
    """The golden questions the arguments name, or None once the reason was said on stderr."""
    from librarian_dagster.core.recall.evaluation import MAX_K, GoldenFileError, load_golden

    if not 1 <= args.k <= MAX_K:
        print(f"librarian eval: --k must be between 1 and {MAX_K}", file=sys.stderr)
        return None
    if args.min_relevance is not None and args.min_relevance < 0:
        print("librarian eval: --min-relevance must not be negative", file=sys.stderr)
        return None
    try:
        questions = load_golden(args.golden)
    except GoldenFileError as exc:
        print(f"librarian eval: {exc}", file=sys.stderr)
        return None
    if not questions:
        print("librarian eval: no questions in the golden file(s)", file=sys.stderr)
        return None
    return questions


def cmd_eval(args: argparse.Namespace) -> int:
    # Imported here, not at parser build: the store, pydantic and numpy cost every command.
    from librarian_dagster.core.assembly.providers import configured_embedder
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.recall.evaluation import (
        RECALL_KS,
        compare_modes,
        evaluate,
        store_projects,
        with_projects,
    )
    from librarian_dagster.core.recall.ranking import Boosts
    from librarian_dagster.core.settings import Settings

    questions = _questions(args)
    if questions is None:
        return 2
    settings = Settings.from_env()
    min_relevance = settings.recall_threshold if args.min_relevance is None else args.min_relevance
    store, embedder = open_store(settings), configured_embedder(settings)
    with store:
        projects = store_projects(store.memories)
        questions = with_projects(questions, projects)
        progress = progress_bar(sys.stderr) if sys.stderr.isatty() else None
        ks = (*RECALL_KS, args.k)
        reports: dict[str, Report] = {
            **compare_modes(
                questions,
                store.search,
                embedder,
                min_relevance=min_relevance,
                boosts=Boosts.of(settings),
                ks=ks,
                progress=progress,
                layers=args.layer,
            )
        }
        context: dict[str, Any] = {
            "k": args.k,
            "min_relevance": min_relevance,
            "layers": args.layer,
            "sessions": store.memories.stats().sessions,
            "embedding_model": embedder.model_name,
        }
        if args.reference == NAIVE:
            index, context["reference"] = naive_reference(
                store.memories, embedder, settings, list(projects)
            )
            step = None if progress is None else (lambda done, total: progress(NAIVE, done, total))
            reports[NAIVE] = evaluate(questions, index.ask, ks=ks, progress=step, abstains=False)
    if args.json:
        print(json.dumps(report_document(reports, context), indent=2))
    else:
        print(render_text(reports, context, show_misses=args.show_misses))
    return 0


def naive_reference(
    memories: "Memories", embedder: "Embedder", settings: "Settings", session_ids: list[str]
) -> tuple["NaiveIndex", dict[str, Any]]:
    """The naive index over these sessions, and what went into it and how long it took."""
    from librarian_dagster.core.recall.reference import NaiveIndex, gather_documents

    # Imported here: only the staging I/O manager knows where a stage's files are, and it
    # brings Dagster (a second of import) that the other modes do without.
    from librarian_dagster.defs.staging import StagingIOManager

    staging = StagingIOManager(home=str(settings.home))
    started = time.perf_counter()
    # "redacted_session": the stage's asset name, which names its folder of staged files.
    documents = gather_documents(
        memories, session_ids, lambda session_id: staging.path_for("redacted_session", session_id)
    )
    index = NaiveIndex(documents.texts, embedder)
    return index, {
        "name": NAIVE,
        "build_seconds": round(time.perf_counter() - started, 1),
        "chunks": index.chunks,
        "sessions": len(documents.texts),
        "staged_sessions": documents.staged,
        "exchange_chunk_sessions": documents.from_chunks,
    }


def report_document(reports: Mapping[str, "Report"], context: Mapping[str, Any]) -> dict:
    """The `--json` object: hybrid's figures at the top, then every mode's for the comparison."""
    return {
        **reports["hybrid"].as_dict(),
        **context,
        "modes": {mode: report.as_dict() for mode, report in reports.items()},
    }


def render_text(
    reports: Mapping[str, "Report"],
    context: Mapping[str, Any],
    *,
    show_misses: bool = False,
) -> str:
    """The headline recall@k, then every mode side by side, then hybrid per kind, style and
    project."""
    hybrid = reports["hybrid"].overall
    k = context["k"]
    unanswerable = hybrid.questions - hybrid.answerable
    lines = [
        f"recall@{k} {_fmt(hybrid.recall_at[k])}  (hybrid; {hybrid.answerable} answerable and "
        f"{unanswerable} unanswerable questions; {context['sessions']} sessions, "
        f"{context['embedding_model']}, min relevance {context['min_relevance']:g}"
        + ("" if context["layers"] == "both" else f", {context['layers']} only")
        + ")",
        "",
    ]
    columns = [key for key in hybrid.as_dict() if key not in ("questions", "answerable")]
    lines += _table("mode", {mode: r.overall for mode, r in reports.items()}, columns)
    reference = context.get("reference")
    if reference is not None:
        lines.append(
            f"({reference['name']}: built in {reference['build_seconds']:.1f} s, "
            f"{reference['chunks']} chunks of {reference['sessions']} sessions: "
            f"{reference['staged_sessions']} from their staged redacted session, "
            f"{reference['exchange_chunk_sessions']} from their exchange chunks)"
        )
    product = reports["hybrid"]
    for name, groups in (
        ("kind", product.by_kind),
        ("style", product.by_style),
        ("project", product.by_project),
    ):
        lines.append("")
        lines += _table(f"hybrid by {name}", groups, columns, counts=True)
    if show_misses:
        lines += ["", *_misses(reports["hybrid"], k)]
    return "\n".join(lines)


def _table(
    title: str, rows: Mapping[str, "Metrics"], columns: list[str], *, counts: bool = False
) -> list[str]:
    label_width = max(len(title), *(len(n) + (6 if counts else 0) for n in rows))
    widths = [max(len(c), 5) for c in columns]
    head = " ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))
    out = [f"{title.ljust(label_width)}  {head}"]
    for name, metrics in rows.items():
        figures = metrics.as_dict()
        label = f"{name} ({metrics.questions})" if counts else name
        cells = " ".join(_fmt(figures[c]).rjust(w) for c, w in zip(columns, widths, strict=True))
        out.append(f"{label.ljust(label_width)}  {cells}")
    return out


def _misses(report: "Report", k: int) -> list[str]:
    out = [f"hybrid misses (no relevant session in the top {k}, or an answer to nothing):"]
    for o in report.outcomes:
        first, q = o.first_hit, o.question
        if q.answerable and (first is None or first >= k):
            where = "not returned" if first is None else f"first at {first + 1}"
        elif not q.answerable and o.ranking:
            where = "answered"
        else:
            continue
        out.append(f"  {where:14} [{q.kind}/{q.style}] {q.query}")
    return out if len(out) > 1 else [*out, "  none"]


def _fmt(value: float | None) -> str:
    # A figure with no question to measure it (e.g. abstain_rate without negatives) is "-", not 0.
    return "-" if value is None else f"{value:.3f}"


def progress_bar(stream: TextIO) -> Callable[[str, int, int], None]:
    """A one-line progress bar per search mode, redrawn in place, cleared when the mode is done."""

    def show(mode: str, done: int, total: int) -> None:
        filled = _BAR_WIDTH * done // max(total, 1)
        line = f"{mode:6} [{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {done}/{total}"
        stream.write("\r" + (line if done < total else " " * len(line) + "\r"))
        stream.flush()

    return show
