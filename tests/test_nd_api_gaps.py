"""Small MXNet 1.x API pieces that Gluon 1.x programs use: ``nd.concatenate``, ``name=`` on every ``F.*``/``nd``
operator, attributes set before ``super().__init__()`` in a Block, and the ``gluon.loss`` helpers MXNet's
examples import (``_apply_weighting``, ``_reshape_like``). Expected values are MXNet 1.9.1's (its tests and
examples, named at each test).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, gluon
from mxlite.gluon import nn


# -- nd.concatenate (MXNet 1.9.1 test_ndarray.py::test_ndarray_concatenate) ---------------------
def test_ndarray_concatenate():
    axis = 1
    shapes = [(2, 3, 4, 2), (2, 2, 4, 2), (2, 1, 4, 2)]
    rng = np.random.default_rng(0)
    arrays_np = [rng.uniform(-10, 10, s).astype(np.float32) for s in shapes]
    arrays_nd = [mx.nd.array(x) for x in arrays_np]
    array_nd = mx.nd.concatenate(arrays_nd, axis=axis)
    np.testing.assert_array_equal(array_nd.asnumpy(), np.concatenate(arrays_np, axis=axis))
    assert isinstance(array_nd, mx.nd.NDArray)


def test_concatenate_defaults_checks_and_gradient():
    a, b = mx.nd.ones((1, 2)), mx.nd.zeros((2, 2))
    assert mx.nd.concatenate([a, b]).shape == (3, 2)  # axis 0 by default, where concat's dim is 1
    assert mx.nd.concatenate([a], always_copy=False) is a
    with pytest.raises(ValueError, match="one dtype, got array 0: float32, array 1: float64"):
        mx.nd.concatenate([a, mx.nd.zeros((1, 2), dtype="float64")])
    with pytest.raises(TypeError, match="arrays must be a list of arrays, got NDTensor"):
        mx.nd.concatenate(a)
    a.attach_grad()
    with autograd.record():
        out = mx.nd.concatenate([a, b]) * mx.nd.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), [[1.0, 2.0]])


# -- name= on every operator --------------------------------------------------------------------
def test_name_is_accepted_and_ignored_by_nd_operators():
    x = mx.nd.array([[1.0, -2.0], [3.0, 4.0]])
    w = mx.nd.array([[0.5, 0.5]])
    checks = [
        (mx.nd.add(x, 1, name="plus"), x.asnumpy() + 1),
        (mx.nd.relu(x, name="r"), np.maximum(x.asnumpy(), 0)),
        (mx.nd.FullyConnected(x, w, num_hidden=1, no_bias=True, name="fc1"), x.asnumpy() @ w.asnumpy().T),
        (mx.nd.Activation(x, act_type="relu", name="act"), np.maximum(x.asnumpy(), 0)),
        (mx.nd.concat(x, x, dim=0, name="cat"), np.concatenate([x.asnumpy()] * 2)),
        (mx.nd.broadcast_greater(x, 0, name="gt"), (x.asnumpy() > 0).astype(np.float32)),
        (mx.nd.linalg.gemm2(x, x, name="g"), x.asnumpy() @ x.asnumpy()),
        (mx.nd.sum(x, axis=1, name="s", attr={"k": "v"}), x.asnumpy().sum(axis=1)),
    ]
    for got, want in checks:
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6)
    assert mx.nd.random.uniform(shape=(2,), name="u").shape == (2,)


def test_name_in_hybrid_forward():
    class Net(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.weight = self.params.get("weight", shape=(2, 2), init=mx.init.One())

        def hybrid_forward(self, F, x, weight):
            y = F.FullyConnected(x, weight, num_hidden=2, no_bias=True, name="fc")
            return F.Activation(F.elemwise_add(y, y, name="double"), act_type="relu", name="relu")

    net = Net()
    net.initialize()
    out = net(mx.nd.array([[1.0, -3.0]]))
    np.testing.assert_array_equal(out.asnumpy(), [[0.0, 0.0]])
    np.testing.assert_array_equal(net(mx.nd.array([[2.0, 1.0]])).asnumpy(), [[6.0, 6.0]])


def test_an_unknown_keyword_still_raises():
    with pytest.raises(TypeError):
        mx.nd.add(mx.nd.ones(2), 1, axis=0)


# -- attributes before super().__init__() ---------------------------------------------------------
def test_plain_attributes_before_init_as_mxnet_allows():
    class Net(nn.Block):
        def __init__(self, units, **kwargs):
            self._units = units  # MXNet 1.x's Block.__setattr__ keeps a plain attribute before __init__
            self.activation = "relu"
            super().__init__(**kwargs)
            self.dense = nn.Dense(self._units, in_units=2, activation=self.activation)

        def forward(self, x):
            return self.dense(x)

    net = Net(3)
    net.initialize()
    assert net._units == 3 and list(net.collect_params()) == ["dense.weight", "dense.bias"]
    assert net(mx.nd.ones((1, 2))).shape == (1, 3)


def test_a_block_before_init_is_refused_naming_it():
    class Net(nn.Block):
        def __init__(self):
            self.dense = nn.Dense(2)
            super().__init__()

    with pytest.raises(RuntimeError, match=re.escape("Net.__init__ must call super().__init__() before assigning "
                                                     "the Dense attribute 'dense'")):
        Net()


# -- gluon.loss helpers (MXNet 1.9.1 example/gluon/embedding_learning/model.py::MarginLoss) -------
class MarginLoss(gluon.loss.Loss):
    """MXNet's example, as written for MXNet 1.x (constant beta)."""

    def __init__(self, margin=0.2, nu=0.0, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin
        self._nu = nu

    def hybrid_forward(self, F, anchors, positives, negatives, beta_in, a_indices=None):
        beta = beta_in
        beta_reg_loss = 0.0
        d_ap = F.sqrt(F.sum(F.square(positives - anchors), axis=1) + 1e-8)
        d_an = F.sqrt(F.sum(F.square(negatives - anchors), axis=1) + 1e-8)
        pos_loss = F.maximum(d_ap - beta + self._margin, 0.0)
        neg_loss = F.maximum(beta - d_an + self._margin, 0.0)
        pair_cnt = F.sum((pos_loss > 0.0) + (neg_loss > 0.0))
        if pair_cnt == 0.0:
            loss = F.sum(pos_loss + neg_loss)
        else:
            loss = (F.sum(pos_loss + neg_loss) + beta_reg_loss) / pair_cnt
        return gluon.loss._apply_weighting(F, loss, self._weight, None)


def test_margin_loss_example_counts_pairs_and_applies_the_weight():
    anchors = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    positives = np.array([[0.9, 0.0], [1.0, 1.5], [0.0, 1.0]], dtype=np.float32)
    negatives = np.array([[1.0, 0.0], [1.1, 0.0], [0.0, 3.0]], dtype=np.float32)
    beta = 1.0
    d_ap = np.sqrt(((positives - anchors) ** 2).sum(axis=1) + 1e-8)
    d_an = np.sqrt(((negatives - anchors) ** 2).sum(axis=1) + 1e-8)
    pos, neg = np.maximum(d_ap - beta + 0.2, 0), np.maximum(beta - d_an + 0.2, 0)
    count = (pos > 0).sum() + (neg > 0).sum()  # MXNet 1.x adds the 1/0 masks: 1 + 1 = 2 where both are positive
    assert count == 4  # bool masks would count 2: True + True is True
    want = 0.5 * (pos + neg).sum() / count
    got = MarginLoss(weight=0.5)(mx.nd.array(anchors), mx.nd.array(positives), mx.nd.array(negatives), beta)
    assert got.shape == (1,)
    np.testing.assert_allclose(got.asnumpy(), [want], rtol=1e-6)


def test_apply_weighting_and_reshape_like_as_mxnet_examples_call_them():
    from mxlite.gluon.loss import _apply_weighting, _reshape_like

    F = mx.nd
    loss = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
    weighted = _apply_weighting(F, loss, 0.5, mx.nd.array([[1.0], [2.0]]))
    np.testing.assert_array_equal(weighted.asnumpy(), [[0.5, 1.0], [3.0, 4.0]])
    np.testing.assert_array_equal(_apply_weighting(F, loss).asnumpy(), loss.asnumpy())
    with pytest.raises(TypeError, match="weight must be a number, got str"):
        _apply_weighting(F, loss, "0.5")
    label = mx.nd.array([1.0, 2.0, 3.0, 4.0])
    assert _reshape_like(F, label, loss).shape == (2, 2) and _reshape_like(label, loss).shape == (2, 2)
    with pytest.raises(ValueError, match=r"cannot be reshaped to the prediction's shape \(2, 2\)"):
        _reshape_like(F, mx.nd.ones(3), loss)


def test_lesser_names_exist():
    x = mx.nd.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(mx.nd.lesser(x, 2).asnumpy(), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(mx.nd.lesser_equal(x, 2).asnumpy(), [1.0, 1.0, 0.0])
