"""Recall quality on the dev corpora's golden and negative questions: `librarian eval` over a home.

    uv run python benchmarks/recall.py --home H [--golden FILE...] [--json] [--reference naive]

By default the golden questions of both dev corpora and the negatives (golden-dev, negatives-dev,
golden-xdev): H must hold both corpora in one store (entire-dev and xproj-dev, e.g. `librarian
ingest` over the two unpacked folders, see ../shared/corpus/README.md). A home of the dev corpus
alone (`benchmarks/ingest.py --home H`) is scored with `--golden` naming golden-dev and
negatives-dev. The same as `LIBRARIAN_HOME=H librarian eval FILE...`: hybrid, vector-only and
text-only search side by side, per kind, style and project of question. Options after --home go
to `librarian eval` as they are (`--json`, `--k`, `--min-relevance`, `--show-misses`,
`--reference naive`).
"""

import argparse
import os
import sys
from pathlib import Path

from _corpus import GOLDEN
from _results import add_record_option, record

from librarian_dagster.cli import evaluate
from librarian_dagster.cli.main import main as librarian

FILES = (
    GOLDEN,
    GOLDEN.with_name("negatives-dev.jsonl"),
    GOLDEN.with_name("golden-xdev.jsonl"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--home", type=Path, required=True, help="a home holding the corpora")
    parser.add_argument(
        "--golden",
        nargs="+",
        type=Path,
        default=list(FILES),
        metavar="FILE",
        help="the golden files to score (default: golden-dev, negatives-dev, golden-xdev)",
    )
    add_record_option(parser)
    args, rest = parser.parse_known_args()
    # The one place this script sets the environment: `librarian eval` reads its settings there.
    os.environ["LIBRARIAN_HOME"] = str(args.home)
    reports = _kept_reports() if args.record else {}
    status = librarian(["eval", *map(str, args.golden), *rest])
    if args.record and "hybrid" in reports:
        hybrid = reports["hybrid"].overall
        record("recall", {
            "questions": hybrid.questions, "recall@1": _figure(hybrid.recall_at[1]),
            "recall@5": _figure(hybrid.recall_at[5]), "MRR": _figure(hybrid.mrr),
            "nDCG@10": _figure(hybrid.ndcg_at_10),
            "answered nothing": _figure(hybrid.abstain_rate),
        })  # fmt: skip
    return status


def _kept_reports() -> dict:
    """The reports `librarian eval` shows (text or --json), kept here as it shows them: what it
    prints stays its own."""
    kept: dict = {}
    for name in ("render_text", "report_document"):
        shown = getattr(evaluate, name)

        def keeping(reports, context, *rest, _shown=shown, **options):
            kept.update(reports)
            return _shown(reports, context, *rest, **options)

        setattr(evaluate, name, keeping)
    return kept


def _figure(value: float | None) -> str:
    """As `librarian eval` shows it: three decimals, "-" for a figure with nothing to measure."""
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
