"""The Gemini/Vertex embedder, through the real google-genai SDK, against a fake server."""

import math

import google.oauth2.credentials
import pytest

from librarian_dagster.core.models.calls import ProviderRejected, RetryBounds
from librarian_dagster.core.models.embeddings import Embedder, GeminiEmbedder
from librarian_dagster.core.models.gemini import ClientConfig
from tests.fake_gemini import FakeGemini, Reply, error

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


@pytest.fixture
def fake():
    with FakeGemini() as server:
        yield server


def _embedder(fake, service="gemini", dimension=768):
    config = (
        ClientConfig("gemini", api_key="AIzaFAKE", base_url=fake.url)
        if service == "gemini"
        else ClientConfig("vertex", project="acme", location="us-central1", base_url=fake.url)
    )
    credentials = (
        google.oauth2.credentials.Credentials("fake-token") if service == "vertex" else None
    )
    return GeminiEmbedder(
        config,
        "gemini-embedding-001",
        dimension,
        RetryBounds(attempts=3),
        credentials=credentials,
        sleep=lambda _s: None,
    )


def test_documents_are_embedded_in_batches_of_100_as_retrieval_documents(fake):
    embedder = _embedder(fake)
    assert isinstance(embedder, Embedder)
    texts = [f"chunk {i} about the zanzibar cache lock" for i in range(230)]
    vectors = embedder.embed_documents(texts)
    assert len(vectors) == 230 and all(len(v) == 768 for v in vectors)
    # The fake's vectors have norm 3, as the service's are not normalised below 3072-d.
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)
    calls = fake.calls("batchEmbedContents")
    assert [len(c.json["requests"]) for c in calls] == [100, 100, 30]
    assert all(c.path == "/v1/models/gemini-embedding-001:batchEmbedContents" for c in calls)
    first = calls[0].json["requests"][0]
    assert first["taskType"] == "RETRIEVAL_DOCUMENT" and first["outputDimensionality"] == 768
    assert [r["content"]["parts"][0]["text"] for c in calls for r in c.json["requests"]] == texts
    assert embedder.embed_documents([]) == []


def test_a_query_is_embedded_as_a_retrieval_query_near_its_documents(fake):
    embedder = _embedder(fake)
    docs = embedder.embed_documents(["the zanzibar cache lock hangs", "nginx upload limit 413"])
    query = embedder.embed_query("why does the zanzibar cache lock hang")
    assert fake.calls()[-1].json["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    cos = [sum(a * b for a, b in zip(query, d, strict=True)) for d in docs]
    assert cos[0] > cos[1]


def test_vertex_paths_batch_and_single(fake):
    embedder = _embedder(fake, service="vertex")
    assert len(embedder.embed_documents(["a b", "c d"])) == 2
    assert len(embedder.embed_query("a b")) == 768
    prefix = "/v1beta1/projects/acme/locations/us-central1/publishers/google/models/"
    paths = [c.path for c in fake.calls()]
    assert paths == [
        prefix + "gemini-embedding-001:batchEmbedContents",
        prefix + "gemini-embedding-001:embedContent",
    ]
    config = fake.calls()[1].json["embedContentConfig"]
    assert config == {"taskType": "RETRIEVAL_QUERY", "outputDimensionality": 768}


def test_429_is_retried_and_a_wrong_dimension_is_refused(fake):
    fake.embed_script = [error(429, "Quota exceeded.", "RESOURCE_EXHAUSTED", {"Retry-After": "0"})]
    assert len(_embedder(fake).embed_query("x")) == 768
    assert len(fake.calls()) == 2
    fake.embed_script = [Reply(200, {"embeddings": [{"values": [0.1, 0.2, 0.3]}]})]
    with pytest.raises(ProviderRejected, match=r"\[3\] dimensions.*768"):
        _embedder(fake).embed_query("x")


def test_vertex_text_embedding_models_go_through_predict(fake):
    embedder = GeminiEmbedder(
        ClientConfig("vertex", project="acme", location="us-central1", base_url=fake.url),
        "text-embedding-005",
        768,
        RetryBounds(attempts=1),
        credentials=google.oauth2.credentials.Credentials("fake-token"),
    )
    vectors = embedder.embed_documents(["a b", "c d"])
    assert len(vectors) == 2 and all(len(v) == 768 for v in vectors)
    [call] = fake.calls("predict")
    assert call.path.endswith("/publishers/google/models/text-embedding-005:predict")
    assert [i["content"] for i in call.json["instances"]] == ["a b", "c d"]
    assert call.json["instances"][0]["task_type"] == "RETRIEVAL_DOCUMENT"
