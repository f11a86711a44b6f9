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
    args, rest = parser.parse_known_args()
    # The one place this script sets the environment: `librarian eval` reads its settings there.
    os.environ["LIBRARIAN_HOME"] = str(args.home)
    return librarian(["eval", *map(str, args.golden), *rest])


if __name__ == "__main__":
    sys.exit(main())
