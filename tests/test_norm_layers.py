"""GroupNorm and InstanceNorm (MXNet Gluon 2.x's arguments, defaults and values), and Dense(0) as MXNet treats it."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd
from mxlite.gluon import nn
from mxlite.gluon.nn.norm_layers import group_norm, instance_norm
from tests.gradcheck import check_grad

RNG = np.random.default_rng(11)


def _ref_group(x, gamma, beta, groups, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    out = ((g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + eps)).reshape(x.shape)
    b = (1, c) + (1,) * (x.ndim - 2)
    return out * gamma.reshape(b) + beta.reshape(b)


def test_group_norm_docstring_example():
    # MXNet's GroupNorm docstring: input (2, 3, 4), GroupNorm() -> these values.
    x = mx.nd.array(np.arange(24).reshape(2, 3, 4))
    layer = nn.GroupNorm()
    layer.initialize(ctx=mx.cpu(0))
    row = [[-1.5932543, -1.3035717, -1.0138891, -0.7242065], [-0.4345239, -0.1448413, 0.1448413, 0.4345239],
           [0.7242065, 1.0138891, 1.3035717, 1.5932543]]
    np.testing.assert_allclose(layer(x).asnumpy(), np.array([row, row]), rtol=1e-5, atol=1e-6)
    assert layer.gamma.shape == (3,) and layer.beta.shape == (3,)  # per channel (MXNet 2.x)


def test_instance_norm_docstring_example():
    # MXNet's InstanceNorm docstring: input (2, 1, 2) -> [[[-0.99998355, 0.99998331]], [[-0.99998319, 0.99998361]]].
    x = mx.nd.array([[[1.1, 2.2]], [[3.3, 4.4]]])
    layer = nn.InstanceNorm()
    layer.initialize(ctx=mx.cpu(0))
    np.testing.assert_allclose(layer(x).asnumpy(), [[[-0.99998355, 0.99998331]], [[-0.99998319, 0.99998361]]],
                               rtol=1e-5)


def test_defaults_and_grad_reqs():
    inorm = nn.InstanceNorm()
    assert inorm.gamma.grad_req == "null" and inorm.beta.grad_req == "write"  # MXNet: scale=False by default
    gnorm = nn.GroupNorm(num_groups=2, center=False)
    assert gnorm.gamma.grad_req == "write" and gnorm.beta.grad_req == "null"
    assert set(gnorm.collect_params()) == {"gamma", "beta"}
    with pytest.raises(ValueError, match="epsilon"):
        nn.GroupNorm(epsilon=0)
    with pytest.raises(ValueError, match="num_groups"):
        nn.GroupNorm(num_groups=0)
    with pytest.raises(ValueError, match="batch axis"):
        nn.InstanceNorm(axis=0)


@pytest.mark.parametrize("shape,groups", [((2, 4, 3), 2), ((2, 6, 2, 2), 3), ((3, 4), 1), ((2, 4, 3), 4)])
def test_group_norm_values_and_grads(shape, groups):
    x = RNG.standard_normal(shape)
    gamma, beta = RNG.standard_normal(shape[1]), RNG.standard_normal(shape[1])
    check_grad(lambda a, g, b: group_norm(a, g, b, groups), [x, gamma, beta],
               reference=lambda a, g, b: _ref_group(a, g, b, groups))


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 2, 3, 2)])
def test_instance_norm_values_and_grads(shape):
    x = RNG.standard_normal(shape)
    gamma, beta = RNG.standard_normal(shape[1]), RNG.standard_normal(shape[1])
    check_grad(lambda a, g, b: instance_norm(a, g, b), [x, gamma, beta],
               reference=lambda a, g, b: _ref_group(a, g, b, shape[1]))


def test_instance_norm_channel_axis_last():
    x = RNG.standard_normal((2, 3, 3, 4))  # NHWC, 4 channels
    layer = nn.InstanceNorm(axis=3, scale=True, in_channels=4)
    layer.initialize()
    layer.gamma.set_data(mx.nd.array(RNG.standard_normal(4)))
    gamma = layer.gamma.data().asnumpy().astype(np.float64)
    ref = _ref_group(x.transpose(0, 3, 1, 2), gamma, np.zeros(4), 4).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(layer(mx.nd.array(x)).asnumpy(), ref, rtol=1e-4, atol=1e-5)
    check_grad(lambda a: _nhwc_layer(a), [x])


def _nhwc_layer(a):
    layer = nn.InstanceNorm(axis=3, scale=True, center=True, in_channels=a.shape[-1])
    layer.initialize(mx.init.Constant(0.5))
    layer.cast(np.float64)
    return layer(a)


def test_layers_train_on_cpu_and_emulated_gpus():
    devices = [mx.cpu(0), mx.cpu(1)] + ([mx.gpu(0), mx.gpu(1)] if mx.num_gpus() >= 2 else [])
    net = nn.Sequential(nn.Conv2D(4, 3, padding=1), nn.GroupNorm(2), nn.InstanceNorm(scale=True), nn.Dense(3))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = RNG.standard_normal((2 * len(devices), 2, 5, 5)).astype(np.float32)
    parts = mx.gluon.utils.split_and_load(mx.nd.array(x), ctx_list=devices)
    with autograd.record():
        losses = [(net(p) ** 2).sum() for p in parts]
    for loss in losses:
        loss.backward()
    trainer.step(x.shape[0])
    outs = [net(p).asnumpy() for p in parts]
    np.testing.assert_allclose(np.concatenate(outs), np.concatenate([net(mx.nd.array(x[i:i + 2])).asnumpy()
                                                                     for i in range(0, len(x), 2)]), rtol=1e-5)
    for p in net.collect_params().values():
        if p.grad_req != "null":
            grads = [g.asnumpy() for g in p.list_grad()]
            assert all(np.isfinite(g).all() for g in grads)


def test_group_norm_errors_at_call():
    layer = nn.GroupNorm(num_groups=3)
    layer.initialize()
    with pytest.raises(ValueError, match="does not divide"):
        layer(mx.nd.ones((2, 4, 3)))


def test_dense_zero_as_mxnet():
    # MXNet builds Dense(0) (parameter shape (0, in_units): unknown) and fails at the first forward,
    # because FullyConnected needs num_hidden >= 1.
    layer = nn.Dense(0)
    assert "-> 0" in repr(layer)
    layer.initialize()
    with pytest.raises(ValueError, match="units must be >= 1"):
        layer(mx.nd.ones((2, 3)))
    with pytest.raises(ValueError):
        nn.Dense(-1)
