"""`librarian eval` end to end: a real store, the real local embedder, a small golden file."""

import io
import json

import pytest
from pydantic import TypeAdapter

from librarian_dagster.cli.evaluate import progress_bar
from librarian_dagster.cli.main import main
from librarian_dagster.core.capture.session import Session, Turn
from librarian_dagster.defs.staging import StagingIOManager

# `remembered`: the sessions "sqlite" and "css", one bullet each, embedded with the real model.
from tests.cli.test_query import remembered  # noqa: F401

GOLDEN = [
    {"id": "g1", "query": "SQLite database locked by concurrent writers", "relevant": ["sqlite"],
     "kind": "solved", "style": "keyword"},
    {"id": "g2", "query": "spacing under collapsed details in the stylesheet", "relevant": ["css"],
     "kind": "solved", "style": "paraphrase"},
    {"id": "n1", "query": "which Kubernetes ingress controller did we pick", "relevant": [],
     "kind": "none", "style": "off-topic"},
]  # fmt: skip
METRICS = ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10")
RATES = ("abstain_rate", "false_abstain_rate")


@pytest.fixture
def golden(remembered, tmp_path):  # noqa: F811 (the imported fixture)
    """Two remembered sessions (`remembered` points the CLI at them) and a 3-line golden file."""
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in GOLDEN), encoding="utf-8")
    return path


def _eval_json(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar when stderr is not a terminal
    return json.loads(captured.out)


def test_eval_json_reports_every_figure_per_mode_kind_and_style(golden, capsys):
    # Min relevance 0 whatever threshold is configured: every chunk counts, so the off-topic
    # question gets an answer (a wrong one, not an abstention).
    doc = _eval_json(capsys, str(golden), "--min-relevance", "0")
    for key in METRICS:
        assert doc[key] == 1.0, key
    assert doc["abstain_rate"] == 0.0 and doc["false_abstain_rate"] == 0.0
    assert (doc["questions"], doc["answerable"], doc["sessions"]) == (3, 2, 2)
    assert doc["k"] == 5 and doc["min_relevance"] == 0.0
    assert doc["embedding_model"] == "all-MiniLM-L6-v2"
    assert set(doc["by_kind"]) == {"solved", "none"}
    assert doc["by_kind"]["none"]["recall@5"] is None
    assert doc["by_style"]["paraphrase"]["mrr"] == 1.0
    # No line names a project: the answerable ones take their session's (`alpha`, as
    # `remembered` stores them), the off-topic one none.
    assert {p: f["questions"] for p, f in doc["by_project"].items()} == {
        "alpha": 2,
        "unspecified": 1,
    }
    assert doc["by_project"]["alpha"]["recall@1"] == 1.0
    assert list(doc["modes"]) == ["hybrid", "vector", "text"]
    assert "reference" not in doc  # the naive index only when asked for
    for mode, figures in doc["modes"].items():
        assert set(METRICS + RATES) <= set(figures), mode
        assert "solved" in figures["by_kind"], mode
    assert doc["modes"]["hybrid"]["mrr"] == doc["mrr"]
    assert doc["modes"]["vector"]["recall@1"] == 1.0
    # BM25 needs one shared word: both answerable questions have one, the off-topic one none.
    assert doc["modes"]["text"]["false_abstain_rate"] == 0.0
    assert doc["modes"]["text"]["abstain_rate"] == 1.0


def test_the_naive_reference_is_a_mode_of_its_own_that_always_answers(golden, tmp_path, capsys):
    # `sqlite` staged as the pipeline stages it (`remembered`'s home is tmp_path / "home"):
    # its prompt and final reply are read; `css` is not staged, its exchange chunk stands in.
    sqlite = Session(
        "sqlite",
        "alpha",
        turns=[
            Turn("user", "prompt", "the SQLite database is locked by concurrent writers", None),
            Turn("assistant", "text", "Looking at the journal mode.", None),
            Turn("assistant", "text", "Switched the journal to WAL mode.", None),
        ],
    )
    staged = StagingIOManager(home=str(tmp_path / "home")).path_for("redacted_session", "sqlite")
    staged.parent.mkdir(parents=True)
    staged.write_bytes(TypeAdapter(Session).dump_json(sqlite))

    doc = _eval_json(capsys, str(golden), "--min-relevance", "0", "--reference", "naive")
    assert list(doc["modes"]) == ["hybrid", "vector", "text", "naive"]
    naive = doc["modes"]["naive"]
    assert naive["recall@1"] == 1.0 and naive["mrr"] == 1.0
    assert naive["abstain_rate"] is None and naive["false_abstain_rate"] is None
    assert naive["by_project"]["alpha"]["questions"] == 2
    reference = doc.pop("reference")
    assert isinstance(reference.pop("build_seconds"), float)
    assert reference == {
        "name": "naive",
        "chunks": 3,  # sqlite's prompt and final reply, css's exchange chunk
        "sessions": 2,
        "staged_sessions": 1,
        "exchange_chunk_sessions": 1,
    }

    assert main(["eval", str(golden), "--min-relevance", "0", "--reference", "naive"]) == 0
    out = capsys.readouterr().out
    [row] = [line.split() for line in out.splitlines() if line.startswith("naive ")]
    assert row == ["naive", *["1.000"] * 5, "-", "-"]
    assert "(naive: built in " in out and "3 chunks of 2 sessions: 1 from their staged" in out


def test_a_threshold_above_every_score_abstains_on_everything(golden, capsys):
    doc = _eval_json(capsys, str(golden), "--min-relevance", "1.5")
    assert doc["min_relevance"] == 1.5
    assert doc["abstain_rate"] == 1.0 and doc["false_abstain_rate"] == 1.0
    assert doc["recall@5"] == 0.0 and doc["mrr"] == 0.0


def test_eval_text_report_leads_with_the_headline_k(golden, capsys):
    assert main(["eval", str(golden), "--k", "1", "--show-misses", "--min-relevance", "0"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("recall@1 1.000  (hybrid; 2 answerable and 1 unanswerable")
    assert "2 sessions, all-MiniLM-L6-v2" in first
    headings = ("mode ", "hybrid ", "vector ", "text ", "hybrid by kind", "hybrid by style",
                "hybrid by project")  # fmt: skip
    for heading in headings:
        assert f"\n{heading}" in out, heading
    assert "none (1)" in out and "off-topic (1)" in out and "alpha (2)" in out
    assert "answered       [none/off-topic] which Kubernetes ingress" in out


def test_a_malformed_golden_line_is_a_clear_error_before_the_store_is_opened(tmp_path, capsys):
    path = tmp_path / "golden.jsonl"
    path.write_text('{"query": "q", "relevant": []}\n{"query": "q"}\n', encoding="utf-8")
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"librarian eval: {path}:2: `relevant` must be a list of session ids" in err
    assert main(["eval", str(path), "--k", "0"]) == 2
    assert "--k must be between 1 and 20" in capsys.readouterr().err


def test_the_progress_bar_redraws_one_line_and_clears_it():
    stream = io.StringIO()
    show = progress_bar(stream)
    show("hybrid", 1, 4)
    show("hybrid", 4, 4)
    drawn = stream.getvalue()
    assert drawn.startswith("\rhybrid [" + "#" * 7 + "." * 23 + "] 1/4")
    assert drawn.endswith("\r") and "\n" not in drawn
