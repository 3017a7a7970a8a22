"""Contexts: mx.context, mx.Context, ctx=/ctx_list=/context= spellings, `with mx.cpu(1):`."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import gluon, nd


def test_context_module():
    assert mx.Context is mx.context.Context
    assert mx.Context("cpu", 1) == mx.cpu(1)
    assert mx.cpu() == mx.cpu(0)
    assert mx.context.num_gpus() == mx.num_gpus()
    assert mx.context.current_context() == mx.cpu(0)
    assert str(mx.cpu(2)) == "cpu(2)"


def test_with_context_sets_default():
    with mx.cpu(1):
        assert mx.current_context() == mx.cpu(1)
        assert nd.zeros((1,)).context == mx.cpu(1)
        assert mx.np.ones((1,)).device == mx.cpu(1)
    assert nd.zeros((1,)).context == mx.cpu(0)


def test_ctx_keywords():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    assert net.weight.list_ctx() == [mx.cpu(0), mx.cpu(1)]
    assert net.weight.data(ctx=mx.cpu(1)).context == mx.cpu(1)
    net.collect_params().reset_ctx(ctx=mx.cpu(2))
    assert net.weight.list_ctx() == [mx.cpu(2)]
    parts = gluon.utils.split_and_load(np.arange(8, dtype=np.float32).reshape(4, 2), ctx_list=[mx.cpu(0), mx.cpu(1)])
    assert [p.context for p in parts] == [mx.cpu(0), mx.cpu(1)]
    assert nd.array([1], ctx=mx.cpu(3)).context == mx.cpu(3)
    with pytest.raises(ValueError, match="once"):
        nd.array([1], ctx=mx.cpu(1), device=mx.cpu(2))


@pytest.mark.gpu
def test_gpu_context():
    if mx.num_gpus() < 1:
        pytest.skip("no GPU")
    assert mx.gpu() == mx.gpu(0)
    with mx.gpu(0):
        assert nd.zeros((2,)).context == mx.gpu(0)
