"""SymbolBlock.imports on files Apache MXNet 1.9.1 wrote (tests/data/mxnet_export/, made by its make_files.py):
the outputs MXNet computed on the saved inputs come back, for custom graphs and model-zoo networks; mxlite's
export of the imported block writes MXNet's graph again.

The optional last test sends mxlite's exports the other way: with ``MXLITE_MXNET_PYTHON`` naming a Python that
has MXNet 1.x, MXNet imports them and must compute mxlite's outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mxlite as mx
from mxlite.formats.archive import load_arrays, save_mxnet_arrays
from mxlite.gluon import SymbolBlock
from mxlite.gluon.model_zoo import vision

DATA = Path(__file__).resolve().parent / "data" / "mxnet_export"
MODELS = ["mixed", "small_cnn", "resnet_thumb", "densenet_tiny", "mobilenet0.25", "mobilenetv2_0.25"]


def _load(name):
    io = load_arrays(DATA / f"{name}-io.params")
    names = sorted(k for k in io if k != "output")
    block = SymbolBlock.imports(str(DATA / f"{name}-symbol.json"), names, str(DATA / f"{name}-0000.params"))
    return block, [mx.np.array(io[k]) for k in names], io["output"]


@pytest.mark.parametrize("name", MODELS)
def test_imports_gives_mxnets_outputs(name):
    block, inputs, want = _load(name)
    got = block(*inputs).asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_mxnet_names_and_aux_states_are_kept():
    block, _, _ = _load("resnet_thumb")
    params = block.collect_params()
    assert "resnetv10_conv0_weight" in params
    assert params["resnetv10_stage1_batchnorm0_running_mean"].grad_req == "null"
    assert params["resnetv10_stage1_batchnorm0_gamma"].grad_req == "write"
    sym = mx.sym.load(str(DATA / "resnet_thumb-symbol.json"))
    assert all(name.endswith(("running_mean", "running_var")) for name in sym.list_auxiliary_states())
    assert len(sym.list_auxiliary_states()) == 2 * sum(n.endswith("gamma") for n in sym.list_arguments())


@pytest.mark.parametrize("name", ["mixed", "mobilenetv2_0.25"])
def test_reexporting_an_imported_graph_writes_mxnets_graph(tmp_path, name):
    block, inputs, want = _load(name)
    sym_file, param_file = block.export(str(tmp_path / name), inputs=inputs)
    ours, theirs = (json.loads(Path(f).read_text()) for f in (sym_file, DATA / f"{name}-symbol.json"))
    for graph in (ours, theirs):  # a variable's attributes describe the Parameter (MXNet's holds __init__)
        for node in graph["nodes"]:
            if node["op"] == "null":
                node.pop("attrs", None)
    assert ours == theirs  # node for node: operators, names, attributes, inputs and their versions, heads
    again = SymbolBlock.imports(sym_file, [f"data{i}" for i in range(len(inputs))] if len(inputs) > 1 else "data",
                                param_file)
    np.testing.assert_allclose(again(*inputs).asnumpy(), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


_MXNET_CHECK = """
import sys, numpy as np, mxnet as mx
prefix = sys.argv[1]
io = mx.nd.load(prefix + '-io.params')
net = mx.gluon.SymbolBlock.imports(prefix + '-symbol.json', ['data'], prefix + '-0000.params')
got = net(io['data']).asnumpy()
want = io['output'].asnumpy()
assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max()), np.abs(got - want).max()
print('ok')
"""


@pytest.mark.skipif(not os.environ.get("MXLITE_MXNET_PYTHON"),
                    reason="set MXLITE_MXNET_PYTHON to a Python with MXNet 1.x to check mxlite's exports in MXNet")
@pytest.mark.parametrize("model", ["resnet18_v1", "mobilenetv2_0.25", "squeezenet1.1"])
def test_mxnet_runs_mxlites_exports(tmp_path, model):
    net = vision.get_model(model, classes=10)
    net.initialize(mx.init.Xavier())
    x = mx.np.array(np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))
    prefix = str(tmp_path / model)
    net.export(prefix, inputs=x)
    save_mxnet_arrays(prefix + "-io.params", [x.asnumpy(), net(x).asnumpy()], ["data", "output"])
    run = subprocess.run([os.environ["MXLITE_MXNET_PYTHON"], "-c", _MXNET_CHECK, prefix], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
