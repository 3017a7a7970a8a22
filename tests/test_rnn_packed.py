"""The recurrent layers' per-step product on CPU devices: W_h laid out once per pass (kernels/packed_product.cuh).

Every element of ``a @ B`` is the sum over k in order of fused multiply-adds from zero, whichever loop computes
it (AVX-512 or portable), so the tests hold the two loops to the same bits, the result to a float64 (or
long double) reference within the bound of a k-term sum, to exact integer products, and to the order and the
fusing that definition promises.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import rnn_ops

pytestmark = pytest.mark.skipif(not rnn_ops.KERNELS.cpu_enabled(),
                                reason="needs the host build of kernels/rnn.cu")

SHAPES = [(1, 1, 1), (5, 7, 12), (8, 16, 32), (9, 33, 31), (17, 100, 65), (3, 5, 48), (32, 256, 1024),
          (32, 1024, 256)]  # (m, k, n): rows past 8, columns past a panel, a ragged last panel


def _product(a: np.ndarray, b: np.ndarray, portable: bool = False, transposed: bool = False) -> np.ndarray:
    """``a @ b`` through the packed product (``b`` packed from its transpose when ``transposed``)."""
    source = np.ascontiguousarray(b.T) if transposed else np.ascontiguousarray(b)
    weight = rnn_ops._PackedWeight(source, transposed=transposed)
    out = np.full((a.shape[0], b.shape[1]), np.nan, dtype=a.dtype)
    _, product = rnn_ops._packed_entries(a.dtype.name)
    product(a.shape[0], weight.n, weight.k, a.ctypes.data, a.strides[0] // a.itemsize, weight.panels.ctypes.data,
            out.ctypes.data, out.strides[0] // out.itemsize, int(portable))
    weight.release()
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_the_product_is_within_a_k_term_sums_bound_of_the_exact_one(m, k, n, dtype):
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    wide = np.longdouble if dtype == "float64" else np.float64
    exact = a.astype(wide) @ b.astype(wide)
    bound = 1.01 * k * np.finfo(dtype).eps / 2 * (np.abs(a).astype(wide) @ np.abs(b).astype(wide))
    got = _product(a, b)
    assert np.all(np.abs(got.astype(wide) - exact) <= bound)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_vectorised_and_portable_loops_and_both_layouts_give_the_same_bits(m, k, n, dtype):
    rng = np.random.default_rng(7 + m + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    a.flat[::11] = 0.0
    b.flat[::13] = -0.0
    b.flat[5::17] = np.finfo(dtype).tiny / 4  # subnormal
    fast = _product(a, b)
    np.testing.assert_array_equal(_product(a, b, portable=True), fast)
    np.testing.assert_array_equal(_product(a, b, transposed=True), fast)


def test_integer_valued_products_are_exact():
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 9, (13, 64)).astype(np.float32)
    b = rng.integers(-8, 9, (64, 70)).astype(np.float32)
    np.testing.assert_array_equal(_product(a, b), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


@pytest.mark.parametrize("portable", [False, True])
def test_terms_are_added_in_order_each_with_one_rounding(portable):
    # in order: (0 + 1) + 1e8 rounds to 1e8 in float32, then - 1e8 gives 0; backwards, or 1e8 - 1e8 first, gives 1
    a = np.ones((1, 3), np.float32)
    b = np.array([[1.0], [1e8], [-1e8]], np.float32)
    assert _product(a, b, portable)[0, 0] == 0.0
    # fused: x * x + s with x = 1 + 2^-12 and s = -(1 + 2^-11) is exactly 2^-24; rounding x * x first gives 0
    x = np.float32(1 + 2.0 ** -12)
    a = np.array([[1.0, x]], np.float32)
    b = np.array([[-(1 + 2.0 ** -11)], [x]], np.float32)
    assert _product(a, b, portable)[0, 0] == np.float32(2.0 ** -24)


def test_nan_and_inf_propagate_as_in_a_sum():
    a = np.array([[1.0, np.inf, 2.0], [np.nan, 1.0, 1.0], [1.0, 1.0, 1.0]], np.float32)
    b = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, -np.inf]], np.float32)
    got = _product(a, b)
    assert got[0, 0] == np.inf and np.isnan(got[0, 1])  # inf * 0 ... then inf + -inf
    assert np.isnan(got[1]).all()
    assert got[2, 0] == 3.0 and got[2, 1] == -np.inf


def test_rows_with_a_stride_and_an_output_with_a_stride():
    rng = np.random.default_rng(4)
    big = rng.standard_normal((10, 40)).astype(np.float32)
    a = big[:, 3:20]  # rows 40 apart
    b = rng.standard_normal((17, 33)).astype(np.float32)
    weight = rnn_ops._PackedWeight(b, transposed=False)
    out = np.zeros((10, 50), np.float32)
    weight(a, out[:, 2:35])
    np.testing.assert_array_equal(out[:, 2:35], _product(np.ascontiguousarray(a), b))
    assert not out[:, :2].any() and not out[:, 35:].any()  # nothing written outside the view
    weight.release()


def test_the_build_reports_which_loop_it_uses():
    import ctypes

    library = rnn_ops.KERNELS.host_library()
    flag = ctypes.c_int(-1)
    assert library.mxlite_packed_vectorised(ctypes.byref(flag), None, 0) == 0
    assert flag.value in (0, 1)


@pytest.mark.parametrize("dtype, packs", [("float32", True), ("float64", True), ("float16", False)])
def test_layers_use_the_packed_product_for_float32_and_float64(dtype, packs, monkeypatch):
    made = []
    original = rnn_ops._PackedWeight.__init__

    def counted(self, matrix, transposed):
        made.append((matrix.shape, transposed))
        original(self, matrix, transposed)

    monkeypatch.setattr(rnn_ops._PackedWeight, "__init__", counted)
    layer = mx.rnn.LSTM(8, input_size=3, dtype=dtype)
    layer.initialize(device=mx.cpu(0))
    x = mx.array(np.random.default_rng(0).standard_normal((4, 2, 3)), dtype=dtype)
    with mx.autograd.record():
        out = layer(x)
    out.backward()
    # W_h^T forward (packed from W_h, transposed), W_h backward
    assert made == ([((32, 8), True), ((32, 8), False)] if packs else [])
