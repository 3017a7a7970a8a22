"""Special functions computed on raw arrays: the Gauss error function ``erf`` on the host.

NumPy has no ``erf``; :func:`erf_array` computes it with W. J. Cody's rational approximations on
NumPy arrays (within a few float64 ulp of ``math.erf``) and with CuPy's special function on GPUs.
:func:`mxlite.ops.core.erf` is the differentiable op built on it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["erf_array"]


# erf on the host: W. J. Cody's rational Chebyshev approximations ("Rational Chebyshev
# approximations for the error function", Math. Comp. 23 (1969) 631-637), evaluated elementwise
# with NumPy. His double-precision coefficients (as published, highest power first; the
# denominators are monic):
#   |x| < 0.5:        erf(x)            ~ x * A(x*x) / B(x*x)
#   0.5 <= |x| < 4:   erfc(x) exp(x*x)  ~ C(|x|) / D(|x|)
#   |x| >= 4:         erfc(x) exp(x*x)  ~ (1/sqrt(pi) - z * P(z) / Q(z)) / |x|,  z = 1 / (x*x)
# Cody's first break point is 0.46875; his first approximation stays within 0.01 ulp of erf up
# to 0.5 (in exact arithmetic), and past 0.5 erf > 1/2 > erfc, so that an error of erfc counts
# about half as many ulps of erf = 1 - erfc (just below 0.477 it would count twice as many).
_CODY_A = ("1.85777706184603153e-1", "3.16112374387056560e00", "1.13864154151050156e02",
           "3.77485237685302021e02", "3.20937758913846947e03")
_CODY_B = ("1", "2.36012909523441209e01", "2.44024637934444173e02", "1.28261652607737228e03",
           "2.84423683343917062e03")
_CODY_C = ("2.15311535474403846e-8", "5.64188496988670089e-1", "8.88314979438837594e00",
           "6.61191906371416295e01", "2.98635138197400131e02", "8.81952221241769090e02",
           "1.71204761263407058e03", "2.05107837782607147e03", "1.23033935479799725e03")
_CODY_D = ("1", "1.57449261107098347e01", "1.17693950891312499e02", "5.37181101862009858e02",
           "1.62138957456669019e03", "3.29079923573345963e03", "4.36261909014324716e03",
           "3.43936767414372164e03", "1.23033935480374942e03")
_CODY_P = ("1.63153871373020978e-2", "3.05326634961232344e-1", "3.60344899949804439e-1",
           "1.25781726111229246e-1", "1.60837851487422766e-2", "6.58749161529837803e-4")
_CODY_Q = ("1", "2.56852019228982242e00", "1.87295284992346047e00", "5.27905102951428412e-1",
           "6.05183413124413191e-2", "2.33520497626869185e-3")
# Near 0, x * A/B with A and B rounded to float64 is biased by almost an ulp (A(0)/B(0) is not
# 2/sqrt(pi) to the last bit). erf(x) = x + x * (A - B)/B instead, with A - B formed exactly
# from the published decimals, leaves the rounding of the coefficients in the small correction.
_ERF_SMALL_NUM = tuple(float(Fraction(a) - Fraction(b)) for a, b in zip(_CODY_A, _CODY_B))
_ERF_SMALL_DEN = tuple(float(b) for b in _CODY_B)
_ERFC_MID_NUM = tuple(float(c) for c in _CODY_C)
_ERFC_MID_DEN = tuple(float(d) for d in _CODY_D)
_ERFC_TAIL_NUM = tuple(float(p) for p in _CODY_P)
_ERFC_TAIL_DEN = tuple(float(q) for q in _CODY_Q)
_ERF_SMALL_END = 0.5
_ERF_MID_END = 4.0
_ERF_ONE_FROM = 10.0  # erfc(10) ~ 2e-45: erf is exactly +-1 in float64 from about 5.93 on
_ERF_BLOCK = 8192  # elements computed at once
_DEKKER_SPLIT = 134217729.0  # 2**27 + 1: splits a float64 into two halves of 26 bits


def _horner(coefficients: tuple[float, ...], z: np.ndarray) -> np.ndarray:
    """``c[0] * z**k + c[1] * z**(k-1) + ... + c[k]``, elementwise in float64."""
    acc = np.full_like(z, coefficients[0])
    for c in coefficients[1:]:
        acc *= z
        acc += c
    return acc


def _exp_minus_square(y: np.ndarray) -> np.ndarray:
    """``exp(-y*y)`` for 0 <= y <= 10, without the rounding error of ``y*y`` (which exp would magnify by y*y).

    ``y*y = hi + lo`` exactly (Dekker's product), and ``exp(-hi - lo) = exp(-hi) * (1 - lo)``
    to far below an ulp, as ``|lo| <= ulp(hi) / 2``.
    """
    hi = y * y
    y_hi = y * _DEKKER_SPLIT
    y_lo = y_hi - y
    np.subtract(y_hi, y_lo, out=y_hi)  # the upper 26 bits of y
    np.subtract(y, y_hi, out=y_lo)  # the rest, exactly
    lo = y_hi * y_hi
    lo -= hi
    y_hi *= y_lo
    y_hi *= 2.0
    lo += y_hi
    y_lo *= y_lo
    lo += y_lo  # y*y - hi, exactly
    e = np.negative(hi, out=hi)
    np.exp(e, out=e)
    lo *= e
    e -= lo
    return e


def _erfc_positive(y: np.ndarray) -> np.ndarray:
    """erfc(y) for 0.5 <= y <= 10, in float64 (Cody's second and third approximations)."""
    scaled = _horner(_ERFC_MID_NUM, y)  # erfc(y) * exp(y*y) for y < 4
    scaled /= _horner(_ERFC_MID_DEN, y)
    tail = y >= _ERF_MID_END
    if tail.any():
        z = y * y
        np.reciprocal(z, out=z)
        num = _horner(_ERFC_TAIL_NUM, z)
        num /= _horner(_ERFC_TAIL_DEN, z)
        num *= z
        np.subtract(1.0 / np.sqrt(np.pi), num, out=num)
        num /= y
        np.copyto(scaled, num, where=tail)
    scaled *= _exp_minus_square(y)
    return scaled


def _erf_in_place(v: np.ndarray) -> None:
    """Overwrite the float64 array ``v`` with erf of its values (NaN stays NaN).

    Both approximations are evaluated on the whole block (each on its input clipped into its
    interval) and the right one is kept: cheaper than gathering and scattering the elements.
    """
    y = np.abs(v)
    small = y < _ERF_SMALL_END
    large = y >= _ERF_SMALL_END  # NaN is in neither
    if small.any():
        xs = np.clip(v, -_ERF_SMALL_END, _ERF_SMALL_END)
        z = xs * xs
        corr = _horner(_ERF_SMALL_NUM, z)
        corr /= _horner(_ERF_SMALL_DEN, z)
        corr *= xs
        corr += xs  # erf(x) = x + x * (A - B) / B
        np.copyto(v, corr, where=small)
    if large.any():
        np.clip(y, _ERF_SMALL_END, _ERF_ONE_FROM, out=y)
        erf = _erfc_positive(y)
        np.subtract(1.0, erf, out=erf)
        np.copysign(erf, v, out=erf)
        np.copyto(v, erf, where=large)


def _erf_host(d: Any) -> np.ndarray:
    """erf of a NumPy array, vectorised: within a few float64 ulp of ``math.erf`` over the whole real line.

    float32 and float16 inputs are computed in float64 and rounded once to their dtype; other
    real dtypes are computed in float64 and cast back to their dtype (integers truncate, as
    before). NaN gives NaN, +-inf gives +-1, and -0.0 gives -0.0, as ``math.erf`` does.

    Raises:
        TypeError: a complex (or non-numeric) input: erf is computed for real numbers only.
    """
    d = np.asarray(d)
    if d.dtype.kind not in "biuf":
        raise TypeError(f"erf: expected real numbers, got an array of dtype {d.dtype}")
    out = np.array(d, dtype=np.float64, order="C")  # a copy, overwritten block by block
    flat = out.reshape(-1)
    with np.errstate(under="ignore"):  # x*x of a tiny x: harmless
        for start in range(0, flat.size, _ERF_BLOCK):  # blocks: small temporaries, kept in cache
            _erf_in_place(flat[start:start + _ERF_BLOCK])
    return out.astype(d.dtype, copy=False)


def erf_array(xp: Any, d: Any) -> Any:
    """erf of a NumPy/CuPy array (no autograd): CuPy's special function on a GPU, :func:`_erf_host` on the host."""
    if xp is not np:
        try:
            from cupyx.scipy.special import erf as cupy_erf  # noqa: PLC0415

            return cupy_erf(d)
        except Exception:  # the emulated CuPy has no special functions: compute on the host
            return xp.asarray(_erf_host(xp.asnumpy(d)))
    return _erf_host(d)
