"""How ranked lists become one ranking of sessions (core/recall/ranking.py), without a store."""

from librarian_dagster.core.recall.ranking import fuse_sessions, session_places


def test_a_session_counts_once_at_its_best_chunk_and_equal_scores_share_a_place():
    ranked = [(1, "a", 0.1), (2, "a", 0.2), (3, "b", 0.3), (4, "c", 0.3), (5, "d", 0.5)]
    assert session_places(ranked) == [("a", 1), ("b", 2), ("c", 2), ("d", 4)]
    # A later chunk of a session seen before neither takes a place nor ends a tie.
    assert session_places([(1, "a", 0.3), (2, "b", 0.3), (3, "a", 0.3), (4, "c", 0.3)]) == [
        ("a", 1),
        ("b", 1),
        ("c", 1),
    ]
    assert session_places([]) == []


def test_first_in_three_lists_beats_tenth_in_all_five():
    # A long session whose mean vector and digest miss the detail is first where it is found,
    # and in no other list; at k = 60 the session tenth everywhere won (5/70 > 3/61).
    found = [(1.0, [("long", 1), ("everywhere", 10)])] * 3
    missed = [(1.0, [("everywhere", 10)])] * 2
    fused = fuse_sessions(found + missed)
    assert fused["long"] > fused["everywhere"]


def test_equal_places_are_equal_votes():
    fused = fuse_sessions([(1.0, [("a", 1), ("b", 1)]), (0.5, [("b", 1), ("a", 1)])])
    assert fused["a"] == fused["b"]
