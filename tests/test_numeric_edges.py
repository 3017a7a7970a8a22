"""Numerical edge cases of the autograd ops, against NumPy and Python's ``math``.

* ``var``/``std`` with ``ddof >= n`` divide by ``max(n - ddof, 0)`` as NumPy does (inf, or NaN
  for a zero sum, with a RuntimeWarning), through ``mx.np`` and the Tensor methods; the
  gradient there is inf/NaN, not an error;
* ``erf`` on the host is vectorised NumPy (no Python call per element) and within 4 float64 ulp
  of ``math.erf`` over the whole real line; float32 is computed in float64 and rounded once.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops

# -- var / std with ddof >= n -------------------------------------------------------------------------

def _reduced_count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([shape[a] for a in axes]))


@pytest.mark.parametrize("shape, axis", [((5,), None), ((5,), 0), ((3, 4), None), ((3, 4), 0), ((3, 4), 1),
                                         ((2, 3, 4), -1), ((2, 3, 4), (0, 2)), ((1, 4), 0)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_var_and_std_match_numpy_for_every_ddof_up_to_past_n(shape, axis, dtype):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(shape).astype(dtype)
    data[0] = 1.5  # a slice of equal values along every axis but the first: a zero sum of squares there
    n = _reduced_count(shape, axis)
    for ddof in range(n + 2):
        for name in ("var", "std"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = getattr(np, name)(data, axis=axis, ddof=ddof)
            results = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                results.append(getattr(mx.np, name)(data, axis=axis, ddof=ddof).asnumpy())
                results.append(getattr(mx.np.array(data, dtype=data.dtype), name)(axis=axis, ddof=ddof).asnumpy())
                results.append(getattr(mx.np, name)(data, axis=axis, ddof=ddof, keepdims=True).asnumpy())
            warned = [w for w in caught if issubclass(w.category, RuntimeWarning)]
            if ddof >= n:
                assert warned and "Degrees of freedom <= 0" in str(warned[0].message), (name, ddof, caught)
                assert not np.isfinite(expected).any()  # the case under test: inf, or NaN for a zero sum
            else:
                assert not warned, (name, ddof, [str(w.message) for w in warned])
            for got in results[:2]:
                assert got.dtype == expected.dtype, (name, ddof, got.dtype, expected.dtype)
                np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                           err_msg=f"{name} ddof={ddof}")
                np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
                np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
            kept = np.var(data, axis=axis, ddof=0, keepdims=True).shape
            assert results[2].shape == kept
            np.testing.assert_array_equal(np.isnan(results[2]).reshape(-1), np.isnan(expected).reshape(-1))


def test_var_with_ddof_at_least_n_has_an_inf_or_nan_gradient_not_an_error():
    data = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]])
    for ddof, finite in ((1, True), (3, False), (5, False)):
        x = mx.np.array(data, dtype=data.dtype)
        x.attach_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            with mx.autograd.record():
                y = mx.np.var(x, axis=1, ddof=ddof)
            y.backward()
        grad = x.grad.asnumpy()
        if finite:  # d var / dx = 2 (x - mean) / (n - ddof)
            np.testing.assert_allclose(grad, 2 * (data - data.mean(axis=1, keepdims=True)) / (3 - ddof), rtol=1e-12)
        else:
            assert not np.isfinite(grad).any(), (ddof, grad)


# -- erf ----------------------------------------------------------------------------------------------

_SPECIAL = [0.0, -0.0, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308, 1e-200, 1e-20, -1e-8, 0.5,
            np.nextafter(0.5, 0.0), 0.46875, 4.0, np.nextafter(4.0, 0.0), -5.9, 5.93, 6.0, 10.0, 26.5, 27.0,
            1e10, -1e300, 1.7976931348623157e308, -1.7976931348623157e308, np.inf, -np.inf, np.nan]


def _erf_points() -> np.ndarray:
    rng = np.random.default_rng(20240617)
    tiny = 10.0 ** rng.uniform(-323, -1, 5_000) * rng.choice([-1.0, 1.0], 5_000)
    return np.concatenate([np.linspace(-30.0, 30.0, 60_001), rng.uniform(-30.0, 30.0, 20_000),
                           rng.uniform(-6.0, 6.0, 20_000), rng.uniform(-1.0, 1.0, 5_000), tiny, _SPECIAL])


def _erf(values: np.ndarray) -> np.ndarray:
    return ops.erf(mx.np.array(values, dtype=values.dtype)).asnumpy()


def test_erf_float64_is_within_4_ulp_of_math_erf_over_the_real_line():
    x = _erf_points()
    assert x.size > 100_000
    got = _erf(x)
    assert got.dtype == np.float64 and got.shape == x.shape
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    ulps = np.abs(got[ok] - want[ok]) / np.spacing(np.abs(want[ok]))
    worst = int(np.argmax(ulps))
    assert ulps.max() <= 4, f"erf({x[ok][worst]!r}) = {got[ok][worst]!r}, math.erf gives {want[ok][worst]!r}"
    special = _erf(np.array(_SPECIAL))
    for v, r in zip(_SPECIAL, special):
        if math.isnan(v):
            assert math.isnan(r)
        else:
            assert r == math.erf(v) or abs(r - math.erf(v)) <= 4 * np.spacing(abs(math.erf(v))), (v, r)
            assert math.copysign(1.0, r) == math.copysign(1.0, v), (v, r)  # -0.0 stays -0.0; the sign of x
    assert list(special[-3:-1]) == [1.0, -1.0]


def test_erf_float32_is_math_erf_rounded_to_float32_within_one_ulp():
    with np.errstate(over="ignore"):  # the huge special values become +-inf
        x = _erf_points().astype(np.float32)
    got = _erf(x)
    assert got.dtype == np.float32
    with np.errstate(over="ignore"):
        want = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    diff = np.abs(got[ok].astype(np.float64) - want[ok].astype(np.float64))
    assert (diff <= np.spacing(np.abs(want[ok])).astype(np.float64)).all()
    assert np.count_nonzero(diff) <= x.size // 1000, np.count_nonzero(diff)  # 1-ulp differences are rare


def test_erf_is_vectorised_no_python_call_per_element(monkeypatch):
    x = _erf_points()[::7]
    expected = _erf(x)

    def refuse(*args, **kwargs):
        raise AssertionError("erf called a Python function per element")

    monkeypatch.setattr(math, "erf", refuse)
    monkeypatch.setattr(np, "frompyfunc", refuse)  # np.vectorize goes through it too
    np.testing.assert_array_equal(_erf(x), expected)
    assert _erf(np.array(0.25)).shape == ()  # 0-d and empty arrays too
    assert _erf(np.zeros((0, 3))).shape == (0, 3)
    assert _erf(np.array([[0.25, -3.0], [7.5, 0.0]])).shape == (2, 2)


def test_erf_gradient_is_unchanged():
    data = np.array([-2.0, -0.3, 0.0, 0.7, 3.0])
    x = mx.np.array(data, dtype=data.dtype)
    x.attach_grad()
    with mx.autograd.record():
        y = ops.erf(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 / np.sqrt(np.pi) * np.exp(-data * data), rtol=1e-14)
