"""The op library completes Tensor at import (mxlite/ops/_methods.py) and fills the engine's registries.

The engine (mxlite/autograd/) imports no op: Tensor's operators and op methods are the ops themselves,
attached by the op library; row-sparse gradients, the differentiable backward rules, ``Block.export``'s
tracer and the GPU dropout generator's reseeding reach the module below through registries filled at import.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.autograd import higher_order
from mxlite.autograd import tensor as tensor_module
from mxlite.autograd.tensor import NDTensor, Tensor
from mxlite.gluon import block as block_module
from mxlite.ops import _methods, _philox, core, random


@pytest.mark.parametrize("method, op", [
    ("__add__", core.add), ("__mul__", core.multiply), ("sum", core.sum), ("reshape", core.reshape),
    ("astype", core.astype), ("__getitem__", core.getitem), ("logsumexp", core.logsumexp)])
def test_tensor_methods_are_the_ops_themselves(method, op):
    assert getattr(Tensor, method) is op
    assert getattr(mx.ops, op.__name__) is op  # and mx.ops still names them


def test_methods_give_the_ops_results():
    x = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal((x + 1).asnumpy(), np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal((2 - x).asnumpy(), 2 - np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.sum().item() == 15.0
    np.testing.assert_array_equal(x.take(np.array([4, 0])).asnumpy(), [4.0, 0.0])
    assert x.to(mx.cpu(1)).device == mx.cpu(1)
    assert x.tostype("row_sparse").indices.asnumpy().tolist() == [0, 1]


def test_nd_face_methods_keep_mxnet_1x_behaviour():
    x = mx.nd.array(np.arange(6, dtype=np.float32))
    assert type(x) is NDTensor and NDTensor.reshape is _methods.nd_reshape
    assert x.reshape((-4, 2, -1)).shape == (2, 3)  # MXNet's codes: split the axis into 2 x 3
    assert (x == 2).dtype == np.float32  # 1/0 in the operands' dtype
    assert x[0].shape == (1,)  # never 0-d
    with pytest.raises(TypeError, match="unknown keyword arguments \\['order'\\]"):
        x.reshape((2, 3), order="C")


def test_mx_ops_and_autograd_keep_their_public_names():
    for name in ("add", "concat", "stack", "reshape", "nd_shape", "as_tensor", "nd_reshape_shape"):
        assert callable(getattr(mx.ops, name)), name
    assert mx.concat is core.concat and mx.nn_ops.softmax is mx.ops.nn_ops.softmax
    assert mx.sparse.RowSparseTensor is mx.ops.sparse.RowSparseTensor and mx.random is random
    assert sorted(mx.autograd.__all__) == sorted([
        "Function", "NDArray", "Tensor", "backward", "get_symbol", "grad", "is_recording", "is_training",
        "mark_variables", "pause", "predict_mode", "record", "set_recording", "set_training", "train_mode"])


def test_row_sparse_gradients_come_from_the_registry(monkeypatch):
    w = mx.array(np.zeros((4, 2), np.float32))
    w.attach_grad(stype="row_sparse")
    with mx.autograd.record():
        loss = mx.nn_ops.embedding(np.array([1, 1, 3]), w, sparse_grad=True).sum()
    loss.backward()
    assert w.grad.indices.asnumpy().tolist() == [1, 3]
    np.testing.assert_array_equal(w.grad.data.asnumpy(), [[2.0, 2.0], [1.0, 1.0]])
    monkeypatch.setattr(tensor_module, "_row_sparse", [])
    with pytest.raises(RuntimeError, match="mxlite.ops.sparse"):
        mx.array(np.zeros((4, 2), np.float32)).attach_grad(stype="row_sparse")


def test_an_op_without_a_rule_names_where_the_rules_are():
    assert higher_order._RULES["matmul"].__module__ == "mxlite.ops.higher_order_rules"
    x = mx.array(np.ones((2, 2)))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.ops.prod(x)
    with pytest.raises(NotImplementedError, match="'prod'.*mxlite/ops/higher_order_rules.py"):
        mx.autograd.grad(y, [x], create_graph=True)


def test_export_needs_its_registered_tracer(monkeypatch, tmp_path):
    assert block_module._EXPORTERS[0].__module__ == "mxlite.gluon._export"
    net = mx.nn.Dense(2, in_units=3)
    net.initialize()
    monkeypatch.setattr(block_module, "_EXPORTERS", [])
    with pytest.raises(RuntimeError, match="mxlite.gluon._export"):
        net.export(str(tmp_path / "net"), inputs=mx.array(np.ones((1, 3), np.float32)))


def test_seeding_tells_the_gpu_streams(monkeypatch):
    assert _philox.reseed in random._gpu_reseeds  # the GPU dropout generator listens from its import
    told = []
    monkeypatch.setattr(random, "_gpu_reseeds", [lambda device, seed: told.append((device, seed))])
    random.seed(7)
    random.seed(8, device=mx.cpu(0))  # CPU streams only: the GPU streams are not told
    random.set_state(random.get_state())
    assert told == [(None, 7), (None, 7)]
