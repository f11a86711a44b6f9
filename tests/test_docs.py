"""The docs stay a size a change can keep true (issue 43): all of them within 20,000 words, each
decision record one page in the same three parts, its figures in benchmarks/results/, every
relative link resolving, and docs/benchmarks.md one table of today's figures."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DECISIONS = sorted((REPO / "docs" / "decisions").glob("*.md"))
DOCS = [
    REPO / "README.md",
    REPO / "SECURITY.md",
    REPO / "deploy" / "README.md",
    REPO / "benchmarks" / "eval" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]
"""What a reader of the project reads. Not counted: benchmarks/results/ (tables the benchmarks'
runs recorded) and the test fixtures' own READMEs."""
MAX_WORDS = 20_000
MAX_RECORD_WORDS = 400
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _words(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").split())


def test_all_docs_together_stay_within_twenty_thousand_words():
    counts = {str(p.relative_to(REPO)): _words(p) for p in DOCS}
    assert sum(counts.values()) <= MAX_WORDS, sorted(counts.items(), key=lambda c: -c[1])[:5]


@pytest.mark.parametrize("record", DECISIONS, ids=lambda p: p.name[:4])
def test_a_decision_is_one_page_of_context_decision_and_consequences(record):
    text = record.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    assert re.fullmatch(rf"# {record.name[:4]} \S.*", lines[0]), lines[0]
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## Context", "## Decision", "## Consequences"], headings
    assert _words(record) <= MAX_RECORD_WORDS
    # Superseded, wholly or in part: said first, never amended further down.
    superseded = [i for i, line in enumerate(lines) if re.search(r"\bsuperseded\b", line, re.I)]
    assert superseded in ([], [1]), f"'superseded' belongs in the line after the title: {record}"
    if superseded:
        assert re.match(r"(Partly s|S)uperseded by \[\d{4}\]\(\d{4}-[^)]+\.md\)", lines[1])
    figures = [line for line in lines if line.startswith("Measurements:")]
    assert all("benchmarks/results/" in line for line in figures)


@pytest.mark.parametrize("doc", [*DOCS, *(REPO / "benchmarks" / "results").glob("*.md")],
                         ids=lambda p: str(p.relative_to(REPO)))  # fmt: skip
def test_every_relative_link_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:|#", target):
            continue  # another site, or a heading of this page
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert broken == []


def test_the_benchmarks_page_is_one_table_of_today_s_figures_with_command_and_date():
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("|")]
    header, rule, *body = rows
    assert [c.strip() for c in header.strip("|").split("|")][1] == "command"
    assert set(rule) <= set("|- :") and len(body) >= 20
    blocks = [b for b in text.split("\n\n") if b.lstrip().startswith("|")]
    assert len(blocks) == 1, "one table"
    for row in body:
        assert "`" in row.split("|")[2], row  # a command
        assert re.search(r"20\d\d-\d\d-\d\d", row), row  # a date
