"""``gluon.nn.MultiHeadAttention``, ``PositionwiseFFN``, ``TransformerEncoderLayer`` and ``TransformerDecoderLayer``:
against NumPy compositions of their own parameters, masks and layouts, causality, float64 finite differences,
a few training steps, the errors, and the same numbers on the emulated GPUs (or real ones)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon import nn
from tests.gradcheck import check_grad


def _params(block):
    return {name: p.data().asnumpy().astype(np.float64) for name, p in block.collect_params().items()}


def _dense(p, prefix, x):
    y = x @ p[f"{prefix}.weight"].T
    return y + p[f"{prefix}.bias"] if f"{prefix}.bias" in p else y


def _attention_reference(p, query, key, value, heads, keep=None, prefix=""):
    """float64 multi-head attention from the block's parameters; ``keep`` (batch, Tq, Tk) or None."""
    q, k, v = (_dense(p, f"{prefix}{name}_proj", x) for name, x in (("query", query), ("key", key), ("value", value)))
    b, tq, units = q.shape
    split = [x.reshape(b, x.shape[1], heads, -1).transpose(0, 2, 1, 3) for x in (q, k, v)]
    s = split[0] @ split[1].transpose(0, 1, 3, 2) / np.sqrt(units // heads)
    if keep is not None:
        s = np.where(keep[:, None], s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    out = (w @ split[2]).transpose(0, 2, 1, 3).reshape(b, tq, units)
    return _dense(p, f"{prefix}out_proj", out)


def _layer_norm(p, prefix, x, eps):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p[f"{prefix}.gamma"] + p[f"{prefix}.beta"]


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _init(block, seed=0):
    mx.random.seed(seed)
    block.initialize(mx.init.Xavier())
    return block


def test_self_and_cross_attention_match_a_numpy_composition():
    net = _init(nn.MultiHeadAttention(units=12, num_heads=3, key_units=5, value_units=7))
    x, mem_k, mem_v = _rand(2, 4, 9), _rand(2, 6, 5, seed=1), _rand(2, 6, 7, seed=2)
    keep = np.random.default_rng(3).random((2, 4, 6)) > 0.3
    keep[:, :, 0] = True
    out = net(mx.array(x), mx.array(mem_k), mx.array(mem_v), mask=keep).asnumpy()
    assert out.shape == (2, 4, 12)
    want = _attention_reference(_params(net), x, mem_k, mem_v, 3, keep)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
    net2 = _init(nn.MultiHeadAttention(units=8, num_heads=2))
    np.testing.assert_allclose(net2(mx.array(x)).asnumpy(), _attention_reference(_params(net2), x, x, x, 2),
                               rtol=2e-5, atol=2e-6)


def test_masks_valid_lengths_and_the_tn_layout_agree():
    net = _init(nn.MultiHeadAttention(units=8, num_heads=2))
    x = mx.array(_rand(3, 5, 8))
    lengths = np.array([2, 5, 3])
    keep = np.arange(5)[None, None, :] < lengths[:, None, None] * np.ones((1, 5, 1), int)
    by_length = net(x, valid_length=lengths).asnumpy()
    np.testing.assert_allclose(net(x, mask=keep).asnumpy(), by_length, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(net(x, mask=mx.array(keep[:, None].astype(np.float32))).asnumpy(), by_length,
                               rtol=1e-6, atol=1e-7)  # a 0/1 float mask with an axis for the heads
    tn = nn.MultiHeadAttention(units=8, num_heads=2, layout="TN")
    tn.initialize()
    for name, p in tn.collect_params().items():
        p.set_data(net.collect_params()[name].data())
    out = tn(mx.nd.swapaxes(x, 0, 1), valid_length=lengths).asnumpy()
    np.testing.assert_allclose(out.transpose(1, 0, 2), by_length, rtol=1e-6, atol=1e-7)


def test_gradients_match_finite_differences_in_float64():
    net = _init(nn.MultiHeadAttention(units=4, num_heads=2, query_units=3, key_units=3, value_units=3,
                                      dtype=np.float64, causal=True))
    rng = np.random.default_rng(4)
    check_grad(lambda q, m: net(q, m, m), [rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 4, 3))],
               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_is_attention_then_ffn_with_residuals(pre_norm):
    layer = _init(nn.TransformerEncoderLayer(units=8, hidden_size=16, num_heads=2, pre_norm=pre_norm,
                                             activation="gelu"))
    x = _rand(2, 5, 8)
    lengths = np.array([5, 3])
    out = layer(mx.array(x), valid_length=lengths).asnumpy()  # not recording: no dropout
    p = _params(layer)
    keep = np.broadcast_to(np.arange(5)[None, None, :] < lengths[:, None, None], (2, 5, 5))
    eps = 1e-12
    erf = np.vectorize(math.erf)  # GELU's exact form

    def ffn(h):
        z = _dense(p, "ffn.ffn_1", _layer_norm(p, "ffn.layer_norm", h, 1e-12) if pre_norm else h)
        z = _dense(p, "ffn.ffn_2", z * 0.5 * (1 + erf(z / np.sqrt(2))))
        return z + h if pre_norm else _layer_norm(p, "ffn.layer_norm", z + h, eps)

    a_in = _layer_norm(p, "layer_norm", x, eps) if pre_norm else x
    h = _attention_reference(p, a_in, a_in, a_in, 2, keep, prefix="attention.") + x
    want = ffn(h if pre_norm else _layer_norm(p, "layer_norm", h, eps))
    np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-5)
    assert sorted(p) == sorted(["attention.query_proj.weight", "attention.query_proj.bias",
                                "attention.key_proj.weight", "attention.key_proj.bias", "attention.value_proj.weight",
                                "attention.value_proj.bias", "attention.out_proj.weight", "attention.out_proj.bias",
                                "layer_norm.gamma", "layer_norm.beta", "ffn.ffn_1.weight", "ffn.ffn_1.bias",
                                "ffn.ffn_2.weight", "ffn.ffn_2.bias", "ffn.layer_norm.gamma", "ffn.layer_norm.beta"])


def test_decoder_layer_is_causal_and_its_default_is_the_causal_mask():
    layer = _init(nn.TransformerDecoderLayer(units=8, mem_units=6, hidden_size=16, num_heads=2))
    x, mem = _rand(2, 5, 8), _rand(2, 7, 6, seed=1)
    lengths = np.array([7, 4])
    out = layer(mx.array(x), mx.array(mem), mem_valid_length=lengths).asnumpy()
    tril = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (2, 5, 5))
    mem_mask = np.broadcast_to(np.arange(7)[None, None, :] < lengths[:, None, None], (2, 5, 7))
    explicit = layer(mx.array(x), mx.array(mem), tril, mem_mask).asnumpy()
    np.testing.assert_allclose(out, explicit, rtol=1e-6, atol=1e-7)
    changed = x.copy()
    changed[:, 3:] += 1.0  # the future may not change the past
    later = layer(mx.array(changed), mx.array(mem), mem_valid_length=lengths).asnumpy()
    np.testing.assert_allclose(later[:, :3], out[:, :3], rtol=1e-6, atol=1e-7)
    assert not np.allclose(later[:, 3:], out[:, 3:])
    names = set(_params(layer))
    assert "self_attention.query_proj.weight" in names and "inter_attention.key_proj.weight" in names
    assert not any(n.endswith("proj.bias") for n in names)  # GluonNLP's decoder projections have no bias
    assert layer.collect_params()["inter_attention.key_proj.weight"].shape == (8, 6)


def test_a_small_encoder_learns_to_copy_a_token():
    """A few Adam steps on a toy task: each position must output the first token's value (attention needed)."""
    mx.random.seed(0)
    net = nn.Sequential()
    net.add(nn.TransformerEncoderLayer(units=16, hidden_size=32, num_heads=2, attention_dropout_prob=0.1,
                                       hidden_dropout_prob=0.0, pre_norm=True), nn.Dense(1, flatten=False))
    net.initialize(mx.init.Xavier())
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-2})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6, 16)).astype(np.float32)
    y = np.repeat(x[:, :1, :1], 6, axis=1)
    losses = []
    for _ in range(40):
        with mx.autograd.record():
            loss = ((net(mx.array(x)) - mx.array(y)) ** 2).mean()
        loss.backward()
        trainer.step(1)
        losses.append(float(loss.asnumpy()))
    assert losses[-1] < 0.3 * losses[0], losses


def test_attention_dropout_follows_the_seed_and_training():
    net = _init(nn.MultiHeadAttention(units=8, num_heads=2, dropout=0.5))
    x = mx.array(_rand(2, 6, 8))
    plain = net(x).asnumpy()
    with mx.autograd.record():
        mx.random.seed(1)
        first = net(x).asnumpy()
        mx.random.seed(1)
        again = net(x).asnumpy()
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, plain)


def test_bad_arguments_raise_errors_naming_them():
    with pytest.raises(ValueError, match=r"units \(10\) must be a multiple of num_heads \(4\)"):
        nn.MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="dropout must lie in"):
        nn.MultiHeadAttention(8, 2, dropout=2.0)
    with pytest.raises(ValueError, match="layout must be 'NT'"):
        nn.TransformerEncoderLayer(8, 16, 2, layout="NTC")
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        nn.PositionwiseFFN(8, 16, activation="swishy")
    net = _init(nn.MultiHeadAttention(8, 2))
    with pytest.raises(ValueError, match=r"query must be 3-D \(batch, seq, units\), got shape \(5, 8\)"):
        net(mx.array(_rand(5, 8)))
    with pytest.raises(ValueError, match="share the batch"):
        net(mx.array(_rand(2, 5, 8)), mx.array(_rand(3, 5, 8)))


@pytest.mark.gpu
def test_gpu_gives_the_cpu_devices_numbers():
    layer = nn.TransformerEncoderLayer(units=8, hidden_size=16, num_heads=2)
    mx.random.seed(0)
    layer.initialize(mx.init.Xavier(), device=[mx.cpu(0), mx.gpu(0)])
    x = _rand(2, 5, 8)
    lengths = np.array([5, 2])
    outs = [layer(mx.array(x, device=d), valid_length=mx.array(lengths, device=d)).asnumpy()
            for d in (mx.cpu(0), mx.gpu(0))]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_a_hybridized_layer_is_captured_and_replays_its_eager_numbers():
    """No host read or copy in the attention's launches: the layer is captured as CUDA graphs, forward and
    backward, and replays give the eager step's numbers; with dropout each replay draws new weights."""
    x = mx.array(_rand(2, 5, 8), device=mx.gpu(0))

    def steps(dropout, hybridize):
        mx.random.seed(0)
        layer = nn.TransformerEncoderLayer(units=8, hidden_size=16, num_heads=2, attention_dropout_prob=dropout,
                                           hidden_dropout_prob=0.0)
        layer.initialize(mx.init.Xavier(), device=mx.gpu(0))
        if hybridize:
            layer.hybridize(static_alloc=True, static_shape=True)
        outs = []
        for _ in range(3):
            with mx.autograd.record():
                y = layer(x)
            y.backward()
            outs.append((y.asnumpy(), layer.collect_params()["attention.query_proj.weight"].grad().asnumpy()))
        return layer, outs

    layer, replayed = steps(0.0, True)
    info = layer.graph_info()
    assert len(info) == 1 and info[0]["backward"] and info[0]["launches"] >= 1, info
    _, eager = steps(0.0, False)
    for (a, ga), (b, gb) in zip(replayed, eager):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-7)
    _, dropped = steps(0.5, True)
    assert not np.allclose(dropped[1][0], dropped[2][0])


@pytest.mark.gpu
@pytest.mark.requires_gpus(2)
def test_attention_runs_on_the_gpu_its_inputs_live_on():
    x = _rand(1, 2, 4, 8)
    want = mx.npx.scaled_dot_product_attention(x, x, x, causal=True).asnumpy()
    with mx.gpu(0):
        x1 = mx.array(x, device=mx.gpu(1))
        x1.attach_grad()
        with mx.autograd.record():
            y = mx.npx.scaled_dot_product_attention(x1, x1, x1, causal=True, dropout=0.2)
        y.backward()
        plain = mx.npx.scaled_dot_product_attention(x1, x1, x1, causal=True)
    assert y.device == mx.gpu(1) and x1.grad.device == mx.gpu(1)
    np.testing.assert_allclose(plain.asnumpy(), want, rtol=1e-6, atol=1e-7)
