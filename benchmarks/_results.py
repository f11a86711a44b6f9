"""A benchmark's figures, written where the docs link them: `benchmarks/results/<name>.md`.

A benchmark run with `--record` adds its run as the first row of the generated table at the head
of its results file: the date, the machine's load as it ended, the command as it was run and the
benchmark's headline figures. Nothing is written without `--record`: a run on a busy machine, or
to try a change, records nothing. What the file held before (figures recorded by hand before the
benchmarks wrote their own rows) stays below the table as it is. When a benchmark's figures change
shape (other columns), a new table starts above the old one, which stays as written.
"""

import argparse
import os
import re
import shlex
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BEGIN = "<!-- recorded runs: begin (written by the benchmark's --record) -->"
END = "<!-- recorded runs: end -->"


def add_record_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        action="store_true",
        help="add this run's figures to its table in benchmarks/results/ (a quiet machine's run)",
    )


def record(name: str, figures: Mapping[str, object], *, folder: Path = RESULTS) -> Path:
    """This run's `figures` (column -> value, in order) as the newest row of `name`'s table."""
    row = {
        "date": datetime.now(UTC).date().isoformat(),
        "load": f"{os.getloadavg()[0]:.1f}",
        "command": "`" + shlex.join(["python", *sys.argv]).replace("|", "\\|") + "`",
        **{column: _shown(value) for column, value in figures.items()},
    }
    path = folder / f"{name}.md"
    text = path.read_text(encoding="utf-8") if path.exists() else f"# {name}: figures recorded\n"
    header, rows, rest = _table_of(text)
    if header != list(row):
        rest, rows = (_retired(text) if header else text), []
    table = [_line(list(row)), _line(["---"] * len(row)), _line(list(row.values()))]
    table += [_line(old) for old in rows]
    block = "\n".join([BEGIN, *table, END])
    path.write_text(_placed(block, rest), encoding="utf-8")
    return path


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _table_of(text: str) -> tuple[list[str], list[list[str]], str]:
    """The generated table's header and rows, and the file without the table."""
    if BEGIN not in text:
        return [], [], text
    head, _, after = text.partition(BEGIN)
    table, _, tail = after.partition(END)
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    rest = head.rstrip("\n") + "\n" + tail
    return _cells(lines[0]), [_cells(line) for line in lines[2:]], rest


def _retired(text: str) -> str:
    """The file with its generated table kept as written, no longer the one rows go to."""
    return text.replace(BEGIN + "\n", "").replace(END + "\n", "")


def _placed(block: str, text: str) -> str:
    """`block` after the file's title and the paragraph that says what records it."""
    paragraphs = [p for p in re.split(r"\n{2,}", text.strip("\n")) if p.strip()]
    head = 2 if len(paragraphs) > 1 and paragraphs[1].startswith("Recorded by") else 1
    return "\n\n".join([*paragraphs[:head], block, *paragraphs[head:]]) + "\n"
