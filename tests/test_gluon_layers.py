"""Layers Gluon users reach for: activations, Identity, Lambda/HybridLambda, Dropout(1.0) — gradient-checked."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, nd
from mxlite.gluon import nn
from mxlite.gluon.nn import activations as A
from tests.gradcheck import check_grad

RNG = np.random.default_rng(3)
X = RNG.uniform(-2, 2, size=(3, 4))
X[np.abs(X) < 0.05] = 0.3  # keep the kinks at 0 out of finite differences' reach


def _erf(v):
    return np.vectorize(math.erf)(v)


REFS = {
    "leaky": (lambda t: A.leaky_relu(t, 0.1), lambda v: np.where(v > 0, v, 0.1 * v)),
    "elu": (lambda t: A.elu(t, 1.0), lambda v: np.where(v > 0, v, np.expm1(v))),
    "selu": (A.selu, lambda v: 1.0507009873554805 * np.where(v > 0, v, 1.6732632423543772 * np.expm1(v))),
    "gelu": (A.gelu, lambda v: 0.5 * v * (1 + _erf(v / np.sqrt(2)))),
    "gelu_tanh": (lambda t: A.gelu(t, "tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))),
    "swish": (lambda t: A.swish(t, 2.0), lambda v: v / (1 + np.exp(-2 * v))),
}


@pytest.mark.parametrize("name", list(REFS))
def test_activation_values_and_grads(name):
    fn, ref = REFS[name]
    np.testing.assert_allclose(fn(mx.array(X, dtype=np.float64)).asnumpy(), ref(X), rtol=1e-10, atol=1e-12)
    check_grad(fn, [X])


def test_prelu_grad_per_channel():
    check_grad(lambda x, a: A.prelu(x, a), [RNG.uniform(-1, 1, (2, 3, 4)) + 0.05, np.array([0.1, 0.2, 0.3])])


def test_activation_layers():
    x = nd.array([[-1.0, 0.5, 2.0]])
    np.testing.assert_allclose(nn.LeakyReLU(0.1)(x).asnumpy(), [[-0.1, 0.5, 2.0]], rtol=1e-6)
    np.testing.assert_allclose(nn.ELU()(x).asnumpy(), [[np.expm1(-1), 0.5, 2.0]], rtol=1e-6)
    np.testing.assert_allclose(nn.SiLU()(x).asnumpy(), (x.asnumpy() / (1 + np.exp(-x.asnumpy()))), rtol=1e-6)
    assert nn.SELU()(x).shape == (1, 3) and nn.GELU()(x).shape == (1, 3) and nn.Swish()(x).shape == (1, 3)
    prelu = nn.PReLU()
    prelu.initialize()
    np.testing.assert_allclose(prelu(x).asnumpy(), [[-0.25, 0.5, 2.0]], rtol=1e-6)
    with autograd.record():
        y = prelu(x).sum()
    y.backward()
    np.testing.assert_allclose(prelu.alpha.grad().asnumpy(), [-1.0])


def test_identity_lambda_dropout():
    x = nd.array([[1.0, -2.0]])
    assert nn.Identity()(x) is x
    np.testing.assert_allclose(nn.Lambda("tanh")(x).asnumpy(), np.tanh(x.asnumpy()), rtol=1e-6)
    np.testing.assert_allclose(nn.HybridLambda(lambda F, t: F.relu(t))(x).asnumpy(), [[1.0, 0.0]])
    drop = nn.Dropout(1.0)
    with autograd.record():
        assert drop(x).asnumpy().tolist() == [[0.0, 0.0]]
    assert drop(x).asnumpy().tolist() == [[1.0, -2.0]]
    dense = nn.Dense(2, flatten=False)
    dense.initialize()
    assert dense(nd.ones((4, 5, 3))).shape == (4, 5, 2)


@pytest.mark.gpu
def test_activations_on_emulated_gpu():
    if mx.num_gpus() < 1:
        pytest.skip("no GPU")
    check_grad(A.gelu, [X], device=mx.gpu(0))
    check_grad(lambda t: A.elu(t, 0.5), [X], device=mx.gpu(0))


def test_hybrid_lambda_2x_and_1x_and_concatenate():
    x = nd.array([[1.0, -2.0]])
    assert nn.HybridLambda(lambda t: t * 2)(x).asnumpy().tolist() == [[2.0, -4.0]]  # MXNet 2.x: fn(x)
    assert nn.HybridLambda(lambda F, t: F.relu(t))(x).asnumpy().tolist() == [[1.0, 0.0]]  # 1.x: fn(F, x)
    assert nn.HybridLambda(abs)(x).asnumpy().tolist() == [[1.0, 2.0]]  # a builtin without a signature
    net = nn.HybridConcatenate(axis=1)
    net.add(nn.Dense(3, in_units=2), nn.Identity())
    net.initialize()
    with autograd.record():
        out = net(x)
        out.sum().backward()
    assert out.shape == (1, 5) and out.asnumpy()[0, 3:].tolist() == [1.0, -2.0]
    assert net[0].weight.grad().asnumpy().tolist() == [[1.0, -2.0]] * 3
    tail = nn.Concatenate(axis=0)
    tail.add(nn.Identity(), nn.Identity())
    assert tail(x).shape == (2, 2) and tail[1:].axis == 0
    assert nn.Concatenate().axis == -1  # MXNet's default: the last axis
