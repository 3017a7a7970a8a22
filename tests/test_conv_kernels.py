"""kernels/conv.cu against its NumPy twins in mxlite.ops.conv, bit for bit: im2col, col2im, the max-pool backward.

The twins are the NumPy code the conv module runs with ``MXLITE_CPU_KERNELS=numpy``: ``_ConvGeom.im2col``
(a copy of the strided window view), ``_scatter_taps`` (one strided add per tap) and ``_max_pool``'s
backward (first maximum per tap, multiplied into the gradient). On CPU devices the serial host
build (one thread per block) must give their bits exactly, in every column layout, for 1-, 2- and
3-D geometries with strides, dilations, padding, groups, overlapping and tiling windows, in float32,
float64 and float16, with -0.0, subnormals, infinities and NaN among the values. The GPU-marked
tests run the same kernels with real block sizes (emulated GPUs where there is no GPU) against the
twins.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.device.host_buffers import HostBuffers
from mxlite.ops import _conv_kernels as ck
from mxlite.ops import conv as nn_ops

DTYPES = [np.float32, np.float64, np.float16]
DTYPE_IDS = ["f32", "f64", "f16"]

# (n, c, spatial, kernel, stride, pad, dilation): overlapping and tiling windows, 1-D to 3-D
GEOMETRIES = {
    "1d-k3-p1": (2, 3, (11,), (3,), (1,), (1,), (1,)),
    "1d-tiles": (3, 2, (9,), (2,), (2,), (0,), (1,)),
    "1d-s2-d3": (1, 2, (20,), (3,), (2,), (2,), (3,)),
    "2d-k3-p1": (2, 3, (7, 6), (3, 3), (1, 1), (1, 1), (1, 1)),
    "2d-tiles": (2, 2, (8, 8), (2, 2), (2, 2), (0, 0), (1, 1)),
    "2d-mixed": (1, 4, (9, 10), (3, 2), (2, 3), (1, 0), (2, 1)),
    "2d-large": (2, 2, (10, 9), (3, 3), (1, 1), (1, 1), (1, 1)),   # >= 64 positions: the per-sample layout
    "2d-s3-gap": (2, 1, (10, 11), (2, 2), (3, 3), (0, 1), (1, 1)),  # stride > kernel: elements no tap reaches
    "3d-mixed": (2, 2, (5, 6, 4), (3, 2, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2)),
    "3d-tiles": (1, 3, (4, 4, 4), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)),
    "2d-wide-pad": (1, 2, (4, 5), (2, 3), (1, 2), (3, 2), (1, 1)),  # whole lines and windows of padding
    # "same" convolutions, each tap one shifted copy in the host build: shifts of up to 2, rows of padding
    # only above and below or none, and shifts as wide as a whole row
    "2d-k5-p2": (2, 2, (6, 7), (5, 5), (1, 1), (2, 2), (1, 1)),
    "2d-h0-w1": (2, 2, (6, 5), (3, 3), (1, 1), (0, 1), (1, 1)),
    "2d-k1x3": (1, 3, (4, 9), (1, 3), (1, 1), (0, 1), (1, 1)),
    "2d-narrow": (1, 2, (5, 2), (3, 5), (1, 1), (1, 2), (1, 1)),
}


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same_bits(got, want, what):
    """Bit for bit, NaNs included, except which NaN a sum of two different NaNs gives.

    Where two NaNs meet (NaN + NaN, or inf*0's default NaN, 0xffc00000 on x86, plus a quiet NaN from
    the data), x86 returns one operand's NaN, and which one depends on the operand order each
    compiler picks for a commutative add (NumPy's SIMD loop vs g++'s): IEEE leaves it open. Every
    other value, -0.0 and single NaNs included, must have the twin's bits.
    """
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan], err_msg=what)


def _values(rng, shape, dtype, special=True):
    """Normal values, with -0.0, +0.0, a subnormal, +-inf and NaN sprinkled in when ``special``."""
    a = rng.standard_normal(shape).astype(dtype)
    if special and a.size >= 8:
        flat = a.reshape(-1)
        tiny = np.finfo(dtype).smallest_subnormal
        picks = rng.choice(flat.size, 8, replace=False)
        flat[picks] = np.array([-0.0, 0.0, tiny, -tiny, np.inf, -np.inf, np.nan, -3 * tiny], dtype)
    return a


def _conv_geom(case):
    n, c, spatial, kernel, stride, pad, dilation = case
    out_sp = tuple((s + 2 * p - d * (k - 1) - 1) // t + 1
                   for s, p, d, k, t in zip(spatial, pad, dilation, kernel, stride))
    return nn_ops._ConvGeom(n, c, spatial, 4, kernel, stride, pad, dilation, 1, out_sp)


@pytest.fixture
def mode(monkeypatch):
    """``mode('compiled')`` / ``mode('numpy')``: how CPU devices move conv data from now on."""
    def set_mode(value):
        monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, value)
    return set_mode


# -- the serial host build (CPU devices) against the twins ---------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_im2col_and_col2im_match_the_twins_in_both_layouts(name, dtype, mode):
    geo = _conv_geom(GEOMETRIES[name])
    rng = np.random.default_rng(1)
    x = _values(rng, (geo.n, geo.c) + geo.spatial, dtype)  # the kernels pad it, the twin pads a copy
    dcols_shape = (geo.n, 1, geo.kg, geo.l)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf in the twin's sums
        for merged in (False, True):
            geo.merged = merged
            dcols = _values(rng, (1, geo.kg, geo.n * geo.l) if merged else dcols_shape, dtype)
            results = {}
            for m in ("numpy", "compiled"):
                mode(m)
                results[m] = (geo.im2col(np, x), geo.col2im(np, dcols))
            what = f"{name}, {'merged' if merged else 'per-sample'}"
            _same_bits(results["compiled"][0], results["numpy"][0], f"im2col, {what}")
            _same_bits(results["compiled"][1], results["numpy"][1], f"col2im, {what}")


def test_col2im_writes_a_block_into_out_and_keeps_negative_zero(mode):
    """input_grad's per-sample blocks go into slices of one array; a lone tap keeps -0.0 as the twin's assignment."""
    geo = _conv_geom(GEOMETRIES["2d-tiles"])
    geo.merged = False
    rng = np.random.default_rng(2)
    dcols = _values(rng, (geo.n, 1, geo.kg, geo.l), np.float32)
    dcols.reshape(-1)[:5] = -0.0
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        out = np.zeros((geo.n + 1, geo.c) + geo.spatial, np.float32)
        got = geo.col2im(np, dcols[:1], out=out[1:2])
        assert np.shares_memory(got, out)
        results[m] = out
    _same_bits(results["compiled"], results["numpy"], "col2im into out")
    assert np.signbit(results["compiled"]).any()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_lone_nan_keeps_its_sign_and_payload(dtype, mode):
    """Where only one NaN reaches an element, the kernel's sum carries its exact bits, as the twin's does."""
    geo = _conv_geom(GEOMETRIES["2d-k3-p1"])
    rng = np.random.default_rng(10)
    dcols = rng.standard_normal((1, geo.kg, geo.n * geo.l)).astype(dtype)
    nan_bits = {np.float16: 0xFE12, np.float32: 0xFFC01234, np.float64: 0xFFF8000000001234}[dtype]
    dcols.reshape(-1)[17] = np.array(nan_bits, _bits(dcols).dtype).view(dtype)
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        results[m] = _bits(geo.col2im(np, dcols))
    np.testing.assert_array_equal(results["compiled"], results["numpy"])
    assert (results["compiled"] == nan_bits).sum() == 1


def _conv_run(fn, arrays, head):
    tensors = [mx.array(a) for a in arrays]
    for t in tensors:
        t.attach_grad()
    with mx.autograd.record():
        y = fn(*tensors)
    y.backward(mx.array(head))
    return [y.asnumpy()] + [t.grad.asnumpy() for t in tensors]


CONV_CASES = {
    "conv2d groups=2 s2 p1": (lambda x, w: nn_ops.conv(x, w, stride=2, padding=1, groups=2), (2, 4, 7, 7),
                              (6, 2, 3, 3)),
    "conv2d dilation 2 p2 (per-sample)": (lambda x, w: nn_ops.conv(x, w, padding=2, dilation=2), (2, 3, 12, 12),
                                          (5, 3, 3, 3)),
    "conv1d k5 p2": (lambda x, w: nn_ops.conv(x, w, padding=2), (3, 4, 70), (2, 4, 5)),
    "conv3d s(1,2,1) groups=3": (lambda x, w: nn_ops.conv(x, w, stride=(1, 2, 1), padding=1, groups=3),
                                 (2, 3, 4, 5, 6), (3, 1, 3, 2, 2)),
    "conv_transpose2d s2 p1": (lambda x, w: nn_ops.conv_transpose(x, w, stride=2, padding=1), (2, 4, 5, 5),
                               (4, 3, 4, 4)),
    "conv_transpose1d s3 d2 adj1": (lambda x, w: nn_ops.conv_transpose(x, w, stride=3, dilation=2, output_padding=1),
                                    (2, 2, 6), (2, 3, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_convolutions_give_the_twins_bits(name, dtype, mode):
    """Forward, input and weight gradients of whole convolutions: the kernels change no bit."""
    fn, x_shape, w_shape = CONV_CASES[name]
    rng = np.random.default_rng(3)
    arrays = [_values(rng, x_shape, dtype, special=False), (0.3 * _values(rng, w_shape, dtype, special=False))]
    mode("numpy")
    head = _values(rng, fn(*[mx.array(a) for a in arrays]).shape, dtype, special=False)
    want = _conv_run(fn, arrays, head)
    mode("compiled")
    got = _conv_run(fn, arrays, head)
    for what, a, b in zip(("output", "x grad", "w grad"), got, want):
        _same_bits(a, b, f"{name} {what}")


# (pool_size, strides, padding, ceil_mode, input shape)
POOL_CASES = {
    "1d k3 s1 (overlap)": (3, 1, 0, False, (2, 3, 10)),
    "1d k2 tiles": (2, 2, 0, False, (2, 2, 9)),
    "2d k2 tiles": (2, 2, 0, False, (2, 3, 8, 8)),
    "2d k2 tiles 6x10": (2, 2, 0, False, (3, 5, 6, 10)),  # the one-thread 2x2 form, an odd number of columns
    "2d k2 s2 floor 7x9": (2, 2, 0, False, (2, 3, 7, 9)),  # windows that leave a margin: the general form
    "2d k3 s2 p1 (overlap)": (3, 2, 1, False, (2, 3, 7, 7)),
    "2d (3,2) s(1,3) ceil": ((3, 2), (1, 3), (1, 0), True, (1, 2, 6, 8)),
    "3d k2 s1 (overlap)": (2, 1, 0, False, (1, 2, 4, 3, 5)),
    "3d k(1,2,2) tiles p(0,1,1)": ((1, 2, 2), (1, 2, 2), (0, 1, 1), False, (2, 2, 3, 4, 4)),
}


def _pool_head(x, kw, rng):
    """An output gradient for max_pool(x, **kw): normal values with -0.0, subnormals, infinities and a NaN."""
    return _values(rng, nn_ops.max_pool(mx.array(x), **kw).shape, x.dtype)


def _pool_run(x_data, head, kw):
    x = mx.array(x_data)
    x.attach_grad()
    with mx.autograd.record():
        y = nn_ops.max_pool(x, **kw)
    y.backward(mx.array(head))
    return y.asnumpy(), x.grad.asnumpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(POOL_CASES))
def test_max_pool_gives_the_twins_bits(name, dtype, mode):
    """Ties (small integers), NaN and infinite inputs, and gradients with -0.0, inf and NaN (g * 0 is NaN)."""
    pool, strides, pad, ceil, shape = POOL_CASES[name]
    kw = {"pool_size": pool, "strides": strides, "padding": pad, "ceil_mode": ceil}
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # many tied maxima
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    head = _pool_head(x, kw, rng)
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # inf * 0 and inf - inf in the twin
            results[m] = _pool_run(x, head, kw)
    _same_bits(results["compiled"][0], results["numpy"][0], f"{name} output")
    _same_bits(results["compiled"][1], results["numpy"][1], f"{name} input gradient")


def test_what_the_kernels_do_not_take_stays_numpy(mode, monkeypatch):
    """Four spatial axes and integer max pooling run the NumPy code even in compiled mode."""
    mode("compiled")
    assert ck.enabled(np, np.float32, 3) and not ck.enabled(np, np.float32, 4) and not ck.enabled(np, np.int32, 2)

    def no_kernels(*args, **kwargs):
        raise AssertionError("no kernel expected here")

    monkeypatch.setattr(ck, "_launch", no_kernels)
    rng = np.random.default_rng(7)
    x = mx.array(rng.standard_normal((1, 2, 3, 3, 3, 3)).astype(np.float32))
    w = mx.array(rng.standard_normal((2, 2, 2, 2, 2, 2)).astype(np.float32))
    assert nn_ops.conv(x, w).shape == (1, 2, 2, 2, 2, 2)
    xi = mx.array(rng.integers(0, 9, (1, 1, 4, 4)).astype(np.int32))
    np.testing.assert_array_equal(nn_ops.max_pool2d(xi).asnumpy(), xi.asnumpy().reshape(2, 2, 2, 2).max(axis=(1, 3))
                                  .reshape(1, 1, 2, 2))


def test_numpy_mode_launches_nothing(mode, monkeypatch):
    mode("numpy")
    monkeypatch.setattr(ck, "_launch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("launched")))
    x = mx.array(np.ones((1, 1, 4, 4), np.float32))
    x.attach_grad()
    with mx.autograd.record():
        y = nn_ops.max_pool2d(nn_ops.conv2d(x, mx.array(np.ones((1, 1, 3, 3), np.float32)), padding=1))
    y.backward()
    assert x.grad.asnumpy().sum() > 0


def test_geometry_packs_fewer_axes_as_leading_ones():
    assert ck.geometry(2, 3, (9,), (3,), (2,), (1,), (4,)) == (2, 3, 1, 1, 9, 1, 1, 3, 1, 1, 4, 1, 1, 2, 1, 1, 1,
                                                                0, 0, 0)
    assert ck.geometry(2, 3, (7, 9), (3, 3), (1, 2), (1, 1), (7, 5), (1, 2))[-6:] == (1, 1, 1, 0, 1, 2)
    with pytest.raises(ValueError, match="1 to 3 spatial axes"):
        ck.geometry(1, 1, (5,) * 4, (1,) * 4, (1,) * 4, (1,) * 4, (5,) * 4)


# -- GPUs (emulated where there is none): the kernels with real block sizes against the twins ----------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")
GPU_GEOMETRIES = ["1d-s2-d3", "2d-k3-p1", "2d-tiles", "2d-s3-gap", "3d-mixed", "2d-wide-pad"]
GPU_THREADS = [None, 1, 7, 64]  # default (a multiple of 32 sized to the plane), one thread, odd, several warps


def _on_gpu(a):
    device = mx.gpu(0)
    with device.use():
        return device.xp.asarray(a)


def _host(a):
    with mx.gpu(0).use():
        return a.get()


def _same_bits_or_nan(got, want, what):
    """:func:`_same_bits` for a GPU result (there, any NaN is the canonical one); ``got`` on the GPU or the host."""
    got = _host(got).reshape(want.shape) if not isinstance(got, np.ndarray) else got
    _same_bits(got, want, what)


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", GPU_THREADS, ids=str)
@pytest.mark.parametrize("name", GPU_GEOMETRIES)
def test_gpu_im2col_and_col2im_match_the_twins(name, threads, mode):
    geo = _conv_geom(GEOMETRIES[name])
    rng = np.random.default_rng(8)
    dtype = np.float32 if threads != 7 else np.float16
    x = _values(rng, (geo.n, geo.c) + geo.spatial, dtype)
    accumulate = nn_ops._overlapping(geo.kernel, geo.stride, geo.dilation, geo.out_sp)
    mode("numpy")
    for layout in ("per_sample", "merged"):
        geo.merged = layout == "merged"
        dcols = _values(rng, (1, geo.kg, geo.n * geo.l) if geo.merged else (geo.n, 1, geo.kg, geo.l), dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want_cols, want_img = geo.im2col(np, x), geo.col2im(np, dcols)
        got_cols = ck.im2col(mx.gpu(0).xp, _on_gpu(x), geo.kernel_geometry(geo.n), layout, threads=threads)
        got_img = ck.col2im(mx.gpu(0).xp, _on_gpu(dcols), geo.kernel_geometry(geo.n), layout, accumulate,
                            threads=threads)
        _same_bits_or_nan(got_cols, want_cols, f"im2col {name} {layout}")
        _same_bits_or_nan(got_img, want_img, f"col2im {name} {layout}")


def test_host_buffers_hand_out_only_what_nobody_holds():
    pool = HostBuffers(per_shape=2, shapes=2, min_bytes=0)
    a = pool.empty((3, 4), np.float32)
    b = pool.empty((3, 4), np.float32)
    assert not np.shares_memory(a, b)
    view = a.reshape(12)  # a view holds its base
    del a
    c = pool.empty((3, 4), np.float32)
    assert not np.shares_memory(c, view) and not np.shares_memory(c, b)  # a third, not kept
    del view
    d = pool.empty((3, 4), np.float32)
    assert d.shape == (3, 4) and d.dtype == np.float32 and d.flags.c_contiguous
    pool.empty((5,), np.float64)
    pool.empty((6,), np.float64)  # the least recently used shape is dropped
    assert len(pool._buffers) == 2 and ((3, 4), np.dtype(np.float32)) not in pool._buffers


def test_host_buffers_keep_within_their_byte_budget_and_pass_small_arrays_by():
    pool = HostBuffers(per_shape=2, shapes=8, max_bytes=4000, min_bytes=100)
    small = pool.empty((10,), np.float32)  # 40 bytes: not pooled
    assert small.shape == (10,) and not pool._buffers
    held = [pool.empty((250,), np.float32) for _ in range(2)]  # 1000 bytes each: both kept
    assert pool._bytes == 2000
    held.append(pool.empty((300,), np.float32))
    held.append(pool.empty((300,), np.float32))  # 4400 bytes: the oldest shape goes
    assert pool._bytes <= 4000 and ((250,), np.dtype(np.float32)) not in pool._buffers
    big = pool.empty((600,), np.float32)  # two of these would not fit: not kept
    assert big.shape == (600,) and pool._buffers[((600,), np.dtype(np.float32))] == [] and pool._bytes <= 4000


def test_convolutions_alive_together_keep_their_own_columns(mode):
    """Two recorded convolutions of one shape, both backward after both forwards: reused column buffers
    must not mix them (the gradients equal the twin's)."""
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((2, 3, 9, 9)).astype(np.float32) for _ in range(2)]
    w_data = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        w = mx.array(w_data)
        w.attach_grad()
        with mx.autograd.record():
            ys = [nn_ops.conv2d(mx.array(x), w, padding=1) for x in xs]
            loss = (ys[0] * ys[0]).sum() + (ys[1] * 2).sum()
        loss.backward()
        results[m] = w.grad.asnumpy()
    _same_bits(results["compiled"], results["numpy"], "weight gradient of two convolutions")


# -- kernels/bias_act.cu: a convolution's bias and ReLU in one pass ----------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bias_relu_matches_its_twin(dtype, mode):
    """NaN stays NaN, -0.0 and negative sums become +0, subnormals and infinities as NumPy's add makes them."""
    rng = np.random.default_rng(12)
    y = _values(rng, (3, 5, 7, 6), dtype)
    bias = _values(rng, (5,), dtype, special=False)
    bias[1] = -0.0
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = ck.bias_relu(np, y.copy(), bias)
        results[m] = got
    _same_bits(results["compiled"], results["numpy"], "bias_relu")
    got = results["compiled"]
    assert (got == 0).any() and not np.signbit(got[~np.isnan(got)]).any()


def _conv_layer_run(x_data, weight, bias, channels_last=False, create_graph=False):
    net = mx.gluon.nn.Conv2D(4, 3, padding=1, activation="relu", in_channels=3)
    net.initialize()
    net.weight.set_data(mx.nd.array(weight))
    net.bias.set_data(mx.nd.array(bias))
    x = mx.nd.array(x_data)
    x.attach_grad()
    with mx.autograd.record():
        y = net(x)
        loss = (y * y).sum()
    if create_graph:
        (gx,) = mx.autograd.grad(loss, [x], create_graph=True)
        return [y.asnumpy(), gx.asnumpy()]
    loss.backward()
    return [y.asnumpy(), x.grad.asnumpy(), net.weight.grad().asnumpy(), net.bias.grad().asnumpy()]


@pytest.mark.parametrize("create_graph", [False, True], ids=["grad", "create_graph"])
def test_conv2d_relu_layer_fused_gives_the_composed_bits(create_graph, mode, monkeypatch):
    """Conv2D(activation='relu') on a CPU device runs conv_relu (one bias + ReLU pass); its output and
    gradients (first and, through the recorded plain ops, second order) are those of conv2d then relu."""
    from mxlite.gluon.nn import conv_layers

    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = (0.3 * rng.standard_normal((4, 3, 3, 3))).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    mode("compiled")
    calls = []
    real = conv_layers.conv_relu
    monkeypatch.setattr(conv_layers, "conv_relu", lambda *a: calls.append(1) or real(*a))
    fused = _conv_layer_run(x, w, b, create_graph=create_graph)
    assert calls, "the layer did not take the fused path"
    monkeypatch.setattr(conv_layers, "conv_relu", lambda *a: None)
    composed = _conv_layer_run(x, w, b, create_graph=create_graph)
    for i, (a, c) in enumerate(zip(fused, composed)):
        _same_bits(a, c, f"result {i}")
    assert (fused[0] == 0).any() and (fused[0] > 0).any()


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", [None, 1, 7], ids=str)
def test_gpu_bias_relu_matches_its_twin(threads, mode):
    rng = np.random.default_rng(14)
    dtype = np.float32 if threads != 7 else np.float16
    y = _values(rng, (2, 3, 5, 11), dtype)
    bias = _values(rng, (3,), dtype, special=False)
    mode("numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = ck.bias_relu(np, y.copy(), bias)
    got = ck.bias_relu(mx.gpu(0).xp, _on_gpu(y), _on_gpu(bias), threads=threads)
    _same_bits_or_nan(got, want, "bias_relu on a GPU")


def test_max_pool_keeps_the_first_maximum_of_signed_zero_ties(mode):
    """A window of -0.0 and +0.0 gives the first one's value and its gradient, kernel and twin alike."""
    x = np.array([[[[-0.0, 0.0, 0.0, -0.0], [0.0, 0.0, -0.0, -0.0]]]], np.float32)
    head = np.array([[[[2.0, 3.0]]]], np.float32)
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        results[m] = _pool_run(x, head, {"pool_size": 2, "strides": 2})
    for i in range(2):
        _same_bits(results["compiled"][i], results["numpy"][i], f"result {i}")
    np.testing.assert_array_equal(np.signbit(results["compiled"][0]).reshape(-1), [True, False])
    np.testing.assert_array_equal(results["compiled"][1], [[[[2.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]])


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", GPU_THREADS, ids=str)
@pytest.mark.parametrize("name", ["1d k3 s1 (overlap)", "2d k2 tiles", "2d k3 s2 p1 (overlap)", "3d k2 s1 (overlap)"])
def test_gpu_max_pool_kernels_match_the_twins(name, threads, mode):
    """With real block sizes, against the twins (the window copy, _max_pool_twin_forward and the backward):
    max_pool_backward from the forward's tap columns (GPUs), max_pool_forward then max_pool_scatter (CPU
    devices)."""
    pool, strides, pad, ceil, shape = POOL_CASES[name]
    kw = {"pool_size": pool, "strides": strides, "padding": pad, "ceil_mode": ceil}
    dtype = np.float32 if threads != 7 else np.float16
    rng = np.random.default_rng(9)
    x = rng.integers(-3, 4, size=shape).astype(dtype)
    x.reshape(-1)[:2] = [np.nan, -np.inf]
    mode("numpy")
    head = _pool_head(x, kw, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want_out, want = _pool_run(x, head, kw)
    kernel, stride, padv, out_sp, padded = nn_ops._pool_geometry("max_pool", mx.array(x), pool, strides, pad, ceil)
    xpad = nn_ops._pad_to(np, x, padv, padded, -np.inf)
    ones = (1,) * len(kernel)
    geom = ck.geometry(shape[0], shape[1], padded, kernel, stride, ones, out_sp)
    overlap = nn_ops._overlapping(kernel, stride, ones, out_sp)
    xp = mx.gpu(0).xp

    def image_grad(gpad):
        return np.ascontiguousarray(nn_ops._crop(_host(gpad).reshape(xpad.shape), padv, shape[2:]))

    # the forward's tap columns, as _max_pool makes them on a GPU, then max_pool_backward
    cols = np.ascontiguousarray(nn_ops._windows(np, xpad, kernel, stride, ones, out_sp, taps_first=True))
    cols = cols.reshape(math.prod(kernel), -1)
    maxima = cols.max(axis=0)
    gpad = ck.max_pool_backward(xp, _on_gpu(cols), _on_gpu(maxima), _on_gpu(head), geom, overlap, threads=threads)
    _same_bits_or_nan(image_grad(gpad), want, f"max-pool backward {name}")
    # CPU devices' pair, straight from the image
    got_max, first = ck.max_pool_forward(xp, _on_gpu(xpad), geom, threads=threads)
    _same_bits_or_nan(_host(got_max).reshape(want_out.shape), want_out, f"max-pool forward {name}")
    gpad = ck.max_pool_scatter(xp, first, _on_gpu(head), geom, overlap, threads=threads)
    _same_bits_or_nan(image_grad(gpad), want, f"max-pool scatter {name}")
