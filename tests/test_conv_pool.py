"""N-D convolution, transposed convolution and pooling: gradient checks and the Gluon layers.

Every primitive is checked in float64 against central finite differences (``tests/gradcheck.py``,
eps 1e-6, rtol 1e-5, atol 1e-6) and its forward against a direct loop written independently here.
Each convolution case runs in both GEMM layouts (per-sample and merged; ``_PER_SAMPLE_MIN`` forced)
so the per-shape choice cannot hide a wrong branch.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import conv as F
from tests.gradcheck import check_grad

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1.0, 1.0, size=shape)


def distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.1 - n * 0.05).reshape(shape)


# -- references -----------------------------------------------------------------------------------
def naive_conv(x, w, b, stride, pad, dil, groups):
    n, c, *sp = x.shape
    co, cg, *k = w.shape
    nd = len(sp)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out_sp = [(s + 2 * p - d * (kk - 1) - 1) // t + 1 for s, p, d, kk, t in zip(sp, pad, dil, k, stride)]
    out = np.zeros((n, co, *out_sp))
    per = co // groups
    for o in range(co):
        g = o // per
        for pos in itertools.product(*map(range, out_sp)):
            for tap in itertools.product(*map(range, k)):
                idx = tuple(q * t + kk * d for q, t, kk, d in zip(pos, stride, tap, dil))
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]  # (n, cg)
                out[(slice(None), o) + pos] += patch @ w[(o, slice(None)) + tap]
        if b is not None:
            out[:, o] += b[o]
    assert out.ndim == nd + 2
    return out


def naive_conv_transpose(x, w, b, stride, pad, adj, dil, groups):
    n, c, *sp = x.shape
    _, cog, *k = w.shape
    cig = c // groups
    full = [(s - 1) * t + d * (kk - 1) + 1 + a for s, t, d, kk, a in zip(sp, stride, dil, k, adj)]
    y = np.zeros((n, cog * groups, *full))
    for ci in range(c):
        g = ci // cig
        for pos in itertools.product(*map(range, sp)):
            for tap in itertools.product(*map(range, k)):
                idx = tuple(q * t + kk * d for q, t, kk, d in zip(pos, stride, tap, dil))
                y[(slice(None), slice(g * cog, (g + 1) * cog)) + idx] += (
                    x[(slice(None), ci) + pos][:, None] * w[(ci, slice(None)) + tap][None, :])
    y = y[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(pad, full))]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * len(sp))
    return y


def naive_pool(x, kernel, stride, pad, ceil_mode, kind, count_include_pad=True):
    n, c, *sp = x.shape
    outs = []
    for size, k, s, p in zip(sp, kernel, stride, pad):
        span = size + 2 * p - k
        outs.append(1 + (-(-span // s) if ceil_mode else span // s))
    out = np.zeros((n, c, *outs))
    for pos in itertools.product(*map(range, outs)):
        lo = [q * s - p for q, s, p in zip(pos, stride, pad)]
        hi = [min(a + k, size + p) for a, k, size, p in zip(lo, kernel, sp, pad)]
        lo0 = [max(a, 0) for a in lo]
        hi0 = [min(h, size) for h, size in zip(hi, sp)]
        window = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo0, hi0))]
        axes = tuple(range(2, 2 + len(sp)))
        if kind == "max":
            out[(slice(None), slice(None)) + pos] = window.max(axis=axes)
        else:
            area = np.prod([h - a for a, h in zip(lo, hi)]) if count_include_pad else window[0, 0].size
            out[(slice(None), slice(None)) + pos] = window.sum(axis=axes) / area
    return out


@pytest.fixture(params=["per-sample", "merged"])
def layout(request, monkeypatch):
    """Force the GEMM layout the convolution would pick by output size (per-sample: input gradient per sample)."""
    monkeypatch.setattr(F, "_PER_SAMPLE_MIN", 0 if request.param == "per-sample" else 10**9)
    monkeypatch.setattr(F, "_DCOLS_BLOCK", 1)
    return request.param


# -- convolution ----------------------------------------------------------------------------------
CONV_CASES = [
    # (x shape, w shape, stride, padding, dilation, groups, bias)
    ((2, 3, 7), (4, 3, 3), (1,), (1,), (1,), 1, True),                       # 1-D
    ((1, 4, 9), (2, 2, 2), (2,), (0,), (2,), 2, False),                      # 1-D strided, dilated, grouped
    ((2, 2, 5, 4), (3, 2, 3, 2), (2, 1), (1, 1), (1, 1), 1, True),           # 2-D
    ((1, 4, 5, 5), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4, True),           # depthwise
    ((1, 2, 6, 6), (3, 2, 2, 2), (2, 2), (0, 0), (1, 1), 1, False),          # windows tile the input
    ((1, 2, 3, 3), (3, 2, 1, 1), (1, 1), (0, 0), (1, 1), 1, True),           # 1x1: no im2col
    ((1, 2, 4, 4, 3), (2, 2, 2, 3, 2), (1, 1, 1), (0, 1, 0), (1, 1, 1), 1, True),  # 3-D
    ((1, 2, 5, 4, 4), (2, 1, 2, 2, 2), (2, 1, 2), (1, 0, 1), (1, 2, 1), 2, False),  # 3-D grouped, mixed
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"x{c[0]}w{c[1]}s{c[2]}p{c[3]}d{c[4]}g{c[5]}")
def test_conv_matches_loops_and_finite_differences(case, layout):
    xs, ws, stride, pad, dil, groups, has_bias = case
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if has_bias else [])

    def fn(x, w, *b):
        return F.conv(x, w, b[0] if b else None, stride=stride, padding=pad, dilation=dil, groups=groups)

    check_grad(fn, inputs, reference=lambda x, w, *b: naive_conv(x, w, b[0] if b else None, stride, pad, dil,
                                                                 groups))


def test_conv_weight_gradient_summed_in_blocks(monkeypatch):
    """The per-sample weight gradient is summed a few samples at a time; blocks of one give the same sums.

    (The input gradient here is made for the whole batch at once: the default block is larger.)
    """
    monkeypatch.setattr(F, "_PER_SAMPLE_MIN", 0)
    monkeypatch.setattr(F, "_WGRAD_BLOCK", 1)
    check_grad(lambda x, w: F.conv(x, w, padding=1), [rand(3, 2, 4, 4), rand(2, 2, 3, 3)],
               reference=lambda x, w: naive_conv(x, w, None, (1, 1), (1, 1), (1, 1), 1))


TRANSPOSE_CASES = [
    # (x shape, w shape, stride, padding, output_padding, dilation, groups, bias)
    ((2, 3, 5), (3, 2, 3), (2,), (1,), (1,), (1,), 1, True),
    ((1, 4, 4), (4, 1, 2), (1,), (0,), (0,), (2,), 2, False),
    ((1, 2, 3, 4), (2, 3, 3, 2), (2, 1), (1, 0), (1, 0), (1, 1), 1, True),
    ((2, 2, 3, 3), (2, 2, 2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1, False),  # no overlap in col2im
    ((1, 2, 3, 3), (2, 3, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, True),   # 1x1
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 3), (1, 2, 1), (0, 1, 1), (0, 1, 0), (1, 1, 1), 2, True),  # 3-D grouped
]


@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: f"x{c[0]}w{c[1]}s{c[2]}p{c[3]}a{c[4]}g{c[6]}")
def test_conv_transpose_matches_loops_and_finite_differences(case, layout):
    xs, ws, stride, pad, adj, dil, groups, has_bias = case
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[1] * groups)] if has_bias else [])

    def fn(x, w, *b):
        return F.conv_transpose(x, w, b[0] if b else None, stride=stride, padding=pad, output_padding=adj,
                                dilation=dil, groups=groups)

    check_grad(fn, inputs, reference=lambda x, w, *b: naive_conv_transpose(x, w, b[0] if b else None, stride, pad,
                                                                           adj, dil, groups))


def test_conv_transpose_is_the_input_gradient_of_conv():
    x, w = rand(2, 3, 6, 5), rand(4, 3, 3, 3)
    xt, wt = mx.array(x), mx.array(w)
    xt.attach_grad()
    g = rand(2, 4, 3, 3)
    with mx.autograd.record():
        y = F.conv(xt, wt, stride=2, padding=1)
    y.backward(mx.array(g))
    back = F.conv_transpose(mx.array(g), wt, stride=2, padding=1, output_padding=(1, 0))
    np.testing.assert_allclose(back.asnumpy(), xt.grad.asnumpy(), rtol=1e-12, atol=1e-12)


def test_conv_float32_close_to_float64():
    x, w = rand(2, 3, 9, 9), rand(5, 3, 3, 3)
    out32 = F.conv(mx.array(x.astype(np.float32)), mx.array(w.astype(np.float32)), padding=1).asnumpy()
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, naive_conv(x, w, None, (1, 1), (1, 1), (1, 1), 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv(mx.ones((2, 3)), mx.ones((1, 3))), "at least one spatial axis"),
    (lambda: F.conv(mx.ones((1, 3, 4)), mx.ones((2, 3, 2, 2))), "same rank"),
    (lambda: F.conv(mx.ones((1, 3, 4)), mx.ones((2, 3, 2)), stride=(1, 1)), "tuple of 1 ints"),
    (lambda: F.conv(mx.ones((1, 3, 2)), mx.ones((2, 3, 3))), "larger than the padded input"),
    (lambda: F.conv_transpose(mx.ones((1, 3, 4)), mx.ones((2, 3, 2))), "expects 2 input channels"),
    (lambda: F.conv_transpose(mx.ones((1, 2, 4)), mx.ones((2, 3, 2)), stride=2, output_padding=2),
     "output_padding"),
    (lambda: F.conv_transpose(mx.ones((1, 2, 4)), mx.ones((2, 3, 2)), mx.ones(4)), r"bias must have shape \(3,\)"),
])
def test_conv_errors_name_the_op_and_shapes(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert str(info.value).startswith(("conv:", "conv_transpose:"))


# -- pooling --------------------------------------------------------------------------------------
POOL_CASES = [
    # (x shape, kernel, stride, padding, ceil_mode)
    ((2, 2, 8), (2,), (2,), (0,), False),
    ((1, 2, 7), (3,), (1,), (1,), False),                        # overlapping, padded
    ((1, 1, 7), (2,), (2,), (0,), True),                         # ceil: last window hangs over
    ((1, 2, 5, 5), (3, 3), (1, 1), (0, 0), False),
    ((1, 2, 6, 7), (3, 3), (2, 2), (1, 1), True),
    ((1, 2, 4, 4, 4), (2, 2, 2), (2, 2, 2), (0, 0, 0), False),
    ((1, 1, 5, 4, 5), (3, 2, 2), (2, 1, 2), (1, 0, 0), True),    # 3-D overlap + ceil + padding
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"x{c[0]}k{c[1]}s{c[2]}p{c[3]}ceil{c[4]}")
def test_max_pool(case):
    xs, k, s, p, ceil = case
    check_grad(lambda x: F.max_pool(x, k, s, p, ceil_mode=ceil), [distinct(*xs)],
               reference=lambda x: naive_pool(x, k, s, p, ceil, "max"))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"x{c[0]}k{c[1]}s{c[2]}p{c[3]}ceil{c[4]}")
def test_avg_pool(case, count_include_pad):
    xs, k, s, p, ceil = case
    check_grad(lambda x: F.avg_pool(x, k, s, p, ceil_mode=ceil, count_include_pad=count_include_pad),
               [rand(*xs)], reference=lambda x: naive_pool(x, k, s, p, ceil, "avg", count_include_pad))


def test_max_pool_ties_go_to_the_first_and_overlaps_accumulate():
    x = mx.array(np.array([[[1.0, 3.0, 3.0, 2.0, 3.0]]]))
    x.attach_grad()
    with mx.autograd.record():
        y = F.max_pool(x, 3, 1)  # windows [1,3,3] [3,3,2] [3,2,3]: maxima at 1, 1, 2
    y.backward()
    np.testing.assert_array_equal(y.asnumpy(), [[[3.0, 3.0, 3.0]]])
    np.testing.assert_array_equal(x.grad.asnumpy(), [[[0.0, 2.0, 1.0, 0.0, 0.0]]])


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 4)])
def test_global_pools(shape):
    axes = tuple(range(2, len(shape)))
    check_grad(F.global_avg_pool, [rand(*shape)], reference=lambda x: x.mean(axis=axes, keepdims=True))
    check_grad(F.global_max_pool, [distinct(*shape)], reference=lambda x: x.max(axis=axes, keepdims=True))


def test_pool_errors():
    with pytest.raises(ValueError, match="max_pool: .*at least one spatial axis"):
        F.max_pool(mx.ones((2, 3)))
    with pytest.raises(ValueError, match="avg_pool: .*larger than the padded input"):
        F.avg_pool(mx.ones((1, 1, 2)), 3)
    with pytest.raises(ValueError, match="pool_size must be an int or a tuple of 3 ints"):
        F.max_pool(mx.ones((1, 1, 4, 4, 4)), (2, 2))
    with pytest.raises(TypeError, match="avg_pool needs a floating-point input"):
        F.avg_pool(mx.zeros((1, 1, 4), dtype="int32"))


# -- gradients written straight into the arena ---------------------------------------------------
def test_weight_gradients_in_place_single_shared_and_add():
    """One consumer: the op writes the arena view; two consumers, or grad_req='add': the engine sums."""
    x = rand(4, 3, 6).astype(np.float32)
    conv = mx.nn.Conv1D(2, 3, in_channels=3)
    dense = mx.nn.Dense(5, in_units=8)
    conv.initialize()
    dense.initialize()
    xt = mx.array(x)
    with mx.autograd.record():
        loss = dense(conv(xt).reshape((4, 8))).sum()
    loss.backward()
    w, b = conv.weight.data().asnumpy(), conv.bias.data().asnumpy()
    dw = dense.weight.data().asnumpy()
    # reference: d loss / d conv output = sum of the dense weight's rows, per output feature
    g_y = np.broadcast_to(dw.sum(axis=0).reshape(1, 2, 4), (4, 2, 4)).astype(np.float64)
    cols = np.stack([x[:, :, t: t + 4] for t in range(3)], axis=2)  # (n, c, k, l)
    np.testing.assert_allclose(conv.weight.grad().asnumpy(), np.einsum("nol,nckl->ock", g_y, cols), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(conv.bias.grad().asnumpy(), g_y.sum(axis=(0, 2)), rtol=1e-4, atol=1e-5)
    y = np.einsum("nckl,ock->nol", cols, w) + b[None, :, None]
    np.testing.assert_allclose(dense.weight.grad().asnumpy(), np.ones((4, 5)).T @ y.reshape(4, 8), rtol=1e-4,
                               atol=1e-4)

    shared = mx.nn.Dense(3, in_units=3, use_bias=False)
    shared.initialize()
    a = rand(2, 3).astype(np.float32)
    with mx.autograd.record():
        out = shared(shared(mx.array(a))).sum()
    out.backward()
    wt = shared.weight.data().asnumpy().astype(np.float64)
    h = a @ wt.T
    expected = np.ones((2, 3)).T @ h + (np.ones((2, 3)) @ wt).T @ a
    np.testing.assert_allclose(shared.weight.grad().asnumpy(), expected, rtol=1e-4, atol=1e-5)

    acc = mx.nn.Dense(2, in_units=3)
    acc.initialize()
    acc.weight.grad_req = "add"
    for _ in range(2):
        with mx.autograd.record():
            acc(mx.array(a)).sum().backward()
    np.testing.assert_allclose(acc.weight.grad().asnumpy(), 2 * np.ones((2, 2)).T @ a, rtol=1e-5, atol=1e-6)


# -- Gluon layers ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layer,x_shape,y_shape,w_shape", [
    (lambda: mx.nn.Conv1D(4, 3, padding=1), (2, 3, 9), (2, 4, 9), (4, 3, 3)),
    (lambda: mx.nn.Conv1D(4, 3, strides=2, dilation=2, groups=2, use_bias=False), (2, 2, 11), (2, 4, 4), (4, 1, 3)),
    (lambda: mx.nn.Conv3D(4, (1, 2, 3), strides=(1, 2, 1)), (1, 2, 3, 5, 5), (1, 4, 3, 2, 3), (4, 2, 1, 2, 3)),
    (lambda: mx.nn.Conv1DTranspose(3, 4, strides=2, padding=1), (2, 5, 6), (2, 3, 12), (5, 3, 4)),
    (lambda: mx.nn.Conv2DTranspose(6, 3, strides=2, output_padding=1, groups=2), (1, 4, 3, 3), (1, 6, 8, 8),
     (4, 3, 3, 3)),
    (lambda: mx.nn.Conv3DTranspose(2, 2, strides=2), (1, 3, 2, 2, 2), (1, 2, 4, 4, 4), (3, 2, 2, 2, 2)),
    (lambda: mx.nn.MaxPool1D(), (2, 3, 9), (2, 3, 4), None),
    (lambda: mx.nn.MaxPool1D(3, 2, 1, ceil_mode=True), (2, 3, 8), (2, 3, 5), None),
    (lambda: mx.nn.MaxPool3D(), (1, 2, 4, 5, 6), (1, 2, 2, 2, 3), None),
    (lambda: mx.nn.AvgPool1D(4, 1), (1, 1, 6), (1, 1, 3), None),
    (lambda: mx.nn.AvgPool3D(3, 2, 1, count_include_pad=False), (1, 1, 5, 5, 5), (1, 1, 3, 3, 3), None),
    (lambda: mx.nn.GlobalMaxPool1D(), (2, 3, 7), (2, 3, 1), None),
    (lambda: mx.nn.GlobalAvgPool1D(), (2, 3, 7), (2, 3, 1), None),
    (lambda: mx.nn.GlobalMaxPool3D(), (2, 3, 2, 3, 4), (2, 3, 1, 1, 1), None),
    (lambda: mx.nn.GlobalAvgPool3D(), (2, 3, 2, 3, 4), (2, 3, 1, 1, 1), None),
])
def test_layers_shapes_and_deferred_weights(layer, x_shape, y_shape, w_shape):
    net = layer()
    net.initialize()
    x = mx.array(rand(*x_shape).astype(np.float32))
    x.attach_grad()
    with mx.autograd.record():
        y = net(x)
        total = y.sum()
    total.backward()
    assert y.shape == y_shape
    assert x.grad.shape == x_shape
    if w_shape is not None:
        assert net.weight.shape == w_shape
        assert net.weight.grad().shape == w_shape


def test_layers_match_the_primitives():
    x = mx.array(rand(2, 4, 5, 5).astype(np.float32))
    net = mx.nn.Conv2DTranspose(3, 3, strides=2, padding=1, activation="relu", in_channels=4)
    net.initialize()
    expected = F.conv_transpose(x, net.weight.data(), net.bias.data(), stride=2, padding=1).asnumpy()
    np.testing.assert_allclose(net(x).asnumpy(), np.maximum(expected, 0), rtol=1e-6)
    pool = mx.nn.AvgPool3D((2, 2, 1), strides=1, padding=(1, 0, 0), ceil_mode=True, count_include_pad=False)
    x3 = mx.array(rand(1, 2, 3, 3, 2).astype(np.float32))
    np.testing.assert_allclose(pool(x3).asnumpy(), naive_pool(x3.asnumpy(), (2, 2, 1), (1, 1, 1), (1, 0, 0), True,
                                                               "avg", False), rtol=1e-6)


@pytest.mark.parametrize("make,error,match", [
    (lambda: mx.nn.Conv1D(4, 3, layout="NHWC"), ValueError, "Conv1D: layout must be 'NCW' or 'NWC'"),
    (lambda: mx.nn.Conv3D(4, (3, 3)), ValueError, "Conv3D: kernel_size must be an int or a tuple of 3 ints"),
    (lambda: mx.nn.Conv1D(3, 3, groups=2), ValueError, "multiple of groups"),
    (lambda: mx.nn.Conv1D(0, 3), ValueError, "channels must be >= 1"),
    (lambda: mx.nn.Conv1DTranspose(4, 3, strides=2, output_padding=2), ValueError, "output_padding"),
    (lambda: mx.nn.MaxPool3D(padding=-1), ValueError, "MaxPool3D: padding must be >= 0"),
    (lambda: mx.nn.AvgPool1D(2.5), TypeError, "AvgPool1D: pool_size must be an integer"),
    (lambda: mx.nn.GlobalAvgPool3D(layout="NCHW"), ValueError, "GlobalAvgPool3D: layout must be 'NCDHW' or 'NDHWC'"),
])
def test_layer_constructor_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_layer_rejects_wrong_rank_and_channels():
    net = mx.nn.Conv1D(2, 3, in_channels=3)
    net.initialize()
    with pytest.raises(ValueError, match=r"Conv1D expects NCW input with 3 dimensions, got shape \(1, 3, 4, 4\)"):
        net(mx.ones((1, 3, 4, 4)))
    with pytest.raises(ValueError, match="expects 3 input channels, but x has 4"):
        net(mx.ones((1, 4, 5)))
    with pytest.raises(ValueError, match="MaxPool1D expects NCW input"):
        mx.nn.MaxPool1D()(mx.ones((1, 2, 4, 4)))


# -- GPUs (emulated where there is none): whole-batch GEMMs, and the batch cut into pieces ---------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


@pytest.fixture(params=["whole", "pieces"])
def gpu_cols(request, monkeypatch):
    """A GPU makes the whole batch's columns at once, or (a 1-byte bound) one sample's at a time."""
    if request.param == "pieces":
        monkeypatch.setattr(F, "_GPU_COLS_BYTES", 1)
    return request.param


def _run_float64(device, fn, inputs, head):
    tensors = [mx.array(a, device=device) for a in inputs]
    for t in tensors:
        t.attach_grad()
    with mx.autograd.record():
        y = fn(*tensors)
    y.backward(mx.array(head, device=device))
    return [y.asnumpy()] + [t.grad.asnumpy() for t in tensors]


def _gpu_against_cpu(fn, inputs, reference):
    """Output and every input gradient on gpu(0) against cpu(0), in float64; the output against ``reference``."""
    head = rand(*fn(*[mx.array(a) for a in inputs]).shape)
    want = _run_float64(mx.cpu(0), fn, inputs, head)
    got = _run_float64(mx.gpu(0), fn, inputs, head)
    np.testing.assert_allclose(got[0], reference(*inputs), rtol=1e-12, atol=1e-12)
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"output {i}" if i == 0 else f"grad {i - 1}")


@gpu
@needs_gpu
@pytest.mark.parametrize("case", CONV_CASES + [((5, 3, 6, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True)],
                         ids=lambda c: f"x{c[0]}w{c[1]}s{c[2]}p{c[3]}d{c[4]}g{c[5]}")
def test_gpu_conv_matches_the_cpu(case, gpu_cols):
    xs, ws, stride, pad, dil, groups, has_bias = case
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if has_bias else [])

    def fn(x, w, *b):
        return F.conv(x, w, b[0] if b else None, stride=stride, padding=pad, dilation=dil, groups=groups)

    _gpu_against_cpu(fn, inputs, lambda x, w, *b: naive_conv(x, w, b[0] if b else None, stride, pad, dil, groups))


@gpu
@needs_gpu
@pytest.mark.parametrize("case", TRANSPOSE_CASES, ids=lambda c: f"x{c[0]}w{c[1]}s{c[2]}p{c[3]}a{c[4]}g{c[6]}")
def test_gpu_conv_transpose_matches_the_cpu(case, gpu_cols):
    xs, ws, stride, pad, adj, dil, groups, has_bias = case
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[1] * groups)] if has_bias else [])

    def fn(x, w, *b):
        return F.conv_transpose(x, w, b[0] if b else None, stride=stride, padding=pad, output_padding=adj,
                                dilation=dil, groups=groups)

    _gpu_against_cpu(fn, inputs, lambda x, w, *b: naive_conv_transpose(x, w, b[0] if b else None, stride, pad, adj,
                                                                        dil, groups))


@gpu
@needs_gpu
def test_gpu_conv_with_four_spatial_axes_uses_the_numpy_column_code():
    """No kernel takes 4 spatial axes: the GPU's whole-batch path makes its columns with the array code."""
    inputs = [rand(2, 2, 3, 3, 2, 3), rand(3, 2, 2, 2, 1, 2)]
    _gpu_against_cpu(lambda x, w: F.conv(x, w, padding=(1, 0, 0, 1)), inputs,
                     lambda x, w: naive_conv(x, w, None, (1,) * 4, (1, 0, 0, 1), (1,) * 4, 1))


@gpu
@needs_gpu
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"x{c[0]}k{c[1]}s{c[2]}p{c[3]}ceil{c[4]}")
def test_gpu_pools_match_the_cpu(case):
    xs, k, s, p, ceil = case
    _gpu_against_cpu(lambda x: F.max_pool(x, k, s, p, ceil_mode=ceil), [distinct(*xs)],
                     lambda x: naive_pool(x, k, s, p, ceil, "max"))
    for include in (True, False):
        _gpu_against_cpu(lambda x, i=include: F.avg_pool(x, k, s, p, ceil_mode=ceil, count_include_pad=i),
                         [rand(*xs)], lambda x, i=include: naive_pool(x, k, s, p, ceil, "avg", i))
