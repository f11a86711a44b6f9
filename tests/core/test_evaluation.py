"""The recall metrics on small cases worked out by hand, the golden file reader, and the projects
taken from a real store."""

import json
import math

import pytest

from librarian_dagster.core.recall.evaluation import (
    GoldenFileError,
    GoldenQuestion,
    Outcome,
    evaluate,
    load_golden,
    ndcg_at,
    store_projects,
    summarize,
    with_projects,
)
from librarian_dagster.core.store.memories import ChunkRecord
from tests.core.test_store import memory_record


def q(
    query: str,
    *relevant: str,
    kind: str = "solved",
    style: str = "keyword",
    project: str | None = None,
) -> GoldenQuestion:
    return GoldenQuestion(query, frozenset(relevant), kind, style, project, listed=relevant)


# Five questions and what a search ranked for each, chosen so every figure below is checkable:
#   a: relevant {a}, ranked x a y         -> r@1 0, r@5 1, r@10 1, RR 1/2, nDCG 1/log2 3
#   b: relevant {b, c}, c ranked 7th      -> r@1 1/2, r@5 1/2, r@10 1, RR 1,
#                                            nDCG (1 + 1/log2 8) / (1 + 1/log2 3)
#   c: relevant {d}, nothing returned     -> all 0, a false abstention
#   n1: nothing relevant, nothing returned -> a correct abstention
#   n2: nothing relevant, q returned      -> a wrong answer
QUESTIONS = [
    q("a", "a", kind="solved", style="paraphrase", project="app"),
    q("b", "b", "c", kind="solved", style="keyword", project="web"),
    q("c", "d", kind="decision", style="keyword", project="app"),
    q("n1", kind="none", style="off-topic", project="web"),
    q("n2", kind="none", style="near-miss"),
]
RANKINGS = {
    "a": ["x", "a", "y"],
    "b": ["b", "z1", "z2", "z3", "z4", "z5", "c"],
    "c": [],
    "n1": [],
    "n2": ["q"],
}
NDCG_A = 1 / math.log2(3)
NDCG_B = (1 + 1 / 3) / (1 + 1 / math.log2(3))


def _report():
    return evaluate(QUESTIONS, lambda query: RANKINGS[query])


def test_overall_metrics_match_the_hand_computed_values():
    m = _report().overall
    assert (m.questions, m.answerable) == (5, 3)
    assert m.recall_at[1] == pytest.approx(1 / 3)  # b only
    assert m.recall_at[5] == pytest.approx(2 / 3)  # a and b
    assert m.recall_at[10] == pytest.approx(2 / 3)
    assert m.mrr == pytest.approx(1.5 / 3)
    assert m.ndcg_at_10 == pytest.approx((NDCG_A + NDCG_B) / 3)
    assert m.abstain_rate == pytest.approx(0.5)
    assert m.false_abstain_rate == pytest.approx(1 / 3)


def test_breakdowns_by_kind_and_style():
    report = _report()
    assert list(report.by_kind) == ["decision", "none", "solved"]
    solved = report.by_kind["solved"]
    assert solved.answerable == 2
    assert solved.mrr == pytest.approx(0.75)
    assert solved.false_abstain_rate == 0.0
    assert solved.abstain_rate is None  # no unanswerable question of this kind
    none = report.by_kind["none"]
    assert (none.questions, none.answerable, none.abstain_rate) == (2, 0, 0.5)
    assert none.recall_at[5] is None and none.mrr is None
    assert report.by_style["keyword"].recall_at[1] == pytest.approx(0.5)
    assert report.by_style["off-topic"].abstain_rate == 1.0
    assert report.by_style["near-miss"].abstain_rate == 0.0


def test_breakdown_by_project_with_unnamed_ones_unspecified():
    report = _report()
    assert list(report.by_project) == ["app", "unspecified", "web"]
    app = report.by_project["app"]  # a (2nd) and c (not answered)
    assert (app.questions, app.answerable) == (2, 2)
    assert app.mrr == pytest.approx(0.25) and app.false_abstain_rate == 0.5
    assert app.abstain_rate is None
    web = report.by_project["web"]  # b (1st) and n1 (a correct abstention)
    assert (web.recall_at[1], web.abstain_rate) == (1.0, 1.0)
    assert report.by_project["unspecified"].abstain_rate == 0.0  # n2, answered


def test_an_asker_that_always_answers_has_no_abstention_figures():
    report = evaluate(QUESTIONS, lambda query: RANKINGS[query], abstains=False)
    assert report.overall.abstain_rate is None and report.overall.false_abstain_rate is None
    assert report.by_kind["none"].abstain_rate is None
    # The ranking figures are the same as with abstention measured.
    assert report.overall.recall_at == _report().overall.recall_at


def test_as_dict_uses_the_report_names():
    doc = _report().as_dict()
    for key in ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10", "abstain_rate"):
        assert key in doc, key
    assert doc["false_abstain_rate"] == pytest.approx(1 / 3)
    assert doc["by_kind"]["decision"]["recall@10"] == 0.0
    assert doc["by_style"]["paraphrase"]["ndcg@10"] == pytest.approx(NDCG_A)
    assert doc["by_project"]["web"]["recall@1"] == 1.0
    json.dumps(doc)  # plain data all the way down


def test_a_headline_k_is_added_to_the_standard_ones():
    m = evaluate(QUESTIONS, lambda query: RANKINGS[query], ks=(1, 5, 10, 7)).overall
    assert sorted(m.recall_at) == [1, 5, 7, 10]
    assert m.recall_at[7] == pytest.approx(2 / 3)  # a (2nd) and b (1st); c never answered
    with pytest.raises(ValueError, match="at least 1"):
        evaluate(QUESTIONS, lambda query: [], ks=(0,))


def test_a_session_counts_once_at_its_best_rank():
    # Two chunks of x before the first chunk of a: a is the second session, not the third.
    report = evaluate([q("a", "a")], lambda query: ["x", "x", "a", "a"])
    assert report.overall.mrr == 0.5
    assert report.outcomes[0].ranking == ("x", "a")


def test_perfect_and_hopeless_rankings_are_the_bounds():
    perfect = summarize([Outcome(q("p", "a", "b"), ("b", "a"))])
    assert perfect.recall_at[1] == 1.0 and perfect.recall_at[5] == 1.0
    late = summarize([Outcome(q("l", "a"), ("x", "y", "z", "v", "w", "a"))])
    assert late.recall_at[5] == 0.0 and late.recall_at[10] == 1.0
    assert perfect.mrr == 1.0 and perfect.ndcg_at_10 == pytest.approx(1.0)
    wrong = summarize([Outcome(q("w", "a"), ("x", "y"))])
    assert wrong.recall_at[10] == 0.0 and wrong.mrr == 0.0 and wrong.ndcg_at_10 == 0.0
    assert wrong.false_abstain_rate == 0.0  # it answered, wrongly: not an abstention


def test_ndcg_cuts_at_k_and_normalises_by_what_is_reachable():
    # Twelve relevant sessions: a perfect top 10 scores 1 even though two are left out.
    many = Outcome(q("m", *[f"s{i}" for i in range(12)]), tuple(f"s{i}" for i in range(12)))
    assert ndcg_at(many, 10) == pytest.approx(1.0)
    late = Outcome(q("l", "a"), (*[f"x{i}" for i in range(10)], "a"))
    assert ndcg_at(late, 10) == 0.0


def test_progress_is_reported_after_each_question():
    seen = []
    evaluate(QUESTIONS, lambda query: RANKINGS[query], progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, 5) for i in range(1, 6)]


def test_no_questions_gives_no_figures_rather_than_zeros():
    m = evaluate([], lambda query: []).overall
    assert m.questions == 0 and m.recall_at[5] is None and m.abstain_rate is None


# -- golden files ---------------------------------------------------------------------------------


def test_load_golden_reads_questions_and_ignores_extra_keys_and_blank_lines(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text(
        '{"id": "g-1", "query": "why locked?", "relevant": ["s1"], "kind": "solved", '
        '"style": "vague"}\n\n'
        '{"query": "unrelated", "relevant": []}\n',
        encoding="utf-8",
    )
    first, second = load_golden([path])
    assert first == GoldenQuestion("why locked?", frozenset({"s1"}), "solved", "vague")
    assert not second.answerable and second.kind == "unspecified"
    assert first.project is None  # not named: the store says, later


def test_load_golden_reads_the_project_and_keeps_the_relevant_sessions_order(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text(
        '{"query": "x", "relevant": ["s9", "s1", "s9"], "project": "cipher-box"}\n'
        '{"query": "y", "relevant": ["s9", "s1"]}\n',
        encoding="utf-8",
    )
    named, unnamed = load_golden([path])
    assert named.project == "cipher-box" and named.relevant == frozenset({"s1", "s9"})
    assert unnamed.project is None and unnamed.listed == ("s9", "s1")


def test_with_projects_takes_an_unnamed_project_from_the_first_relevant_session_stored():
    projects = {"s1": "app", "s2": "web"}
    named, first_stored, first_of_two, nothing_stored, unanswerable = with_projects(
        [
            q("named", "s1", project="cli"),
            q("first stored", "gone", "s2", "s1"),  # `gone` is not in the store: s2 decides
            q("first of two", "s1", "s2"),
            q("nothing stored", "gone"),
            q("unanswerable"),
        ],
        projects,
    )
    assert named.project == "cli"  # the line's word wins over the store's
    assert first_stored.project == "web"
    assert first_of_two.project == "app"
    assert nothing_stored.project == "unspecified"
    assert unanswerable.project == "unspecified"


def test_store_projects_lists_every_session_private_ones_too(store):
    for session_id, project, domain in [
        ("s1", "app", "technical"),
        ("s2", "web", "technical"),
        ("s3", "app", "private"),
    ]:
        record = memory_record(session_id, project=project, domain=domain)
        store.memories.replace_memory(record, [ChunkRecord("summary", 0, "x", [1.0, 0.0])])
    expected = {"s1": "app", "s2": "web", "s3": "app"}
    assert store_projects(store.memories) == expected
    assert store_projects(store.memories, page_size=2) == expected  # two pages, the cursor followed


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"query": "x", "relevant": ["s1"]', "not JSON"),
        ('["x", ["s1"]]', "expected a JSON object, got list"),
        ('{"relevant": ["s1"]}', "`query` must be a non-empty string"),
        ('{"query": "x", "relevant": "s1"}', "`relevant` must be a list of session ids"),
        ('{"query": "x", "relevant": [1]}', "`relevant` must be a list of session ids"),
        ('{"query": "x", "relevant": [], "kind": 3}', "`kind` must be a non-empty string"),
        ('{"query": "x", "relevant": [], "project": ""}', "`project` must be a non-empty string"),
    ],
)
def test_a_malformed_line_names_the_file_and_line(tmp_path, line, reason):
    path = tmp_path / "golden.jsonl"
    path.write_text('{"query": "fine", "relevant": []}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(GoldenFileError, match=reason) as err:
        load_golden([path])
    assert str(err.value).startswith(f"{path}:2: ")


def test_a_missing_golden_file_is_a_clear_error(tmp_path):
    with pytest.raises(GoldenFileError, match="cannot read"):
        load_golden([tmp_path / "absent.jsonl"])
