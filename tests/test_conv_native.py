"""A convolution's per-sample pieces as native calls on CPU devices (kernels/conv.cu, host build only).

``mxlite_conv_{forward,input_grad,weight_grad}_<T>`` run what ``_ConvGeom.forward``, ``input_grad`` and
``weight_grad`` do piece by piece from Python (per sample NumPy's own ``cblas_?gemm``, then the bias and ReLU,
col2im, or the sum over a piece), in one call. The results must be the Python pieces' bits for every geometry
the native path takes, with special values in the data, on one and two threads; what it does not take stays
with the Python pieces.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import blas
from mxlite.ops import _conv_kernels as ck
from mxlite.ops import _conv_native
from mxlite.ops.conv import _ConvGeom


@pytest.fixture
def native_calls(monkeypatch):
    """Counts the native calls by kind; skipped where the host build or NumPy's OpenBLAS is missing."""
    if not ck.enabled(np, np.float32, 2) or blas.host_gemm(np.float32) is None:
        pytest.skip("needs the host build of the kernels and NumPy's OpenBLAS")
    calls = []
    original = _conv_native._run

    def counted(what, *args, **kwargs):
        calls.append(what)
        return original(what, *args, **kwargs)

    monkeypatch.setattr(_conv_native, "_run", counted)
    return calls


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8)


# (channels, image, out channels, kernel, stride, padding, dilation): every one in the per-sample layout
GEOMETRIES = {
    "3x3 same": (3, (12, 12), 8, (3, 3), (1, 1), (1, 1), (1, 1)),
    "5x5 pad 2, C_in 4": (4, (11, 11), 6, (5, 5), (1, 1), (2, 2), (1, 1)),
    "3x3 stride 2 (no overlap of taps' reach)": (3, (17, 17), 5, (3, 3), (2, 2), (1, 1), (1, 1)),
    "3x1 dilated 2": (2, (14, 10), 4, (3, 1), (1, 1), (2, 0), (2, 1)),
    "1-D k3": (3, (70,), 4, (3,), (1,), (1,), (1,)),
    "3-D k2": (2, (5, 5, 5), 3, (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
}


def _geometry(n, name):
    c, image, c_out, kernel, stride, pad, dil = GEOMETRIES[name]
    out_sp = tuple((s + 2 * p - d * (k - 1) - 1) // t + 1 for s, p, d, k, t in zip(image, pad, dil, kernel, stride))
    return _ConvGeom(n, c, image, c_out, kernel, stride, pad, dil, 1, out_sp)


def _special(rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    tiny = np.finfo(dtype).tiny / 4  # a subnormal
    flat[rng.choice(flat.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, -0.0, tiny, -tiny]
    return a


def _all_pieces(geo, rng, dtype):
    """Forward (plain and with bias and ReLU), input and weight gradients of ``geo`` through the current path."""
    x = _special(rng, (geo.n, geo.c) + geo.spatial, dtype)
    w = rng.standard_normal((1, geo.c_out, geo.kg)).astype(dtype)
    b = rng.standard_normal(geo.c_out).astype(dtype)
    g = _special(rng, (geo.n, geo.c_out) + geo.out_sp, dtype)
    cols = geo.im2col(np, x).copy()
    g_mat = geo.g_matrix(np, g)
    with np.errstate(all="ignore"):
        return [geo.forward(np, w, cols).copy(), geo.forward(np, w, cols, b).copy(),
                geo.input_grad(np, w, g_mat).copy(), geo.weight_grad(np, g_mat, cols).copy()]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf in the products (pieces on other threads)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_native_pieces_give_the_python_pieces_bits(name, dtype, threads, native_calls, thread_count, monkeypatch):
    thread_count(threads)
    n = 37  # several weight-gradient pieces, the last one short
    geo = _geometry(n, name)
    assert not geo.merged and not geo.pointwise
    want = [None] * 4
    for native in (False, True):
        monkeypatch.setattr(_conv_native, "NATIVE", native)
        native_calls.clear()
        got = _all_pieces(geo, np.random.default_rng(3), dtype)
        if native:
            assert sorted(set(native_calls)) == ["forward", "input_grad", "weight_grad"], native_calls
            for what, a, b in zip(("forward", "forward with bias and ReLU", "input gradient", "weight gradient"),
                                  got, want):
                assert a.shape == b.shape, what
                np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{name}: {what}")
        else:
            assert native_calls == []
            want = got


@pytest.mark.parametrize("threads", [1, 2])
def test_a_conv_relu_network_trains_to_the_same_bits(threads, native_calls, thread_count, monkeypatch):
    """Conv2D(activation='relu') layers, pooling and a dense head, a few SGD steps: native and Python alike."""
    thread_count(threads)
    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((24, 3, 16, 16)).astype(np.float32))
    y = mx.array(rng.integers(0, 10, 24))
    results = []
    for native in (False, True):
        monkeypatch.setattr(_conv_native, "NATIVE", native)
        mx.random.seed(1)
        net = mx.nn.Sequential(mx.nn.Conv2D(8, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
                               mx.nn.Conv2D(16, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
                               mx.nn.Dense(10))
        net.initialize(mx.init.Xavier())
        trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        losses = []
        native_calls.clear()
        for _ in range(3):
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(24)
            losses.append(loss.asnumpy())
        assert bool(native_calls) == native
        results.append(losses + [p.data().asnumpy() for p in net.collect_params().values()])
    for a, b in zip(*results):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_what_the_native_pieces_do_not_take_runs_the_python_pieces(native_calls):
    rng = np.random.default_rng(0)
    w32 = np.ones((1, 8, 27), np.float32)
    geo = _geometry(4, "3x3 same")
    assert _conv_native.applies(geo, w32)
    grouped = _ConvGeom(4, 4, (12, 12), 8, (3, 3), (1, 1), (1, 1), (1, 1), 2, (12, 12))
    assert not _conv_native.applies(grouped, np.ones((2, 4, 18), np.float32))  # groups
    assert not _conv_native.applies(geo, w32.astype(np.float16))  # float16
    assert not _conv_native.applies(geo, np.ones((1, 27, 8), np.float32).transpose(0, 2, 1))  # not contiguous
    assert not _conv_native.applies(geo, w32, np.ones(8, np.float64))  # mixed dtypes
    one_out = _ConvGeom(4, 3, (12, 12), 1, (3, 3), (1, 1), (1, 1), (1, 1), 1, (12, 12))
    assert not _conv_native.applies(one_out, np.ones((1, 1, 27), np.float32))  # a product dimension of 1
    small = _ConvGeom(4, 3, (6, 6), 8, (3, 3), (1, 1), (1, 1), (1, 1), 1, (6, 6))
    assert small.merged and not _conv_native.applies(small, w32)  # few positions: the merged layout
    x = rng.standard_normal((4, 3, 12, 12)).astype(np.float16)
    cols = geo.im2col(np, x)
    geo.forward(np, w32.astype(np.float16), cols)
    assert native_calls == []
