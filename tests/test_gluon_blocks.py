"""Blocks as Gluon 1.x and 2.x users write them (after MXNet's test_gluon.py Parameter/Block tests)."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, gluon, nd
from mxlite.gluon import nn


class Scaled(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(3)
            self.scale = self.params.get("scale", shape=(3,), init=mx.init.One())

    def hybrid_forward(self, F, x, scale):
        return F.relu(self.dense(x)) * scale


def test_hybrid_forward_gets_F_and_params():
    net = Scaled(prefix="net_")
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    net.hybridize()
    out = net(nd.ones((2, 4), ctx=mx.cpu(1)))
    assert out.shape == (2, 3) and out.context == mx.cpu(1)
    assert list(net.collect_params()) == ["scale", "dense.weight", "dense.bias"]
    x = nd.ones((2, 4))
    with autograd.record():
        y = net(x).sum()
    y.backward()
    assert net.scale.grad(mx.cpu(0)).shape == (3,)


def test_paramdict_api(tmp_path):
    net = nn.Sequential()
    net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    params = net.collect_params()
    assert isinstance(params, gluon.nn.ParameterDict)
    params.initialize(mx.init.Xavier(), ctx=mx.cpu())
    assert list(params.keys()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert list(net.collect_params(".*weight").keys()) == ["0.weight", "1.weight"]
    assert list(params.select("1").keys()) == ["1.weight", "1.bias"]
    params.setattr("grad_req", "add")
    assert all(p.grad_req == "add" for p in params.values())
    params.setattr("grad_req", "write")
    net.setattr("lr_mult", 0.5)
    assert all(p.lr_mult == 0.5 for p in params.values())
    params.zero_grad()
    path = tmp_path / "p.params"
    params.save(path)
    before = net[0].weight.data().asnumpy()
    net[0].weight.set_data(np.zeros((4, 3)))
    params.load(path, ctx=mx.cpu())
    np.testing.assert_array_equal(net[0].weight.data().asnumpy(), before)
    other = gluon.nn.ParameterDict()
    other.update(params)
    assert len(other) == 4
    with pytest.raises(ValueError, match="different"):
        other.update({"0.weight": gluon.Parameter("w", shape=(1,))})


def test_hooks_summary_apply_cast_share(capsys):
    net = nn.Sequential()
    net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    net.initialize()
    seen = []
    pre = net.register_forward_pre_hook(lambda b, inputs: seen.append(("pre", inputs[0].shape)))
    post = net.register_forward_hook(lambda b, inputs, out: seen.append(("post", out.shape)))
    net(nd.ones((5, 3)))
    pre.detach()
    post.detach()
    net(nd.ones((5, 3)))
    assert seen == [("pre", (5, 3)), ("post", (5, 2))]
    net.summary(nd.ones((5, 3)))
    text = capsys.readouterr().out
    assert "Total params: 26" in text and "(5, 4)" in text
    names = []
    net.apply(lambda b: names.append(type(b).__name__))
    assert names == ["Dense", "Dense", "Sequential"]
    twin = nn.Sequential()
    twin.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    twin.share_parameters(net.collect_params())
    assert twin[0].weight is net[0].weight
    net.cast("float64")
    assert net[0].weight.data().dtype == np.float64


def test_container_block_and_hybridize():
    class Holder(gluon.Block):
        def __init__(self):
            super().__init__()
            self.body = nn.Dense(2, in_units=2)

    holder = Holder()
    holder.initialize()
    holder.hybridize(static_alloc=True, static_shape=True)
    assert list(holder.collect_params()) == ["body.weight", "body.bias"]
    with pytest.raises(NotImplementedError, match="forward"):
        holder(nd.ones((1, 2)))
    empty = gluon.Block()
    empty.register_child(nn.Dense(1), "d")
    assert "d.weight" in empty.collect_params()
