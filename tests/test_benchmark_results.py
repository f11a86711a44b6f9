"""`--record`: a benchmark's run becomes the newest row of the generated table in its results file,
what was recorded before stays as it was, and a change of columns starts a new table."""

import sys

from benchmarks._results import BEGIN, END, record

OLD = (
    "# mcp_load: figures recorded\n\nRecorded by `python benchmarks/mcp_load.py`.\n\n"
    "2026-12-03: p50 491 ms\n"
)


def test_runs_are_rows_newest_first_and_what_was_written_by_hand_stays(tmp_path, monkeypatch):
    (tmp_path / "mcp_load.md").write_text(OLD, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["benchmarks/mcp_load.py", "--record"])
    record("mcp_load", {"errors": 0, "p50 ms": 508.0, "calls/s": 88.64}, folder=tmp_path)
    record("mcp_load", {"errors": 1, "p50 ms": 512.25, "calls/s": 87.0}, folder=tmp_path)
    text = (tmp_path / "mcp_load.md").read_text(encoding="utf-8")
    table = text[text.index(BEGIN) : text.index(END)].splitlines()[1:]
    assert table[0].startswith("| date | load | command | errors | p50 ms | calls/s |")
    assert "`python benchmarks/mcp_load.py --record`" in table[2]
    assert table[2].endswith("| 1 | 512.2 | 87.0 |") and table[3].endswith("| 0 | 508.0 | 88.6 |")
    assert text.startswith("# mcp_load: figures recorded\n\nRecorded by `python benchmarks/mcp_")
    assert text.index("Recorded by") < text.index(BEGIN)
    assert text.rstrip().endswith("2026-12-03: p50 491 ms")  # kept, below the table
    assert text.count(BEGIN) == 1


def test_other_columns_start_a_new_table_and_keep_the_old_one_as_written(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/hooks.py"])
    record("hooks", {"cold ms": 18.4}, folder=tmp_path)
    record("hooks", {"cold ms": 18.0, "warm ms": 17.1}, folder=tmp_path)
    text = (tmp_path / "hooks.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count("| date | load | command |") == 2
    assert text.index("warm ms") < text.index(END) < text.rindex("| 18.4 |")
