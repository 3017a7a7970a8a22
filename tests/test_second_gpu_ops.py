"""Ops on the second GPU while the first is the current device: every temporary lands on the operands' device.

Each case runs an op family (forward and, where differentiable, backward) on ``cpu(0)`` and on ``gpu(1)``
inside ``with mx.gpu(0):``; the GPU run must give the CPU's values, with every result and gradient on
``gpu(1)``. The emulated CuPy refuses an operation that mixes arrays of two GPUs, so a temporary made
on the current device instead of the operands' fails the case where it is made.

Also here: gradient buffers of ``attach_grad`` on the operands' device, and ``take``/``pick``/``Embedding``
given index arrays that live on a GPU (any GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, gluon
from mxlite.autograd.tensor import Tensor

pytestmark = [pytest.mark.gpu, pytest.mark.requires_gpus(2)]

_CASES: dict[str, Callable[[mx.Device], list[Any]]] = {}


def _case(fn: Callable[[mx.Device], list[Any]]) -> Callable[[mx.Device], list[Any]]:
    _CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


# -- helpers --------------------------------------------------------------------------------------
def _values(*shape: int, seed: int = 0, low: float = -1.0, high: float = 1.0, dtype: Any = np.float64) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def _arr(dev: mx.Device, values: Any, dtype: Any = None) -> Tensor:
    values = np.asarray(values)
    return mx.nd.array(values, ctx=dev, dtype=dtype or values.dtype)


def _grads(dev: mx.Device, fn: Callable[..., Any], *inputs: np.ndarray) -> list[Any]:
    """``fn``'s outputs on ``inputs`` (variables on ``dev``) and the inputs' gradients for a fixed head gradient."""
    xs = [_arr(dev, a) for a in inputs]
    for x in xs:
        x.attach_grad()
    with autograd.record():
        out = fn(*xs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    heads = [_arr(dev, _values(*o.shape, seed=7 + i, dtype=o.dtype)) for i, o in enumerate(outs)]
    autograd.backward(outs, heads)
    return outs + [x.grad for x in xs]


def _spd(n: int, seed: int = 0) -> np.ndarray:
    a = _values(n, n, seed=seed)
    return a @ a.T + n * np.eye(n)


# -- elementwise ----------------------------------------------------------------------------------
@_case
def case_binary_arithmetic(dev):
    a, b = _values(2, 3), _values(3, seed=1, low=0.5, high=2.0)
    return _grads(dev, lambda x, y: [x + y, x - y, x * y, x / y, mx.nd.power(y, x), mx.nd.maximum(x, y),
                                     mx.nd.minimum(x, y), mx.np.arctan2(x, y), mx.np.hypot(x, y), mx.np.mod(x, y)],
                  a, b)


@_case
def case_unary_math(dev):
    a = _values(2, 3, low=0.1, high=0.9)
    return _grads(dev, lambda x: [mx.nd.exp(x), mx.nd.log(x), mx.nd.sqrt(x), mx.nd.tanh(x), mx.nd.sigmoid(x),
                                  mx.nd.relu(x - 0.5), mx.nd.abs(x - 0.5), mx.nd.clip(x, 0.2, 0.7), mx.np.sin(x),
                                  mx.np.arcsin(x), mx.np.log1p(x), mx.np.reciprocal(x), mx.nd.erf(x),
                                  mx.np.cbrt(x), mx.nd.rsqrt(x)], a)


@_case
def case_scalars_and_host_operands(dev):
    a, host = _values(2, 3), _values(2, 3, seed=1)
    return _grads(dev, lambda x: [x + 1.5, 2 * x, 1 - x, x ** 2, x + host, host * x], a)


@_case
def case_activations(dev):
    a = _values(2, 5)
    return _grads(dev, lambda x: [mx.nd.LeakyReLU(x, slope=0.1), mx.nd.LeakyReLU(x, act_type="elu"),
                                  mx.nd.LeakyReLU(x, act_type="selu"), mx.nd.LeakyReLU(x, act_type="gelu"),
                                  mx.nd.Activation(x, "softrelu"), mx.nd.Activation(x, "softsign"),
                                  mx.nd.log_sigmoid(x), mx.nd.mish(x), mx.nd.hard_sigmoid(x), mx.nd.relu6(x * 8)],
                  a)


@_case
def case_comparisons_and_rounding(dev):
    a, b = _arr(dev, _values(2, 3) * 3), _arr(dev, _values(2, 3, seed=1) * 3)
    return [a > b, a <= b, a == a, mx.nd.logical_and(a > 0, b > 0), mx.nd.sign(a), mx.nd.round(a), mx.nd.floor(a),
            mx.np.isfinite(a), mx.np.isnan(a / a), mx.np.logical_not(a > 0)]


# -- reductions -----------------------------------------------------------------------------------
@_case
def case_reductions(dev):
    a = _values(2, 3, 4, low=0.5, high=1.5)
    return _grads(dev, lambda x: [mx.nd.sum(x, axis=1), mx.nd.mean(x), mx.nd.max(x, axis=2), mx.nd.min(x, axis=(0, 2)),
                                  mx.nd.prod(x, axis=0), mx.nd.norm(x), mx.np.var(x, axis=1), mx.np.std(x, ddof=1),
                                  mx.nd.nansum(x, axis=0, exclude=True), mx.np.cumsum(x, axis=2),
                                  mx.nd.moments(x, axes=(0, 1))[1]], a)


@_case
def case_logsumexp(dev):
    return _grads(dev, lambda x: [x.logsumexp(axis=1), x.logsumexp()], _values(3, 4))


@_case
def case_arg_reductions(dev):
    a = _arr(dev, _values(3, 4))
    return [mx.nd.argmax(a, axis=1), mx.nd.argmin(a, axis=0), mx.np.argmax(a), a.argmax(axis=1),
            mx.nd.argmax_channel(a), mx.np.all(a > -2), mx.np.any(a > 0.5, axis=0)]


# -- indexing -------------------------------------------------------------------------------------
@_case
def case_getitem_and_slices(dev):
    a = _values(4, 5)

    def ops(x):
        idx = _arr(dev, [3, 0, 3])
        return [x[1:3, ::2], x[idx], x[:, [4, 1]], x[idx, 2], mx.nd.slice_axis(x, 1, 1, 4),
                mx.nd.slice(x, (1, None), (None, 3)), mx.nd.flip(x, 1), mx.nd.tile(x, (2, 1)), mx.nd.repeat(x, 2, 0),
                mx.nd.diag(x), mx.nd.pad(x.reshape((1, 1, 4, 5)), "constant", (0, 0, 0, 0, 1, 1, 2, 0), 3.0),
                mx.nd.pad(x.reshape((1, 1, 4, 5)), "edge", (0, 0, 0, 0, 1, 1, 2, 0)),
                mx.nd.reverse(x, 0), mx.nd.broadcast_to(x[:1], (3, 5)), mx.nd.broadcast_axis(x[:, :1], 1, 3)]

    return _grads(dev, ops, a)


@_case
def case_setitem(dev):
    a = _arr(dev, _values(4, 5))
    a[1] = 7.0
    a[_arr(dev, [0, 3]), 2] = _arr(dev, [-1.0, -2.0])
    a[:, 4] = _values(4, seed=2)
    a[a > 0.9] = 0.5
    a[np.array([2]), 0] = 9.0
    return [a]


@_case
def case_take_pick_gather(dev):
    a = _values(4, 3)

    def ops(x):
        ids = _arr(dev, [[0, 3], [3, 1]])
        return [mx.nd.take(x, ids), mx.nd.take(x, _arr(dev, [2, 5, -1]), axis=1, mode="wrap"),
                mx.np.take(x, _arr(dev, [1, 10])), mx.nd.pick(x, _arr(dev, [0, 2, 1, 1]), axis=1),
                mx.npx.pick(x, _arr(dev, [1, 0, 3]), axis=0, keepdims=True),
                mx.nd.gather_nd(x, _arr(dev, [[0, 3, 3], [2, 1, 1]])), mx.nd.batch_take(x, _arr(dev, [0, 1, 2, 0])),
                mx.np.take_along_axis(x, _arr(dev, [[0], [2], [1], [1]], dtype=np.int64), 1),
                x.take(_arr(dev, [5, 0]))]

    return _grads(dev, ops, a)


@_case
def case_sequence_ops(dev):
    a = _values(4, 3, 2)

    def ops(x):
        lengths = _arr(dev, [2, 4, 1])
        return [mx.nd.SequenceMask(x, lengths, use_sequence_length=True, value=-3.0),
                mx.nd.SequenceMask(mx.nd.swapaxes(x, 0, 1), lengths, use_sequence_length=True, axis=1),
                mx.npx.sequence_mask(x, lengths, use_sequence_length=True),
                mx.nd.SequenceLast(x, lengths, use_sequence_length=True), mx.nd.SequenceLast(x),
                mx.nd.SequenceReverse(x, lengths, use_sequence_length=True), mx.nd.SequenceReverse(x)]

    return _grads(dev, ops, a)


@_case
def case_one_hot_and_where(dev):
    a, b = _values(2, 3), _values(2, 3, seed=1)

    ids = _arr(dev, [[0, 2, 1], [3, 3, 0]])
    return _grads(dev, lambda x, y: [mx.nd.where(x > y, x, y), mx.np.where(x > 0, x, 0.5)], a, b) + [
        mx.nd.one_hot(ids, 4), mx.npx.one_hot(ids, 4, on_value=2.0, off_value=-1.0), ids.one_hot(5)]


@_case
def case_sort_topk(dev):
    a = _values(3, 5)

    def ops(x):
        return [mx.nd.sort(x, axis=1), mx.nd.sort(x, axis=0, is_ascend=False), mx.nd.topk(x, k=2, ret_typ="value"),
                mx.np.sort(x)]

    data = _arr(dev, a)
    return _grads(dev, ops, a) + [mx.nd.argsort(data), mx.np.argsort(data, axis=0), mx.nd.topk(data, k=2),
                                   mx.nd.topk(data, k=2, ret_typ="mask"), mx.nd.topk(data, k=3, ret_typ="both")[1],
                                   mx.npx.topk(data, k=2, axis=0)]


# -- joining and splitting ------------------------------------------------------------------------
@_case
def case_concat_stack_split(dev):
    a, b = _values(2, 4), _values(2, 4, seed=1)

    def ops(x, y):
        return [mx.nd.concat(x, y, dim=1), mx.np.concatenate([x, y]), mx.nd.stack(x, y, axis=1),
                mx.np.vstack([x, y]), mx.np.hstack([x, y]), mx.np.column_stack([x, y]), mx.np.dstack([x, y]),
                *mx.nd.split(x, 2), *mx.np.split(y, [1, 3], axis=1), *mx.nd.split_v2(x, 2, axis=1),
                *mx.np.array_split(y, 3, axis=1), mx.nd.add_n(x, y, x)]

    return _grads(dev, ops, a, b)


@_case
def case_shape_ops(dev):
    a = _values(2, 3, 4)

    def ops(x):
        return [x.reshape((0, -1)), mx.nd.transpose(x, (2, 0, 1)), mx.nd.swapaxes(x, 0, 2), mx.nd.expand_dims(x, 1),
                mx.nd.flatten(x), mx.np.moveaxis(x, 0, -1), mx.nd.squeeze(x[:1]), mx.nd.depth_to_space(
                    x.reshape((1, 4, 2, 3)), 2), mx.nd.space_to_depth(x.reshape((1, 1, 4, 6)), 2),
                mx.nd.UpSampling(x.reshape((1, 2, 3, 4)), scale=2),
                mx.nd.BilinearResize2D(x.reshape((1, 2, 3, 4)), height=5, width=3)]

    return _grads(dev, ops, a)


@_case
def case_creation_like(dev):
    a = _arr(dev, _values(2, 3))
    return [mx.nd.zeros_like(a), mx.nd.ones_like(a), mx.nd.full_like(a, 3.0), mx.np.zeros_like(a),
            mx.nd.arange_like(a, start=1.0), mx.nd.shape_array(a), mx.nd.size_array(a), a.copy(), mx.nd.identity(a),
            a.astype("float16"), mx.nd.cast(a, "int32"), mx.nd.stop_gradient(a),
            mx.nd.zeros((2, 2), ctx=dev), mx.np.ones((3,), device=dev), mx.np.arange(4, device=dev),
            mx.np.eye(3, device=dev), mx.nd.linspace(0, 1, 5, ctx=dev), mx.np.full((2,), 7, device=dev)]


# -- products and linear algebra -----------------------------------------------------------------
@_case
def case_products(dev):
    a, b, c = _values(2, 3), _values(3, 4, seed=1), _values(2, 3, 4, seed=2)
    return _grads(dev, lambda x, y, z: [mx.nd.dot(x, y), mx.np.dot(x, y), x @ y, mx.np.matmul(z, y.T),
                                        mx.nd.batch_dot(z, z, transpose_b=True), mx.np.outer(x, y),
                                        mx.nd.FullyConnected(x, y.T, num_hidden=4, no_bias=True),
                                        mx.nd.linalg.gemm2(x, y), mx.nd.linalg.syrk(x)], a, b, c)


@_case
def case_linalg_square(dev):
    spd, m = _spd(3), _values(3, 3, seed=1) + 2 * np.eye(3)

    def ops(s, a):
        return [mx.np.linalg.inv(a), mx.np.linalg.det(a), mx.np.linalg.slogdet(a)[1], mx.np.linalg.solve(a, s),
                mx.np.linalg.cholesky(s), mx.nd.linalg.potrf(s), mx.nd.linalg.potri(mx.nd.linalg.potrf(s)),
                mx.nd.linalg.trsm(mx.nd.linalg.potrf(s), a), mx.nd.linalg.trmm(mx.nd.linalg.potrf(s), a),
                mx.nd.linalg.sumlogdiag(s), mx.nd.linalg.extractdiag(a), mx.nd.linalg.makediag(a[0]),
                mx.nd.linalg.extracttrian(a), mx.nd.linalg.maketrian(mx.nd.linalg.extracttrian(a)),
                mx.nd.linalg.inverse(a), mx.nd.linalg.gemm(a, s, a, alpha=2.0, beta=0.5)]

    return _grads(dev, ops, spd, m) + [mx.np.linalg.slogdet(_arr(dev, -m))[0]]


@_case
def case_linalg_decompositions(dev):
    a, s = _values(4, 3), _spd(3, seed=3)

    def ops(x):
        u, sv, vt = mx.np.linalg.svd(x)
        q, r = mx.np.linalg.qr(x)
        return [sv, mx.np.abs(u), mx.np.abs(vt), mx.np.abs(q), mx.np.abs(r), mx.np.linalg.norm(x),
                mx.np.linalg.norm(x, ord=1), mx.np.linalg.norm(x, ord="fro"), mx.np.linalg.norm(x, axis=1)]

    data, rect = _arr(dev, s), _arr(dev, a)
    w, v = mx.np.linalg.eigh(data)
    solution = mx.np.linalg.lstsq(rect, rect[:, :1], rcond=None)[0]
    return _grads(dev, ops, a) + [w, mx.np.abs(v), mx.np.linalg.pinv(rect), solution,
                                   mx.np.linalg.norm(data, ord=2), mx.np.linalg.norm(data, ord="nuc")]


# -- neural-network ops ---------------------------------------------------------------------------
@_case
def case_convolution_pooling(dev):
    x, w, b = _values(2, 2, 5, 5), _values(3, 2, 3, 3, seed=1), _values(3, seed=2)

    def ops(data, weight, bias):
        conv = mx.nd.Convolution(data, weight, bias, kernel=(3, 3), num_filter=3, pad=(1, 1))
        return [conv, mx.nd.Deconvolution(conv, weight, kernel=(3, 3), num_filter=2),
                mx.nd.Convolution(data[:, :, 0], weight[:, :, 0], bias, kernel=(3,), num_filter=3),
                mx.nd.Pooling(conv, kernel=(2, 2), pool_type="max", stride=(2, 2)),
                mx.nd.Pooling(conv, kernel=(3, 3), pool_type="avg", pad=(1, 1)),
                mx.nd.Pooling(conv, pool_type="max", global_pool=True),
                mx.nd.Pooling(conv, pool_type="avg", global_pool=True)]

    return _grads(dev, ops, x, w, b)


@_case
def case_normalisation(dev):
    x, g, b = _values(3, 2, 4), _values(2, seed=1, low=0.5, high=1.5), _values(2, seed=2)

    mean, var = mx.nd.zeros((2,), ctx=dev, dtype=x.dtype), mx.nd.ones((2,), ctx=dev, dtype=x.dtype)

    def ops(data, gamma, beta):
        return [mx.nd.BatchNorm(data, gamma, beta, mean, var, fix_gamma=False),
                mx.nd.LayerNorm(data, mx.nd.tile(gamma, (2,)), mx.nd.tile(beta, (2,))),
                mx.nd.InstanceNorm(data, gamma, beta), mx.nd.GroupNorm(data, gamma, beta, num_groups=2),
                mx.nd.L2Normalization(data), mx.nd.L2Normalization(data, mode="channel")]

    return _grads(dev, ops, x, g, b) + [mean, var]


@_case
def case_softmax_family(dev):
    a = _values(3, 4)

    def ops(x):
        length = _arr(dev, [2, 4, 1])
        return [mx.nd.softmax(x), mx.nd.log_softmax(x, axis=0), mx.nd.softmax(x, temperature=2.0),
                mx.npx.softmax(x, length=length, use_length=True), mx.nd.softmin(x),
                mx.npx.log_softmax(x, length=length, use_length=True), mx.nd.SoftmaxActivation(x),
                mx.nd.softmax_cross_entropy(x, _arr(dev, [1, 0, 3]))]

    return _grads(dev, ops, a)


@_case
def case_embedding(dev):
    w = _values(5, 3)
    return _grads(dev, lambda weight: [mx.nd.Embedding(_arr(dev, [[0, 4], [4, 2]]), weight, 5, 3),
                                       mx.npx.embedding(_arr(dev, [1, 1, 3]), weight, 5, 3)], w)


@_case
def case_gluon_layers(dev):
    mx.random.seed(11)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Conv2D(3, 3, padding=1, in_channels=2), gluon.nn.BatchNorm(in_channels=3),
            gluon.nn.Activation("relu"), gluon.nn.MaxPool2D(), gluon.nn.Flatten(),
            gluon.nn.Dense(4, in_units=18), gluon.nn.LayerNorm(in_channels=4))
    net.initialize(mx.init.Xavier(), ctx=dev)
    x = _arr(dev, _values(2, 2, 4, 6), dtype=np.float32)
    with autograd.record():
        out = net(x)
    out.backward()
    return [out] + [p.grad(dev) for p in net.collect_params().values() if p.grad_req != "null"]


@_case
def case_gluon_embedding(dev):
    mx.random.seed(12)
    outs = []
    for sparse in (False, True):
        emb = gluon.nn.Embedding(6, 3, sparse_grad=sparse)
        emb.initialize(ctx=dev)
        with autograd.record():
            out = emb(_arr(dev, [[0, 5], [5, 2]], dtype=np.float32))
        out.backward()
        grad = emb.weight.grad(dev)
        outs += [out, grad.tostype("default") if sparse else grad]
    return outs


@_case
def case_rnn_layers(dev):
    mx.random.seed(13)
    outs = []
    x = _arr(dev, _values(4, 2, 3), dtype=np.float32)
    for layer in (gluon.rnn.LSTM(3, num_layers=2, input_size=3), gluon.rnn.GRU(3, bidirectional=True, input_size=3),
                  gluon.rnn.RNN(3, input_size=3, activation="tanh")):
        layer.initialize(ctx=dev)
        with autograd.record():
            out = layer(x)
        out.backward()
        outs += [out] + [p.grad(dev) for p in layer.collect_params().values()]
    lstm = gluon.rnn.LSTM(3, input_size=3, use_sequence_length=True)
    lstm.initialize(ctx=dev)
    with autograd.record():
        out = lstm(x, sequence_length=_arr(dev, [4, 2], dtype=np.float32))
    out.backward()
    return outs + [out] + [p.grad(dev) for p in lstm.collect_params().values()]


@_case
def case_rnn_cells(dev):
    mx.random.seed(14)
    cell = gluon.rnn.LSTMCell(3, input_size=3)
    cell.initialize(ctx=dev)
    x = _arr(dev, _values(2, 4, 3), dtype=np.float32)
    with autograd.record():
        out, states = cell.unroll(4, x, layout="NTC", merge_outputs=True,
                                  valid_length=_arr(dev, [4, 2], dtype=np.float32))
    out.backward()
    return [out, *states] + [p.grad(dev) for p in cell.collect_params().values()]


@_case
def case_gluon_more_layers(dev):
    mx.random.seed(15)
    nn = gluon.nn
    net = nn.Sequential()
    net.add(nn.Conv1D(2, 3, in_channels=2), nn.GroupNorm(2, in_channels=2), nn.PReLU(), nn.AvgPool1D(2),
            nn.Conv1DTranspose(2, 2, in_channels=2), nn.InstanceNorm(in_channels=2), nn.ELU(), nn.MaxPool1D(2),
            nn.GlobalAvgPool1D(), nn.Flatten(), nn.Dense(3, in_units=2, activation="tanh"), nn.SELU(), nn.GELU(),
            nn.Swish(), nn.LeakyReLU(0.1), nn.Dropout(0.0), nn.HybridLambda(lambda F, x: F.relu(x) + x))
    net.initialize(mx.init.Uniform(0.5), ctx=dev)
    image = nn.Sequential()
    image.add(nn.Conv2DTranspose(2, 2, strides=2, in_channels=3), nn.ReflectionPad2D(1), nn.PixelShuffle2D(1),
              nn.AvgPool2D(2), nn.GlobalMaxPool2D())
    image.initialize(mx.init.Uniform(0.5), ctx=dev)
    x, y = _arr(dev, _values(2, 2, 9), dtype=np.float32), _arr(dev, _values(1, 3, 3, 3), dtype=np.float32)
    with autograd.record():
        out, out2 = net(x), image(y)
        (out.sum() + out2.sum()).backward()
    params = list(net.collect_params().values()) + list(image.collect_params().values())
    return [out, out2] + [p.grad(dev) for p in params if p.grad_req != "null"]


@_case
def case_more_nd_ops(dev):
    a, b = _values(2, 3, 4), _values(2, 3, 4, seed=1)

    def ops(x, y):
        return [mx.nd.smooth_l1(x * 3), mx.npx.activation(x, "sigmoid"), mx.npx.leaky_relu(x, slope=0.2),
                mx.npx.batch_flatten(x), mx.npx.fully_connected(x, y[0], num_hidden=3, flatten=False),
                mx.npx.layer_norm(x, y[0, 0], y[1, 0]), mx.npx.reshape(x, (-2, -1)), mx.npx.relu6(x * 9),
                mx.nd.rcbrt(x + 2), mx.nd.degrees(x), mx.nd.radians(x), mx.nd.contrib.div_sqrt_dim(x),
                mx.nd.broadcast_like(x[:1], y), mx.nd.reshape_like(x, y.reshape((4, 6))),
                mx.nd.slice_like(x, y[:1, :2]),
                mx.nd.max_axis(x, axis=1), mx.nd.norm(x, ord=1, axis=2), mx.np.flip(x, 0), mx.np.ravel(x), x.T,
                mx.nd.softmax(x, length=_arr(dev, [[1, 2, 3], [4, 1, 2]]), use_length=True, axis=-1),
                mx.nd.UpSampling(x.reshape((1, 2, 3, 4)), scale=2, sample_type="nearest"), mx.nd.square(x),
                mx.nd.broadcast_mul(x, y[:, :1]), mx.nd.elemwise_add(x, y), mx.np.expm1(x), mx.np.arccos(x * 0.5),
                mx.np.sinh(x), mx.np.cosh(x), mx.np.arctanh(x * 0.5), mx.np.arcsinh(x), mx.np.tan(x),
                mx.np.log2(x + 2), mx.np.log10(x + 2)]

    return _grads(dev, ops, a, b)


@_case
def case_higher_order_gradients(dev):
    a, w = _values(3, 4), _values(5, 4, seed=1)
    x, table = _arr(dev, a), _arr(dev, w)
    x.attach_grad()
    table.attach_grad()
    with autograd.record():
        y = (mx.nd.sort(x, axis=1) * x).sum() + (x[_arr(dev, [2, 0])] ** 3).sum()
        y = y + (mx.nd.take(table, _arr(dev, [4, 1])) ** 2).sum() + (mx.nd.pick(x, _arr(dev, [0, 3, 1])) ** 2).sum()
        y = y + mx.nd.softmax_cross_entropy(x, _arr(dev, [1, 0, 3])) + mx.nd.Embedding(
            _arr(dev, [0, 0, 2]), table, 5, 4).sum() ** 2 + mx.np.take_along_axis(x, _arr(dev, [[1], [2], [0]],
                                                                                               dtype=np.int64),
                                                                                  1).sum() ** 2
        dx, dw = autograd.grad(y, [x, table], create_graph=True)
        z = (dx * dx).sum() + (dw * dw).sum()
    z.backward()
    return [y, dx, dw, x.grad, table.grad]


class _Cube(autograd.Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x * x

    def backward(self, dy):
        x, = self.saved_tensors
        return dy * 3 * x * x


@_case
def case_function_and_sparse(dev):
    a = _values(4, 3)
    outs = _grads(dev, lambda x: [_Cube()(x), mx.nd.Embedding(_arr(dev, [3, 3, 0]), x, 4, 3, sparse_grad=True)], a)
    dense = _arr(dev, np.array([[0, 0, 0], [1, 2, 3], [0, 0, 0], [4, 5, 6]], dtype=np.float32))
    sparse = dense.tostype("row_sparse")
    return outs + [sparse.data, sparse.indices, sparse.tostype("default")]


@_case
def case_rnn_more_cells(dev):
    mx.random.seed(16)
    rnn = gluon.rnn
    stack = rnn.SequentialRNNCell()
    stack.add(rnn.GRUCell(3, input_size=3))
    stack.add(rnn.ResidualCell(rnn.RNNCell(3, input_size=3)))
    stack.add(rnn.ZoneoutCell(rnn.LSTMCell(3, input_size=3), zoneout_outputs=0.0, zoneout_states=0.0))
    bidir = rnn.BidirectionalCell(rnn.GRUCell(2, input_size=3), rnn.LSTMCell(2, input_size=3))
    for cell in (stack, bidir):
        cell.initialize(ctx=dev)
    x = _arr(dev, _values(2, 4, 3), dtype=np.float32)
    with autograd.record():
        out1, _ = stack.unroll(4, x, layout="NTC", merge_outputs=True)
        out2, _ = bidir.unroll(4, x, layout="NTC", merge_outputs=True,
                               valid_length=_arr(dev, [3, 4], dtype=np.float32))
        (out1.sum() + out2.sum()).backward()
    params = list(stack.collect_params().values()) + list(bidir.collect_params().values())
    return [out1, out2] + [p.grad(dev) for p in params]


# -- losses ---------------------------------------------------------------------------------------
def _loss_inputs(dev: mx.Device) -> tuple[np.ndarray, dict[str, Tensor]]:
    labels = {"class": _arr(dev, [1.0, 0.0, 3.0]), "sign": _arr(dev, [[1.0, -1.0, 1.0, -1.0]] * 3),
              "binary": _arr(dev, [[1.0, 0.0, 1.0, 0.0]] * 3), "dense": _arr(dev, _values(3, 4, seed=5)),
              "prob": _arr(dev, np.full((3, 4), 0.25)), "weight": _arr(dev, [[0.5], [1.0], [2.0]]),
              "cos": _arr(dev, [1.0, -1.0, 1.0])}
    return _values(3, 4), labels


@_case
def case_losses(dev):
    pred, lab = _loss_inputs(dev)
    L = gluon.loss

    def ops(p):
        return [L.L2Loss()(p, lab["dense"], lab["weight"]), L.L1Loss()(p, lab["dense"]),
                L.SigmoidBCELoss()(p, lab["binary"], lab["weight"]),
                L.SigmoidBCELoss()(p, lab["binary"], pos_weight=_arr(dev, [1.0, 2.0, 1.0, 0.5])),
                L.SigmoidBCELoss(from_sigmoid=True)(mx.nd.sigmoid(p), lab["binary"]),
                L.SoftmaxCELoss()(p, lab["class"]), L.SoftmaxCELoss(sparse_label=False)(p, lab["prob"]),
                L.KLDivLoss()(mx.nd.log_softmax(p), lab["prob"]), L.KLDivLoss(from_logits=False)(p, lab["prob"]),
                L.HuberLoss()(p * 3, lab["dense"]), L.HingeLoss()(p, lab["sign"]),
                L.SquaredHingeLoss()(p, lab["sign"]), L.LogisticLoss()(p, lab["sign"]),
                L.LogisticLoss(label_format="binary")(p, lab["binary"]),
                L.TripletLoss()(p, lab["dense"], lab["prob"]), L.PoissonNLLLoss()(p, lab["prob"]),
                L.PoissonNLLLoss(from_logits=False, compute_full=True)(mx.nd.exp(p), lab["prob"] * 4),
                L.CosineEmbeddingLoss()(p, lab["dense"], lab["cos"]), L.SDMLLoss()(p, lab["dense"])]

    return _grads(dev, ops, pred)


@_case
def case_ctc_loss(dev):
    pred = _values(2, 5, 4)
    label = _arr(dev, [[0, 1, -1], [2, 2, 1]])
    return _grads(dev, lambda p: [gluon.loss.CTCLoss()(p, label),
                                  gluon.loss.CTCLoss(layout="TNC")(mx.nd.swapaxes(p, 0, 1), label,
                                                                    _arr(dev, [5, 4]), _arr(dev, [2, 3]))], pred)


# -- the tests ------------------------------------------------------------------------------------
def _flatten(values: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for v in values:
        flat.extend(_flatten(list(v)) if isinstance(v, (list, tuple)) else [v])
    return flat


def _on_device(name: str, i: int, value: Any, dev: mx.Device) -> np.ndarray:
    """``value`` (a result of the case) as a NumPy array, after checking it lives on ``dev``."""
    assert isinstance(value, Tensor), f"{name}: result {i} is a {type(value).__name__}, not a Tensor"
    assert value.device == dev, f"{name}: result {i} is on {value.device}, not on {dev}"
    if dev.is_gpu:
        assert value.array.device.id == dev.device_id, f"{name}: result {i}'s data is on GPU {value.array.device.id}"
    return value.asnumpy()


@pytest.mark.parametrize("name", sorted(_CASES))
def test_op_family_on_the_second_gpu_matches_cpu(name):
    case = _CASES[name]
    expected = [_on_device(name, i, v, mx.cpu(0)) for i, v in enumerate(_flatten(case(mx.cpu(0))))]
    with mx.gpu(0):
        got = [_on_device(name, i, v, mx.gpu(1)) for i, v in enumerate(_flatten(case(mx.gpu(1))))]
        assert mx.current_device() == mx.gpu(0)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert (g.dtype, g.shape) == (e.dtype, e.shape), f"{name}: result {i}: {g.dtype}{g.shape} on gpu(1)"
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: result {i}")


def test_random_draws_land_on_the_device_asked_for():
    mx.random.seed(3)
    dev = mx.gpu(1)
    with mx.gpu(0):
        draws = [mx.nd.random.uniform(-1, 2, shape=(50,), ctx=dev), mx.nd.random.normal(0, 1, shape=(50,), ctx=dev),
                 mx.nd.random.randint(0, 5, shape=(50,), ctx=dev), mx.np.random.uniform(size=(50,), device=dev),
                 mx.np.random.normal(size=(50,), device=dev), mx.np.random.randint(3, size=(50,), device=dev),
                 mx.np.random.rand(50, device=dev), mx.nd.random.randn(50, ctx=dev),
                 mx.random.uniform(shape=(50,), device=dev), mx.random.shuffle(mx.np.arange(50, device=dev))]
        values = [_on_device("random", i, d, dev) for i, d in enumerate(draws)]
    assert values[0].min() >= -1 and values[0].max() < 2
    assert set(np.unique(values[2])) <= set(range(5)) and set(np.unique(values[5])) <= set(range(3))
    np.testing.assert_array_equal(np.sort(values[-1]), np.arange(50))


def test_dropout_on_the_second_gpu():
    dev = mx.gpu(1)
    data = _values(4, 50) + 2.0
    with mx.gpu(0):
        x = _arr(dev, data)
        x.attach_grad()
        layer = gluon.nn.Dropout(0.5)
        with autograd.record():
            y = mx.nd.Dropout(x, p=0.3) + layer(x) + mx.npx.dropout(x, p=0.5, axes=(1,))
        y.backward()
        out, grad = _on_device("dropout", 0, y, dev), _on_device("dropout", 1, x.grad, dev)
    # each of the three terms is 0 or x / (1 - p); the gradient is the sum of the kept scales
    np.testing.assert_allclose(out, data * grad, rtol=1e-6)
    kept = [0.0, 1 / 0.7]
    scales = {round(a + b + c, 4) for a in kept for b in (0.0, 2.0) for c in (0.0, 2.0)}
    assert {round(g, 4) for g in np.unique(grad)} <= scales


def test_attach_grad_puts_the_buffer_on_the_tensor_device():
    with mx.gpu(0):
        x = mx.nd.array([1.0, 2.0, 3.0], ctx=mx.gpu(1))
        x.attach_grad()
        assert x.grad.device == mx.gpu(1) and x.grad.array.device.id == 1
        with autograd.record():
            y = (x * x).sum()
        y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, 4.0, 6.0])
    with mx.gpu(0):
        z = mx.nd.ones((2, 2), ctx=mx.gpu(1))
        z.attach_grad(stype="row_sparse")
        with autograd.record():
            w = (z * 3).sum()
        w.backward()
    np.testing.assert_allclose(z.grad.tostype("default").asnumpy(), np.full((2, 2), 3.0))


@pytest.mark.parametrize("gpu", [0, 1])
def test_take_pick_and_embedding_take_ids_that_live_on_a_gpu(gpu):
    dev = mx.gpu(gpu)
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    w = mx.nd.array(table, ctx=dev)
    w.attach_grad()
    with autograd.record():
        taken = mx.nd.take(w, mx.nd.array([3, 0, 3], ctx=dev))
        picked = mx.nd.pick(w, mx.nd.array([2, 0, 1, 5], ctx=dev), axis=1)
        looked_up = mx.nd.Embedding(mx.nd.array([[1], [1]], ctx=dev), w, input_dim=4, output_dim=3)
        total = taken.sum() + picked.sum() + looked_up.sum()
    total.backward()
    np.testing.assert_array_equal(taken.asnumpy(), table[[3, 0, 3]])
    np.testing.assert_array_equal(picked.asnumpy(), [2.0, 3.0, 7.0, 11.0])
    np.testing.assert_array_equal(looked_up.asnumpy(), table[[[1], [1]]])
    expected = np.zeros((4, 3), np.float32)
    expected[[3, 0]] += [[2.0] * 3, [1.0] * 3]
    expected[[0, 1, 2, 3], [2, 0, 1, 2]] += 1.0
    expected[1] += 2.0
    np.testing.assert_array_equal(w.grad.asnumpy(), expected)
