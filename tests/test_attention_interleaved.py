"""MXNet's interleaved attention products (``npx.interleaved_matmul_*``, ``nd.contrib.interleaved_matmul_*``):
the layouts of MXNet's src/operator/contrib/transformer.cc (its documented equivalent code, written in NumPy here),
float64 finite differences, agreement with ``scaled_dot_product_attention``, and the shape errors."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import attention as A
from tests.gradcheck import check_grad

SEQ, BATCH, HEADS, HEAD_DIM = 5, 2, 3, 4


def _split(x, heads, parts):
    """MXNet's ``reshape(x, (0, 0, heads, parts, -1))`` then part i transposed to (batch * heads, seq, head_dim)."""
    seq, batch, _ = x.shape
    y = x.reshape(seq, batch, heads, parts, -1)
    return [y[:, :, :, i].transpose(1, 2, 0, 3).reshape(batch * heads, seq, -1) for i in range(parts)]


def _merge(x, batch, heads):
    """(batch * heads, seq, head_dim) -> (seq, batch, heads * head_dim), MXNet's reshape/transpose/reshape."""
    _, seq, head_dim = x.shape
    return x.reshape(batch, heads, seq, head_dim).transpose(2, 0, 1, 3).reshape(seq, batch, heads * head_dim)


def _qkv(seed=0):
    return np.random.default_rng(seed).standard_normal((SEQ, BATCH, HEADS * 3 * HEAD_DIM))


def test_selfatt_products_follow_mxnets_layout():
    qkv = _qkv()
    q, k, v = _split(qkv, HEADS, 3)
    scores = A.interleaved_matmul_selfatt_qk(mx.array(qkv), HEADS).asnumpy()
    np.testing.assert_allclose(scores, (q / np.sqrt(HEAD_DIM)) @ k.transpose(0, 2, 1), rtol=1e-12)
    att = np.random.default_rng(1).random((BATCH * HEADS, SEQ, SEQ))
    out = A.interleaved_matmul_selfatt_valatt(mx.array(qkv), mx.array(att), HEADS).asnumpy()
    np.testing.assert_allclose(out, _merge(att @ v, BATCH, HEADS), rtol=1e-12)


def test_encdec_products_follow_mxnets_layout():
    rng = np.random.default_rng(2)
    queries = rng.standard_normal((SEQ, BATCH, HEADS * HEAD_DIM))
    kv = rng.standard_normal((7, BATCH, HEADS * 2 * HEAD_DIM))
    (q,) = _split(queries, HEADS, 1)
    k, v = _split(kv, HEADS, 2)
    scores = A.interleaved_matmul_encdec_qk(mx.array(queries), mx.array(kv), HEADS).asnumpy()
    assert scores.shape == (BATCH * HEADS, SEQ, 7)
    np.testing.assert_allclose(scores, q @ k.transpose(0, 2, 1) / np.sqrt(HEAD_DIM), rtol=1e-12)
    att = rng.random((BATCH * HEADS, SEQ, 7))
    out = A.interleaved_matmul_encdec_valatt(mx.array(kv), mx.array(att), HEADS).asnumpy()
    np.testing.assert_allclose(out, _merge(att @ v, BATCH, HEADS), rtol=1e-12)


def test_gradients_match_finite_differences_in_float64():
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((3, 2, 2 * 3 * 2))
    att = rng.random((4, 3, 3))
    check_grad(lambda x: A.interleaved_matmul_selfatt_qk(x, 2), [qkv])
    check_grad(lambda x, a: A.interleaved_matmul_selfatt_valatt(x, a, 2), [qkv, att])
    queries, kv, att2 = rng.standard_normal((3, 2, 4)), rng.standard_normal((4, 2, 8)), rng.random((4, 3, 4))
    check_grad(lambda q, k: A.interleaved_matmul_encdec_qk(q, k, 2), [queries, kv])
    check_grad(lambda k, a: A.interleaved_matmul_encdec_valatt(k, a, 2), [kv, att2])


def test_the_products_around_a_masked_softmax_are_attention():
    """qk, masked_softmax and valatt give what scaled_dot_product_attention gives on the same heads."""
    qkv = _qkv(4)
    q, k, v = (x.reshape(BATCH, HEADS, SEQ, HEAD_DIM) for x in _split(qkv, HEADS, 3))
    causal = np.tril(np.ones((SEQ, SEQ), bool))
    scores = mx.npx.interleaved_matmul_selfatt_qk(qkv, heads=HEADS)
    weights = mx.npx.masked_softmax(scores, causal)
    composed = mx.npx.interleaved_matmul_selfatt_valatt(qkv, weights, heads=HEADS).asnumpy()
    fused = A.scaled_dot_product_attention(*(mx.array(x) for x in (q, k, v)), causal=True).asnumpy()
    np.testing.assert_allclose(composed, _merge(fused.reshape(BATCH * HEADS, SEQ, HEAD_DIM), BATCH, HEADS),
                               rtol=1e-12, atol=1e-14)


def test_nd_contrib_gives_the_nd_face():
    qkv = mx.nd.array(_qkv(5))
    scores = mx.nd.contrib.interleaved_matmul_selfatt_qk(qkv, heads=HEADS)
    assert isinstance(scores, mx.nd.NDArray) and scores.shape == (BATCH * HEADS, SEQ, SEQ)
    out = mx.nd.contrib.interleaved_matmul_selfatt_valatt(qkv, mx.nd.softmax(scores), heads=HEADS)
    assert out.shape == (SEQ, BATCH, HEADS * HEAD_DIM)
    assert out.reshape((0, -1)).shape == (SEQ, BATCH * HEADS * HEAD_DIM)  # MXNet 1.x's reshape codes


def test_shapes_that_do_not_fit_raise_errors_naming_them():
    qkv = mx.array(_qkv())
    with pytest.raises(ValueError, match=r"selfatt_qk: the last axis of queries_keys_values \(36\) must be a "
                                         r"positive multiple of heads \* 3 = 15"):
        A.interleaved_matmul_selfatt_qk(qkv, 5)
    with pytest.raises(ValueError, match="must be 3-D"):
        A.interleaved_matmul_selfatt_qk(mx.array(np.zeros((2, 36))), 3)
    with pytest.raises(ValueError, match="heads must be a positive integer"):
        A.interleaved_matmul_selfatt_qk(qkv, 0)
    with pytest.raises(ValueError, match=r"attention must have shape \(batch \* heads, queries, keys\) = \(6, 5, 5\)"):
        A.interleaved_matmul_selfatt_valatt(qkv, mx.array(np.zeros((6, 5, 4))), HEADS)
    with pytest.raises(ValueError, match="keys_values must be"):
        A.interleaved_matmul_encdec_qk(mx.array(np.zeros((5, 2, 12))), mx.array(np.zeros((7, 2, 12))), HEADS)
    with pytest.raises(ValueError, match="encdec_valatt: attention must have shape"):
        A.interleaved_matmul_encdec_valatt(mx.array(np.zeros((7, 2, 24))), mx.array(np.zeros((6, 5, 6))), HEADS)
