"""The relevance model: names, a space's background, and a probability that means the same in any
embedding space."""

import numpy as np
import pytest

from librarian_dagster.core.recall.relevance import (
    DEFAULT_CALIBRATION,
    DEFAULT_THRESHOLD,
    MIN_SAMPLE,
    Evidence,
    SpaceCalibration,
    named_terms,
    relevance,
)


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("Did we add Ollama local models as an agent that entire can track?", "Ollama"),
        ("Do we GPG-sign the commits?", "GPG sign"),
        ("How did we set up Continue.dev support?", "Continue.dev"),
        ("why does parseConfig fail on v2.1 files", "parseConfig v2.1"),
        # A sentence's first word is capitalised whatever it is; "I" is no name.
        ("Where did I leave the lock fix? Then what?", ""),
        ("the crash dump got scribbled in my shell window", ""),
        # Jargon is a name however it is written; a word common in any language a user may ask
        # in is not, nor is a compound of plain words.
        ("how did we switch the metadata format to protobuf?", "protobuf"),
        ("why do the submodules vanish from a snapshot", "submodules"),
        ("o app mostra só doze programas de treino agora", ""),
        # A common word mistyped is that word, not a name.
        ("what happens when the metadata branch gets initiailzed", ""),
        ("the beer-themed package manager", ""),
    ],
)
def test_named_terms_are_the_capitalised_all_caps_code_shaped_and_jargon_words(question, names):
    assert named_terms(question) == names


def test_a_jargon_word_the_store_holds_mistyped_is_no_name():
    question = "do we run gitlaeks on the protobuf files"
    assert named_terms(question) == "gitlaeks protobuf"
    assert named_terms(question, lambda variants: "gitleaks" in variants) == "protobuf"


def _space(mean: float, sd: float) -> SpaceCalibration:
    return SpaceCalibration(mean, sd, mean, sd)


def test_the_same_standing_above_the_background_is_the_same_probability_in_any_space():
    # all-MiniLM-L6-v2's unrelated chunks sit near 0.19; another model's may sit at 0.6 with a
    # narrower spread. A match 3 spreads above each background is equally sure in both.
    minilm, other = _space(0.19, 0.14), _space(0.60, 0.05)
    in_minilm = relevance(Evidence(0.19 + 3 * 0.14, None, 0.19 + 2 * 0.14, 0.0), minilm)
    in_other = relevance(Evidence(0.60 + 3 * 0.05, None, 0.60 + 2 * 0.05, 0.0), other)
    assert in_minilm == pytest.approx(in_other)
    # The raw cosine 0.75 is far above chance for the first model and chance for a third.
    assert relevance(Evidence(0.75, None, 0.7, 0.0), minilm) > 0.9
    assert relevance(Evidence(0.75, None, 0.7, 0.0), _space(0.75, 0.05)) < 0.5


def test_either_layer_can_carry_the_match_and_unseen_names_weigh_against_it():
    digest_only = Evidence(exchange_cosine=0.05, digest_cosine=0.9, session_cosine=None, unseen=0)
    transcript_only = Evidence(0.9, 0.05, None, 0.0)
    assert relevance(digest_only) == relevance(transcript_only) > 0.9
    close = Evidence(0.6, 0.6, 0.55, 0.0)
    # A question whose names carry 40% of its idf mass unseen: a near miss, however close.
    assert relevance(close) > 0.9 > DEFAULT_THRESHOLD > relevance(Evidence(0.6, 0.6, 0.55, 0.4))
    assert relevance(Evidence(None, None, None, 0.0)) == 0.0


def test_a_space_is_measured_from_chunks_of_different_sessions():
    rng = np.random.default_rng(1)
    # Five sessions, each its own direction plus noise: chunks of one session are alike, chunks
    # of two sessions are unrelated (cosine near 0).
    axes = np.eye(16)[:10]
    sessions = [f"s{i % 10}" for i in range(MIN_SAMPLE)]
    vectors = np.array([axes[i % 10] + 0.1 * rng.normal(size=16) for i in range(MIN_SAMPLE)])
    means = np.array([axes[i] for i in range(10)])
    space = SpaceCalibration.from_sample(vectors, sessions, means, [f"s{i}" for i in range(10)])
    assert space is not None
    assert abs(space.chunk_mean) < 0.05 and 0 < space.chunk_sd < 0.2
    assert abs(space.session_mean) < 0.05
    # Too few chunks to say: the caller keeps the default background.
    assert SpaceCalibration.from_sample(vectors[:20], sessions[:20], means, ["s0"]) is None
    assert DEFAULT_CALIBRATION.chunk_sd > 0


def test_a_space_with_almost_no_spread_still_gives_a_probability():
    flat = SpaceCalibration(0.5, 1e-3, 0.5, 1e-3)
    assert relevance(Evidence(0.0, 0.0, 0.0, 0.0), flat) == pytest.approx(0.0, abs=1e-12)
    assert relevance(Evidence(1.0, 1.0, 1.0, 0.0), flat) == pytest.approx(1.0)
