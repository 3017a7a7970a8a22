"""HybridBlock.export and SymbolBlock.imports: MXNet's symbol JSON and parameter files, written and read back.

The JSON is checked field by field against MXNet 1.x's layout (node order, operator names, attributes as
strings, arg/aux naming, versions of auxiliary inputs); export -> imports must give the block's own outputs,
for layers, operations between layers and model-zoo networks. tests/test_export_imports_mxnet.py reads files
MXNet itself wrote.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, ops
from mxlite.formats.archive import load_arrays
from mxlite.formats.mxnet_symbol import MXNetSymbolError
from mxlite.gluon import SymbolBlock, nn
from mxlite.gluon.model_zoo import vision


def _rng(seed=0):
    return np.random.default_rng(seed)


def _x(*shape, seed=0):
    return mx.np.array(_rng(seed).standard_normal(shape).astype(np.float32))


def _export(net, tmp_path, inputs, name="model"):
    sym_file, param_file = net.export(str(tmp_path / name), inputs=inputs)
    return sym_file, param_file, json.loads(open(sym_file).read())


def _ops(graph):
    return [n["op"] for n in graph["nodes"] if n["op"] != "null"]


def _mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(16, activation="relu", in_units=10), nn.Dropout(0.5), nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier())
    return net


def _cnn_bn():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(6, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.MaxPool2D(2, ceil_mode=True), nn.Flatten(), nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net(_x(2, 3, 7, 7))
    bn = net[1]
    bn.running_mean.set_data(mx.np.array(_rng(1).standard_normal(6).astype(np.float32)))
    bn.running_var.set_data(mx.np.array(_rng(2).uniform(0.5, 2.0, 6).astype(np.float32)))
    bn.gamma.set_data(mx.np.array(_rng(3).uniform(0.5, 1.5, 6).astype(np.float32)))
    return net


def test_mlp_round_trip_and_mxnet_json_layout(tmp_path):
    net, x = _mlp(), _x(3, 10)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    assert sym_file == str(tmp_path / "model-symbol.json") and param_file == str(tmp_path / "model-0000.params")
    nodes = graph["nodes"]
    assert [(n["op"], n["name"]) for n in nodes] == [
        ("null", "data"), ("null", "0.weight"), ("null", "0.bias"), ("FullyConnected", "0_fwd"),
        ("Activation", "0_relu_fwd"), ("Dropout", "1_fwd"), ("null", "2.weight"), ("null", "2.bias"),
        ("FullyConnected", "2_fwd")]
    assert nodes[3]["attrs"] == {"flatten": "True", "no_bias": "False", "num_hidden": "16"}
    assert nodes[3]["inputs"] == [[0, 0, 0], [1, 0, 0], [2, 0, 0]]
    assert nodes[4]["attrs"] == {"act_type": "relu"}
    assert nodes[5]["attrs"] == {"axes": "()", "cudnn_off": "False", "p": "0.5"}
    assert nodes[1]["attrs"] == {"__dtype__": "0", "__lr_mult__": "1.0", "__shape__": "(16, 10)",
                                 "__storage_type__": "0", "__wd_mult__": "1.0"}
    assert "attrs" not in nodes[0] and nodes[0]["inputs"] == []
    assert graph["arg_nodes"] == [0, 1, 2, 6, 7]
    assert graph["node_row_ptr"] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10]  # Dropout has two outputs (its mask)
    assert graph["heads"] == [[8, 0, 0]]
    assert graph["attrs"] == {"mxnet_version": ["int", 10901]}
    saved = load_arrays(param_file)
    assert sorted(saved) == ["arg:0.bias", "arg:0.weight", "arg:2.bias", "arg:2.weight"]
    np.testing.assert_array_equal(saved["arg:0.weight"], net[0].weight.data().asnumpy())

    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-6, atol=1e-7)
    assert sorted(back.collect_params()) == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_cnn_with_batchnorm_round_trip_aux_states_and_training(tmp_path):
    net, x = _cnn_bn(), _x(2, 3, 7, 7)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    assert _ops(graph) == ["Convolution", "BatchNorm", "Activation", "Pooling", "Flatten", "FullyConnected"]
    conv, bn, _, pool = [n for n in graph["nodes"] if n["op"] != "null"][:4]
    assert conv["attrs"] == {"dilate": "(1, 1)", "kernel": "(3, 3)", "layout": "NCHW", "no_bias": "True",
                             "num_filter": "6", "num_group": "1", "pad": "(1, 1)", "stride": "(1, 1)"}
    assert bn["attrs"] == {"axis": "1", "eps": "1e-05", "fix_gamma": "False", "momentum": "0.9",
                           "use_global_stats": "False"}
    assert [version for _, _, version in bn["inputs"]] == [0, 0, 0, 1, 1]  # moving statistics: aux states
    assert pool["attrs"] == {"global_pool": "False", "kernel": "(2, 2)", "layout": "NCHW", "pad": "(0, 0)",
                             "pool_type": "max", "pooling_convention": "full", "stride": "(2, 2)"}
    assert sorted(load_arrays(param_file)) == ["arg:0.weight", "arg:1.beta", "arg:1.gamma", "arg:5.bias",
                                               "arg:5.weight", "aux:1.running_mean", "aux:1.running_var"]
    sym = mx.sym.load(sym_file)
    assert sym.list_auxiliary_states() == ["1.running_mean", "1.running_var"]
    assert sym.list_arguments() == ["data", "0.weight", "1.gamma", "1.beta", "5.weight", "5.bias"]
    assert sym.list_outputs() == ["5_fwd_output"]

    back = SymbolBlock.imports(sym_file, "data", param_file)
    assert back.collect_params()["1.running_mean"].grad_req == "null"
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)
    # it trains as the original does: batch statistics, the same gradients under the same names
    for block in (net, back):
        with autograd.record():
            loss = (block(x) ** 2).sum()
        loss.backward()
    for name, param in net.collect_params().items():
        if param.grad_req != "null":
            np.testing.assert_allclose(back.collect_params()[name].grad().asnumpy(), param.grad().asnumpy(),
                                       rtol=1e-4, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(back.collect_params()["1.running_mean"].data().asnumpy(),
                               net[1].running_mean.data().asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", ["resnet18_v1", "mobilenet0.25", "mobilenetv2_0.25"])
def test_model_zoo_round_trip(tmp_path, model):
    net = vision.get_model(model, classes=10)
    net.initialize(mx.init.Xavier())
    x = _x(1, 3, 32, 32)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    ops_used = set(_ops(graph))
    assert {"Convolution", "BatchNorm", "Pooling"} <= ops_used
    if model == "resnet18_v1":
        assert {"elemwise_add", "relu", "FullyConnected"} <= ops_used  # the residual sums between layers
    if model == "mobilenetv2_0.25":
        clip = next(n for n in graph["nodes"] if n["op"] == "clip")
        assert clip["attrs"] == {"a_max": "6.0", "a_min": "0.0"}  # RELU6
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)


def _seq(*layers):
    net = nn.HybridSequential()
    net.add(*layers)
    return net


_VARIANTS = {  # layers in other dimensions and layouts, and the ones traced op by op (GELU tanh, GroupNorm, ...)
    "conv1d_pools": (lambda: _seq(nn.Conv1D(4, 3, strides=2, padding=1, activation="tanh"), nn.MaxPool1D(2),
                                  nn.AvgPool1D(2, padding=1, count_include_pad=False), nn.GlobalAvgPool1D()),
                     (2, 3, 11), ["Convolution", "Activation", "Pooling", "Pooling", "Pooling"]),
    "channels_last": (lambda: _seq(nn.Conv2D(4, 3, layout="NHWC"), nn.BatchNorm(axis=3),
                                   nn.MaxPool2D(2, layout="NHWC"), nn.GlobalMaxPool2D(layout="NHWC")),
                      (2, 9, 9, 3), ["Convolution", "BatchNorm", "Pooling", "Pooling"]),
    "conv3d_transpose": (lambda: _seq(nn.Conv3DTranspose(2, 2, strides=2, output_padding=1), nn.Conv3D(2, 1, groups=2)),
                         (1, 3, 3, 3, 3), ["Deconvolution", "Convolution"]),
    "activations": (lambda: _seq(nn.Dense(6), nn.ELU(0.7), nn.SELU(), nn.PReLU(), nn.GELU(), nn.LeakyReLU(0.2),
                                 nn.Activation("softsign"), nn.GELU(approximation="tanh"), nn.Swish(0.5)),
                    (3, 5), None),
    "norms": (lambda: _seq(nn.Conv2D(4, 1), nn.InstanceNorm(), nn.GroupNorm(2), nn.LayerNorm(axis=1),
                           nn.InstanceNorm(axis=2), nn.Flatten()), (2, 3, 4, 5), None),
    "shuffle_and_slices": (lambda: _seq(nn.ReflectionPad2D(1), nn.Conv2D(8, 3), nn.PixelShuffle2D(2)),
                           (1, 2, 5, 5), None),
    "dense_not_flat": (lambda: _seq(nn.Dense(4, flatten=False, use_bias=False), nn.Dropout(0.3, axes=(1,)),
                                    nn.Dense(3, flatten=False, activation="softrelu")),
                       (2, 3, 5), ["FullyConnected", "Dropout", "FullyConnected", "Activation"]),
}


@pytest.mark.parametrize("case", sorted(_VARIANTS))
def test_layer_variants_round_trip(tmp_path, case):
    build, shape, expected_ops = _VARIANTS[case]
    net = build()
    net.initialize(mx.init.Xavier())
    x = _x(*shape)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    if expected_ops is not None:
        assert _ops(graph) == expected_ops
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)


def test_embedding_with_integer_ids(tmp_path):
    net = _seq(nn.Embedding(10, 4), nn.Flatten(), nn.Dense(2))
    net.initialize()
    ids = mx.np.array(np.array([[1, 2, 9], [0, 0, 3]], dtype=np.int64))
    sym_file, param_file, graph = _export(net, tmp_path, ids)
    embedding = next(n for n in graph["nodes"] if n["op"] == "Embedding")
    assert embedding["attrs"] == {"dtype": "float32", "input_dim": "10", "output_dim": "4", "sparse_grad": "False"}
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    want = net(ids).asnumpy()
    np.testing.assert_array_equal(back(ids).asnumpy(), want)
    np.testing.assert_array_equal(back(ids.astype("float32")).asnumpy(), want)  # MXNet feeds float ids


def test_exported_parameters_load_into_the_model_itself(tmp_path):
    net, x = _cnn_bn(), _x(2, 3, 7, 7)
    _, param_file, _ = _export(net, tmp_path, x)
    twin = nn.HybridSequential()
    twin.add(nn.Conv2D(6, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
             nn.MaxPool2D(2, ceil_mode=True), nn.Flatten(), nn.Dense(3))
    twin.load_parameters(param_file)  # structural names, arg:/aux: removed
    np.testing.assert_array_equal(twin(x).asnumpy(), net(x).asnumpy())


class _Between(nn.HybridBlock):
    """Operations between layers: scalars, elementwise and broadcast sums, reshape, transpose, concat."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(8, in_units=6)
        self.scale = mx.gluon.Parameter("scale", shape=(1, 8), init=mx.init.Constant(0.5))

    def forward(self, x):
        y = self.dense(x)
        z = ops.concat([y * 2 + 1, ops.relu(y), ops.sigmoid(-y)], axis=1)            # (N, 24)
        z = ops.transpose(z.reshape((z.shape[0], 4, 6)), (0, 2, 1))                  # (N, 6, 4)
        z = ops.sum(mx.nn_ops.softmax(z, axis=-1), axis=1)                           # (N, 4)
        w = self.scale.data(x.device) * ops.clip(y, -1.0, 1.0)                       # broadcast_mul
        return ops.concat([z / 3.0, 1.0 - w, ops.mean(ops.exp(w), axis=1, keepdims=True)], axis=1)


def test_operations_between_layers_round_trip(tmp_path):
    net = _Between()
    net.initialize(mx.init.Xavier())
    x = _x(3, 6)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    by_op = {}
    for n in graph["nodes"]:
        by_op.setdefault(n["op"], n)
    assert by_op["_mul_scalar"]["attrs"] == {"scalar": "2.0"}
    assert by_op["_plus_scalar"]["attrs"] == {"scalar": "1.0"}
    assert by_op["_rminus_scalar"]["attrs"] == {"scalar": "1.0"}
    assert by_op["Reshape"]["attrs"] == {"shape": "(0, 4, 6)"}  # the batch size stays free
    assert by_op["transpose"]["attrs"] == {"axes": "(0, 2, 1)"}
    assert by_op["Concat"]["attrs"] == {"dim": "1", "num_args": "3"}
    assert by_op["mean"]["attrs"] == {"axis": "(1,)", "keepdims": "True"}
    assert {"broadcast_mul", "negative", "sigmoid", "relu", "exp", "softmax", "sum", "_div_scalar"} <= set(by_op)
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)
    x5 = _x(5, 6, seed=4)  # another batch size: the Reshape kept it free
    np.testing.assert_allclose(back(x5).asnumpy(), net(x5).asnumpy(), rtol=1e-5, atol=1e-6)


class _TwoInTwoOut(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Dense(3, in_units=4), nn.Dense(3, in_units=2)

    def forward(self, x, y):
        s = self.a(x) + self.b(y)
        return s, ops.tanh(s)


def test_several_inputs_and_outputs(tmp_path):
    net = _TwoInTwoOut()
    net.initialize()
    x, y = _x(2, 4), _x(2, 2, seed=1)
    sym_file, param_file, graph = _export(net, tmp_path, [x, y])
    assert [n["name"] for n in graph["nodes"] if n["op"] == "null"][:1] == ["data0"]
    assert "data1" in [n["name"] for n in graph["nodes"]]
    assert len(graph["heads"]) == 2
    back = SymbolBlock.imports(sym_file, ["data0", "data1"], param_file)
    outs = back(x, y)
    assert isinstance(outs, list) and len(outs) == 2
    for got, want in zip(outs, net(x, y)):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(TypeError, match=r"takes 2 inputs \['data0', 'data1'\], got 1"):
        back(x)


def test_an_imported_block_exports_its_own_graph(tmp_path):
    net, x = _cnn_bn(), _x(2, 3, 7, 7)
    sym_file, param_file, graph = _export(net, tmp_path, x)
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    _, param_again, graph_again = _export(back, tmp_path, x, name="again")
    assert [(n["op"], n["name"], n.get("attrs")) for n in graph_again["nodes"]] == \
        [(n["op"], n["name"], n.get("attrs")) for n in graph["nodes"]]
    assert sorted(load_arrays(param_again)) == sorted(load_arrays(param_file))


def test_internals_cut_a_network_at_a_layer(tmp_path):
    net, x = _cnn_bn(), _x(2, 3, 7, 7)
    sym_file, param_file, _ = _export(net, tmp_path, x)
    internals = mx.sym.load(sym_file).get_internals()
    assert "2_fwd_output" in internals.list_outputs()
    features = SymbolBlock(internals["2_fwd_output"], mx.sym.var("data"))
    features.load_parameters(param_file, ignore_extra=True)
    np.testing.assert_allclose(features(x).asnumpy(), net[2](net[1](net[0](x))).asnumpy(), rtol=1e-5, atol=1e-6)
    assert sorted(features.collect_params()) == ["0.weight", "1.beta", "1.gamma", "1.running_mean",
                                                 "1.running_var"]


def test_symbol_save_and_load_json_round_trip(tmp_path):
    net = _mlp()
    sym_file, _, _ = _export(net, tmp_path, _x(1, 10))
    sym = mx.symbol.load(sym_file)
    again = mx.sym.load_json(sym.tojson())
    assert again.tojson() == sym.tojson() == open(sym_file).read()
    assert repr(sym) == "<Symbol 2_fwd>" and sym.name == "2_fwd"
    assert mx.sym.var("w", shape=(2, 3), dtype="float16").tojson().count('"__shape__": "(2, 3)"') == 1


# -- what export refuses -------------------------------------------------------------------------------------
def test_export_needs_example_inputs(tmp_path):
    with pytest.raises(ValueError, match=r"give example inputs \(net\.export\('model', inputs=x\)\), or call the "
                                         r"hybridized block first"):
        _mlp().export(str(tmp_path / "m"))
    with pytest.raises(TypeError, match="input 0 must be an mxlite or NumPy array, got list"):
        _mlp().export(str(tmp_path / "m"), inputs=[[1.0, 2.0]])
    with pytest.raises(ValueError, match="epoch must be an integer >= 0, got -1"):
        _mlp().export(str(tmp_path / "m"), epoch=-1, inputs=_x(1, 10))


class _Where(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, in_units=3)

    def forward(self, x):
        y = self.dense(x)
        return ops.where(y > 0, y, y * 0.5)


class _ConstantArray(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, in_units=3)

    def forward(self, x):
        return self.dense(x) + mx.np.array([1.0, 2.0, 3.0, 4.0])


def test_export_names_what_mxnet_cannot_hold(tmp_path):
    for block, message in [(_Where(), r"operation 'where' \(reached from the block's output\) has no MXNet "
                                      r"operator"),
                           (_ConstantArray(), r"add of an array with a constant array of shape \(4,\).*make it a "
                                              r"Parameter")]:
        block.initialize()
        with pytest.raises(NotImplementedError, match=message):
            block.export(str(tmp_path / "m"), inputs=_x(2, 3))
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_exported_epoch_names_the_parameter_file(tmp_path):
    _, param_file = _mlp().export(str(tmp_path / "m"), epoch=12, inputs=_x(1, 10))
    assert param_file.endswith("m-0012.params")


# -- what imports refuses ------------------------------------------------------------------------------------
def _graph_file(tmp_path, nodes, heads=None):
    path = tmp_path / "g-symbol.json"
    path.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": heads or [[len(nodes) - 1, 0, 0]],
                                "attrs": {"mxnet_version": ["int", 10901]}}))
    return str(path)


_DATA = {"op": "null", "name": "data", "inputs": []}


def test_an_unknown_operator_is_named_with_its_node(tmp_path):
    fancy = {"op": "FancyOp", "name": "fancy0", "attrs": {"k": "1"}, "inputs": [[0, 0, 0]]}
    act = {"op": "Activation", "name": "act0", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]}
    path = _graph_file(tmp_path, [_DATA, fancy, act])
    with pytest.raises(NotImplementedError, match=r"operators mxlite does not implement: 'FancyOp' \(node 'fancy0'\)"):
        SymbolBlock.imports(path, ["data"])


@pytest.mark.parametrize("attrs, error, message", [
    ({"kernel": "(2, 2)", "pool_type": "lp"}, NotImplementedError,
     r"node 'p0' \(Pooling\): pool_type='lp' is not supported by mxlite; supported: \['max', 'avg'\]"),
    ({"kernel": "(2, 2)", "stride": "(1, 1, 1)"}, ValueError,
     r"node 'p0' \(Pooling\): attribute 'stride' must hold 2 integers, got '\(1, 1, 1\)'"),
    ({"kernel": "(two, 2)"}, ValueError, r"node 'p0' \(Pooling\): attribute 'kernel': expected a tuple of integers"),
    ({"pool_type": "max"}, ValueError, r"node 'p0' \(Pooling\): attribute 'kernel' is required"),
    ({"kernel": "(2, 2)", "frobnicate": "1"}, NotImplementedError,
     r"node 'p0' \(Pooling\): mxlite does not implement its attributes \['frobnicate'\]"),
])
def test_operator_attributes_are_checked_when_the_block_is_made(tmp_path, attrs, error, message):
    path = _graph_file(tmp_path, [_DATA, {"op": "Pooling", "name": "p0", "attrs": attrs, "inputs": [[0, 0, 0]]}])
    with pytest.raises(error, match=message):
        SymbolBlock.imports(path, ["data"])


@pytest.mark.parametrize("text, message", [
    ("{not json", r"is not symbol JSON: Expecting property name"),
    (json.dumps({"nodes": [_DATA]}), r"no \"heads\" list"),
    (json.dumps({"nodes": [_DATA, {"op": "relu", "name": "r", "inputs": [[5, 0, 0]]}], "heads": [[1, 0, 0]]}),
     r"node 1 \('r'\) refers to node 5, which is not an earlier node \(0\.\.0\)"),
    (json.dumps({"nodes": [_DATA, {"op": "FullyConnected", "name": "fc", "inputs": [[0, 0, 0]]},
                           {"op": "relu", "name": "r", "inputs": [[1, 1, 0]]}], "heads": [[2, 0, 0]]}),
     r"node 2 \('r'\) refers to output 1 of node 1 \('fc', FullyConnected\), which has 1 output"),
    (json.dumps({"nodes": [_DATA, {"op": 3, "name": "x", "inputs": []}], "heads": [[1, 0, 0]]}),
     r"node 1 needs string \"op\" and \"name\" fields"),
])
def test_malformed_symbol_files_are_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad-symbol.json"
    path.write_text(text)
    with pytest.raises(MXNetSymbolError, match=str(path).replace(".", r"\.") + ".*" + message):
        mx.sym.load(str(path))


def test_inputs_must_be_variables_of_the_graph(tmp_path):
    path = _graph_file(tmp_path, [_DATA, {"op": "relu", "name": "r", "inputs": [[0, 0, 0]]}])
    with pytest.raises(ValueError, match=r"inputs \['image'\] are not variables of the graph; its variables are "
                                         r"\['data'\]"):
        SymbolBlock.imports(path, ["image"])


def test_a_parameter_without_value_is_named(tmp_path):
    w = {"op": "null", "name": "w", "attrs": {"__shape__": "(3, 0)"}, "inputs": []}
    fc = {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3", "no_bias": "True"},
          "inputs": [[0, 0, 0], [1, 0, 0]]}
    block = SymbolBlock.imports(_graph_file(tmp_path, [_DATA, w, fc]), ["data"])
    block.initialize()
    with pytest.raises(RuntimeError, match=r"parameter 'w' has no value and its shape \(3, -1\) is not known"):
        block(_x(2, 4))


@pytest.mark.gpu
def test_a_hybridized_block_on_a_gpu_exports_and_keeps_its_graphs(tmp_path):
    device = mx.gpu(0)
    net = _mlp()
    net.reset_device(device)
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.array(_rng().standard_normal((3, 10)).astype(np.float32), device=device)
    for _ in range(2):
        want = net(x).asnumpy()
    graphs = net.graph_info()
    assert graphs and graphs[0]["device"] == "gpu(0)"
    sym_file, param_file, _ = _export(net, tmp_path, x)
    assert net.graph_info() == graphs  # the trace ran the Python forward, the graphs stay
    back = SymbolBlock.imports(sym_file, ["data"], param_file, ctx=device)
    np.testing.assert_allclose(back(x).asnumpy(), want, rtol=1e-6, atol=1e-7)


def test_a_symbol_block_shares_given_parameters(tmp_path):
    net, x = _mlp(), _x(2, 10)
    sym_file, _, _ = _export(net, tmp_path, x)
    shared = SymbolBlock(mx.sym.load(sym_file), [mx.sym.var("data")], params=net.collect_params())
    assert shared.collect_params()["0.weight"] is net.collect_params()["0.weight"]
    np.testing.assert_array_equal(shared(x).asnumpy(), net(x).asnumpy())


def test_mxnets_order_hybridize_call_export_needs_no_inputs(tmp_path):
    net = _cnn_bn()
    net.hybridize()
    x = _x(4, 3, 7, 7, seed=5)
    net(_x(2, 3, 7, 7))
    net(x)  # the last call's shapes are traced
    sym_file, param_file = net.export(str(tmp_path / "m"), epoch=1)
    assert param_file.endswith("m-0001.params")
    back = SymbolBlock.imports(sym_file, ["data"], param_file)
    np.testing.assert_allclose(back(x).asnumpy(), net(x).asnumpy(), rtol=1e-5, atol=1e-6)
    assert repr(back) == "SymbolBlock(\n<Symbol 5_fwd> : 1 -> 1\n)"
    net[0].hybridize()
    net.hybridize()  # the parent's hybridize covers its children, as its CUDA graphs do: they keep no call
    net(x)
    with pytest.raises(ValueError, match="or call the hybridized block first"):
        net[0].export(str(tmp_path / "child"))
    net.hybridize(False)  # no longer hybridized: no call is kept
    with pytest.raises(ValueError, match="or call the hybridized block first"):
        net.export(str(tmp_path / "m"))
