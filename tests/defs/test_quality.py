"""The `recall_quality` asset on a real store: its figures, its floor check, and its edge cases."""

import json

import dagster as dg
import pytest

from librarian_dagster.core.settings import Settings, SettingsError
from librarian_dagster.defs.quality import RECALL_FLOOR_CHECK, recall_quality
from librarian_dagster.defs.resources import QualityResource, build_resources

# `remembered`: the sessions "sqlite" and "css", one bullet each, embedded with the real model.
from tests.cli.test_query import remembered  # noqa: F401

FOUND = {"query": "SQLite database locked by concurrent writers", "relevant": ["sqlite"],
         "kind": "solved", "style": "keyword"}  # fmt: skip
# Asks about the stylesheet but names the SQLite session as the answer: ranked second at best.
MISSED = {"query": "margin under closed details elements in the stylesheet", "relevant": ["sqlite"],
          "kind": "decision", "style": "paraphrase"}  # fmt: skip
NOTHING = {"query": "which Kubernetes ingress controller did we pick", "relevant": [],
           "kind": "none", "style": "off-topic"}  # fmt: skip


@pytest.fixture
def memory_url(remembered) -> str:  # noqa: F811 (the imported fixture)
    """The database holding the two remembered sessions."""
    return remembered.url


def _settings(tmp_path, database_url, floor="0.8") -> Settings:
    return Settings.from_env(
        {
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_RECALL_FLOOR": floor,
        }
    )


def _golden(settings: Settings, *questions: dict) -> None:
    settings.eval_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(q) + "\n" for q in questions)
    (settings.eval_dir / "dev.jsonl").write_text(lines, encoding="utf-8")


def _measure(settings: Settings) -> dg.ExecuteInProcessResult:
    resources = build_resources(settings)
    # Every chunk counts, whatever recall threshold is configured: the figures below are worked
    # out from the full ranking.
    resources["quality"] = QualityResource(
        eval_dir=str(settings.eval_dir), recall_floor=settings.recall_floor, min_relevance=0.0
    )
    return dg.materialize(
        [recall_quality],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    [materialization] = result.asset_materializations_for_node("recall_quality")
    return {k: v.value for k, v in materialization.metadata.items()}


def test_recall_quality_records_the_figures_and_passes_above_the_floor(tmp_path, memory_url):
    settings = _settings(tmp_path, memory_url)
    _golden(settings, FOUND, NOTHING)
    result = _measure(settings)
    assert result.success
    meta = _metadata(result)
    for key in ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10"):
        assert meta[key] == 1.0 and isinstance(meta[key], float), key
    # At min relevance 0 the off-topic question gets an answer: a wrong one, not an abstention.
    assert meta["abstain_rate"] == 0.0 and meta["false_abstain_rate"] == 0.0
    assert (meta["questions"], meta["answerable"], meta["sessions"]) == (2, 1, 2)
    assert meta["embedding_model"] == "all-MiniLM-L6-v2"
    assert meta["golden_files"] == "dev.jsonl"
    assert "| solved | 1 | 1.000 |" in meta["by_kind"]
    # The answerable question counts under its session's project, as the store names it.
    assert "| alpha | 1 | 1.000 |" in meta["by_project"]
    assert "| unspecified | 1 |" in meta["by_project"]
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == RECALL_FLOOR_CHECK and check.passed
    assert check.severity == dg.AssetCheckSeverity.WARN


def test_the_floor_check_warns_below_the_floor_without_failing_the_run(tmp_path, memory_url):
    settings = _settings(tmp_path, memory_url, floor="0.75")
    _golden(settings, FOUND, MISSED)
    result = _measure(settings)
    assert result.success
    meta = _metadata(result)
    assert meta["recall@1"] == 0.5 and meta["recall@5"] == 1.0
    assert meta["mrr"] == pytest.approx(0.75)
    assert "abstain_rate" not in meta  # no unanswerable question: nothing to measure, not zero
    [check] = result.get_asset_check_evaluations()
    assert check.passed  # recall@5 1.0 >= 0.75

    # A question whose answer is in no session: recall@5 drops to 2/3, below a floor of 0.9.
    settings = _settings(tmp_path, memory_url, floor="0.9")
    _golden(settings, FOUND, MISSED, {**MISSED, "relevant": ["nowhere"]})
    result = _measure(settings)
    assert result.success  # a warning, not a failure
    assert _metadata(result)["recall@5"] == pytest.approx(2 / 3)
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.description == "recall@5 0.667 is below the floor 0.9"


def test_without_golden_files_it_materializes_with_a_note(tmp_path, memory_url):
    settings = _settings(tmp_path, memory_url)
    result = _measure(settings)
    assert result.success
    meta = _metadata(result)
    assert meta["questions"] == 0 and meta["sessions"] == 2
    assert f"put *.jsonl question files in {settings.eval_dir}" in meta["note"]
    assert "recall@5" not in meta
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.description == "not measured: no answerable golden question"

    _golden(settings, NOTHING)  # only unanswerable questions: abstention, but no recall@5
    result = _measure(settings)
    assert result.success
    meta = _metadata(result)
    assert meta["abstain_rate"] == 0.0 and "recall@5" not in meta and "note" not in meta
    [check] = result.get_asset_check_evaluations()
    assert check.passed and "recall@5" not in check.metadata


def test_a_malformed_golden_file_fails_the_run_naming_file_and_line(tmp_path, database_url):
    settings = _settings(tmp_path, database_url)
    _golden(settings, FOUND)
    with (settings.eval_dir / "dev.jsonl").open("a", encoding="utf-8") as out:
        out.write('{"query": "no relevant key"}\n')
    result = _measure(settings)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert f"{settings.eval_dir / 'dev.jsonl'}:2: `relevant` must be" in str(
        failure.step_failure_data.error
    )


def test_the_recall_floor_setting(tmp_path):
    home = {"LIBRARIAN_HOME": str(tmp_path)}
    assert Settings.from_env(home).recall_floor == 0.8
    assert Settings.from_env({**home, "LIBRARIAN_RECALL_FLOOR": "0.65"}).recall_floor == 0.65
    with pytest.raises(SettingsError, match="LIBRARIAN_RECALL_FLOOR must be between 0 and 1"):
        Settings.from_env({**home, "LIBRARIAN_RECALL_FLOOR": "80"})
    assert Settings.from_env(home).eval_dir == tmp_path / "eval"
