"""Text embeddings: the `Embedder` protocol, and Gemini's embedder behind it.

The offline provider, all-MiniLM-L6-v2 on ONNX Runtime, is `minilm.py`; Gemini's client and its
retries, shared with the digester, are `gemini.py`.

This module must stay dagster-free: the MCP server and tests import it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from google import genai
    from google.auth.credentials import Credentials

    from librarian_dagster.core.models.calls import RetryBounds
    from librarian_dagster.core.models.gemini import ClientConfig

__all__ = ["Embedder", "GeminiEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    """What the write path (chunk embeddings) and the read path (search) need from a model.

    Documents and queries have separate methods because remote providers embed them differently
    (Gemini/Vertex task types RETRIEVAL_DOCUMENT vs RETRIEVAL_QUERY); a symmetric model such as
    MiniLM implements both the same way. Every vector returned has unit L2 norm, so cosine
    similarity is a dot product and pgvector's `<=>` and `<#>` rank alike.
    """

    model_name: str
    """Stable identifier stored next to each vector; vectors of different models never mix."""
    dimension: int
    """Length of every vector returned."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in input order; an empty input gives an empty list."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The unit vector of a search query."""
        ...


# -- Gemini / Vertex AI ---------------------------------------------------------------------------

# batchEmbedContents takes at most 100 texts per request; the character cap keeps a request's
# tokens (about 4 characters each) well under the per-request limits of both services.
_GEMINI_BATCH_TEXTS = 100
_GEMINI_BATCH_CHARS = 60_000


class GeminiEmbedder:
    """gemini-embedding-001 (or another model) through google-genai's `embed_content`.

    Documents are embedded with task type RETRIEVAL_DOCUMENT, queries with RETRIEVAL_QUERY (the
    model places a question near the passages that answer it), at `dimension` dimensions
    (Matryoshka truncation: 768 by default). Below 3072 dimensions the service does not
    normalise, so vectors are L2-normalised here, as the `Embedder` protocol promises. The same
    model gives the same space on the Gemini API and on Vertex AI: `model_name` is the model's.
    """

    def __init__(
        self,
        config: ClientConfig,
        model: str = "gemini-embedding-001",
        dimension: int = 768,
        bounds: RetryBounds | None = None,
        *,
        credentials: Credentials | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        from librarian_dagster.core.models.calls import RetryBounds

        self.config = config
        self.model_name = model
        self.dimension = dimension
        self.bounds = bounds or RetryBounds()
        self._credentials = credentials
        self._sleep = sleep
        self._client: genai.Client | None = None
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a string")
        vectors: list[list[float]] = []
        for batch in _batches(list(texts), _GEMINI_BATCH_TEXTS, _GEMINI_BATCH_CHARS):
            vectors += self._embed(batch, "RETRIEVAL_DOCUMENT")
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], "RETRIEVAL_QUERY")[0]

    def _embed(self, texts: list[str], task_type: str) -> list[list[float]]:
        from google.genai import types

        from librarian_dagster.core.models.calls import ProviderRejected, call_with_backoff
        from librarian_dagster.core.models.gemini import genai_failure, make_client

        with self._lock:
            if self._client is None:
                self._client = make_client(self.config, self._credentials)
            client = self._client
        config = types.EmbedContentConfig(task_type=task_type, output_dimensionality=self.dimension)
        kwargs = {} if self._sleep is None else {"sleep": self._sleep}
        response = call_with_backoff(
            lambda: client.models.embed_content(
                model=self.model_name,
                contents=texts,  # pyright: ignore[reportArgumentType]
                config=config,
            ),
            self.bounds,
            f"{self.model_name} embedContent",
            genai_failure,
            **kwargs,
        )
        values = [e.values or [] for e in response.embeddings or []]
        if len(values) != len(texts):
            raise ProviderRejected(
                f"{self.model_name}: {len(values)} embeddings for {len(texts)} texts"
            )
        wrong = {len(v) for v in values} - {self.dimension}
        if wrong:
            raise ProviderRejected(
                f"{self.model_name}: vectors of {sorted(wrong)} dimensions, asked for "
                f"{self.dimension} (LIBRARIAN_EMBED_DIMENSION)"
            )
        array = np.asarray(values, dtype=np.float32)
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        return (array / np.maximum(norms, np.float32(1e-12))).tolist()


def _batches(texts: list[str], max_texts: int, max_chars: int) -> list[list[str]]:
    batches: list[list[str]] = []
    size = 0
    for text in texts:
        if not batches or len(batches[-1]) >= max_texts or size + len(text) > max_chars:
            if not batches or batches[-1]:
                batches.append([])
            size = 0
        batches[-1].append(text)
        size += len(text)
    return batches
