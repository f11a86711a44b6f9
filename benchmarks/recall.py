"""Recall quality on the dev corpus's golden and negative questions: `librarian eval` over a home.

    uv run python benchmarks/ingest.py --home /tmp/librarian-bench-home   # once
    uv run python benchmarks/recall.py --home /tmp/librarian-bench-home [--json] [--k 5]

The same as `LIBRARIAN_HOME=H librarian eval golden-dev.jsonl negatives-dev.jsonl`: hybrid,
vector-only and text-only search side by side, per kind and style of question. Options after
--home go to `librarian eval` as they are (`--json`, `--k`, `--min-relevance`, `--show-misses`).
"""

import argparse
import os
import sys
from pathlib import Path

from _corpus import GOLDEN

from librarian_dagster.cli.main import main as librarian

NEGATIVES = GOLDEN.with_name("negatives-dev.jsonl")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a home made by ingest.py")
    args, rest = parser.parse_known_args()
    # The one place this script sets the environment: `librarian eval` reads its settings there.
    os.environ["LIBRARIAN_HOME"] = str(args.home)
    return librarian(["eval", str(GOLDEN), str(NEGATIVES), *rest])


if __name__ == "__main__":
    sys.exit(main())
