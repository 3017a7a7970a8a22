"""Linear algebra (``mxlite.ops.linalg``): NumPy's ``np.linalg`` face and MXNet 1.x's ``nd.linalg`` face.

Forward results are compared with NumPy (and with the examples of MXNet's operator docs), every gradient with
central finite differences in float64 (``tests/gradcheck.py``: step 1e-6, ``rtol=1e-5, atol=1e-6``; the matrices
are kept well conditioned so those tolerances hold), and the GPU path (emulated where there is no GPU) with the CPU.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.ops import linalg as la
from tests.gradcheck import check_grad

RNG = np.random.default_rng(2024)
LinAlgError = np.linalg.LinAlgError


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1.0, 1.0, size=shape)


def well_conditioned(*shape: int) -> np.ndarray:
    """Square matrices with a dominant diagonal (condition number of a few units)."""
    return rand(*shape) + 3.0 * np.eye(shape[-1])


def spd(*shape: int) -> np.ndarray:
    x = rand(*shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


def lower_tri(*shape: int, upper: bool = False) -> np.ndarray:
    """Triangular matrices (lower, or ``upper``) with a diagonal in [1.5, 2.5] and noise in the other triangle,
    which the triangular ops must ignore. C-contiguous (``check_grad`` perturbs inputs through a flat view)."""
    x = rand(*shape) * 0.5 + np.eye(shape[-1]) * (2.0 + 0.5 * rand(*shape[:-1])[..., None])
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)) if upper else x


def sym(x):
    """A differentiable symmetric positive-definite matrix from any square x (so the gradient convention of a
    factorisation reading one triangle does not matter)."""
    n = x.shape[-1]
    return ops.add(ops.matmul(x, ops.swapaxes(x, -1, -2)), float(n))


def flat(*tensors):
    return ops.concat([ops.reshape(t, (-1,)) for t in tensors], axis=0)


def t64(a):
    return mx.array(np.asarray(a, dtype=np.float64))


# -- NumPy face: forward ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_np_functions_match_numpy_batched(dtype):
    a, p, b = well_conditioned(2, 3, 4, 4), spd(2, 3, 4, 4), rand(2, 3, 4, 2)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    ta, tp = mx.array(a.astype(dtype)), mx.array(p.astype(dtype))
    for got, want in [(la.inv(ta), np.linalg.inv(a)), (la.det(ta), np.linalg.det(a)),
                      (la.slogdet(ta)[1], np.linalg.slogdet(a)[1]), (la.slogdet(ta)[0], np.linalg.slogdet(a)[0]),
                      (la.cholesky(tp), np.linalg.cholesky(p)), (la.solve(ta, mx.array(b.astype(dtype))),
                                                                   np.linalg.solve(a, b)),
                      (la.pinv(ta), np.linalg.pinv(a)), (la.eigh(tp)[0], np.linalg.eigh(p)[0]),
                      (la.norm(ta), np.linalg.norm(a))]:
        assert got.dtype == dtype
        np.testing.assert_allclose(got.asnumpy(), want, rtol=rtol, atol=rtol)


def test_integer_inputs_compute_in_float64_and_float16_is_refused():
    a = np.array([[2, 1], [1, 3]])
    assert la.inv(mx.array(a, dtype=np.int64)).dtype == np.float64
    np.testing.assert_allclose(la.det(mx.array(a, dtype=np.int32)).asnumpy(), 5.0)
    mixed = la.solve(mx.array(a, dtype=np.float32), mx.array(np.ones(2)))  # float32 and float64: float64
    assert mixed.dtype == np.float64
    with pytest.raises(TypeError, match="inv: array type float16 is unsupported.*float32 or float64"):
        la.inv(mx.array(a, dtype=np.float16))


def test_solve_vectors_matrices_and_broadcast_batches():
    a = well_conditioned(3, 4, 4)
    for b in (rand(3, 4), rand(3, 4, 2), rand(4)):  # MXNet's vector rule (a.ndim - 1), matrices, a 1-D vector
        want = np.linalg.solve(a, b[..., None])[..., 0] if b.ndim in (1, 2) else np.linalg.solve(a, b)
        got = la.solve(t64(a), t64(b))
        assert got.shape == b.shape if b.ndim > 1 else got.shape == (3, 4)
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-10)
    np.testing.assert_allclose(la.solve(t64(a[0]), t64(rand(5, 4, 2))).shape, (5, 4, 2))  # batch broadcast


def test_svd_is_mxnets_reduced_svd_with_its_signs():
    for shape in [(2, 3, 5), (4, 4), (5, 3)]:  # MXNet's M <= N, and the tall case mxlite accepts too
        a = rand(*shape)
        ut, s, v = (t.asnumpy() for t in la.svd(t64(a)))
        k = min(shape[-2:])
        assert ut.shape == shape[:-1] + (k,) and s.shape == shape[:-2] + (k,) and v.shape == shape[:-2] + (k,
                                                                                                           shape[-1])
        np.testing.assert_allclose(ut @ (s[..., None] * v), a, atol=1e-12)
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
        picked = np.take_along_axis(v, np.abs(v).argmax(axis=-1)[..., None], axis=-1)
        assert (picked > 0).all()  # each row of v: largest-magnitude entry positive


def test_eigh_signs_uplo_and_upper():
    p = spd(3, 4, 4)
    w, v = (t.asnumpy() for t in la.eigh(t64(p)))
    np.testing.assert_allclose(p @ v, v * w[..., None, :], atol=1e-10)
    picked = np.take_along_axis(v, np.abs(v).argmax(axis=-2)[..., None, :], axis=-2)
    assert (picked > 0).all()
    lower_only = np.tril(p) + np.triu(rand(4, 4), 1)  # garbage above the diagonal is ignored with UPLO='L'
    np.testing.assert_allclose(la.eigh(t64(lower_only[0]))[0].asnumpy(), np.linalg.eigh(p[0])[0], rtol=1e-10)
    upper_only = np.swapaxes(lower_only, -1, -2)
    np.testing.assert_allclose(la.eigh(t64(upper_only[0]), upper=True)[0].asnumpy(), np.linalg.eigh(p[0])[0],
                               rtol=1e-10)
    np.testing.assert_allclose(la.eigh(t64(upper_only[0]), "U")[0].asnumpy(), np.linalg.eigh(p[0])[0], rtol=1e-10)


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_modes_match_numpy(mode):
    for shape in [(2, 5, 3), (3, 3), (3, 5)]:
        a = rand(*shape)
        got, want = la.qr(t64(a), mode=mode), np.linalg.qr(a, mode=mode)
        if mode == "r":
            np.testing.assert_allclose(got.asnumpy(), want, atol=1e-12)
        else:
            for g, w in zip(got, want):
                np.testing.assert_allclose(g.asnumpy(), w, atol=1e-12)


@pytest.mark.parametrize("rcond", ["warn", None, 1e-2, -1])
@pytest.mark.parametrize("shapes", [((6, 3), (6,)), ((6, 3), (6, 2)), ((3, 5), (3, 2))], ids=str)
def test_lstsq_matches_numpy(rcond, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    numpy_rcond = -1 if rcond == "warn" else rcond  # MXNet's 'warn' is NumPy's old -1: machine precision
    want = np.linalg.lstsq(a, b, rcond=numpy_rcond)
    x, res, rank, s = la.lstsq(t64(a), t64(b), rcond=rcond)
    np.testing.assert_allclose(x.asnumpy(), want[0], atol=1e-10)
    assert res.shape == want[1].shape and rank.shape == () and rank.dtype == np.int64 and int(rank) == want[2]
    np.testing.assert_allclose(res.asnumpy(), want[1], rtol=1e-8)
    np.testing.assert_allclose(s.asnumpy(), want[3], rtol=1e-12)


def test_lstsq_rank_deficient_has_empty_residuals():
    a = np.c_[rand(6, 2), np.zeros(6)]
    b = rand(6)
    x, res, rank, _ = la.lstsq(t64(a), t64(b))
    assert int(rank) == 2 and res.shape == (0,)
    np.testing.assert_allclose(x.asnumpy(), np.linalg.lstsq(a, b, rcond=-1)[0], atol=1e-12)


def test_pinv_with_rcond_array_matches_numpy():
    a = rand(3, 4, 2)
    a[1] = np.outer(rand(4), rand(2))  # rank 1
    rcond = np.array([1e-15, 1e-3, 0.5])
    np.testing.assert_allclose(la.pinv(t64(a), rcond=t64(rcond)).asnumpy(), np.linalg.pinv(a, rcond=rcond),
                               atol=1e-10)
    np.testing.assert_allclose(la.pinv(t64(a), hermitian=False).asnumpy(), np.linalg.pinv(a), atol=1e-10)
    np.testing.assert_allclose(la.pinv(t64(a), rcond=[1e-15, 0.5, 1e-3]).asnumpy(),
                               np.linalg.pinv(a, rcond=np.array([1e-15, 0.5, 1e-3])), atol=1e-6)
    np.testing.assert_allclose(la.pinv(t64(a), rcond=None).asnumpy(), np.linalg.pinv(a, rtol=None), atol=1e-10)


NORM_CASES = [((5,), o, None) for o in (None, 1, 2, 3, 0.5, 0, np.inf, -np.inf)] + [
    ((3, 4), o, None) for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)] + [
    ((2, 3, 4), None, None), ((2, 3, 4), 2, 1), ((2, 3, 4), 1, -1), ((2, 3, 4), "fro", (0, 2)),
    ((2, 3, 4), "nuc", (2, 0)), ((2, 3, 4), np.inf, (1, 2)), ((2, 3, 4), -1, (2, 1)), ((2, 3, 4), 2, (0, 1))]


@pytest.mark.parametrize("shape,ord,axis", NORM_CASES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_norm_matches_numpy(shape, ord, axis, keepdims):
    x = rand(*shape)
    want = np.linalg.norm(x, ord, axis, keepdims)
    got = la.norm(t64(x), ord, axis, keepdims)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-12, atol=1e-14)


def test_norm_keeps_the_earlier_np_linalg_norm_where_that_agreed_with_numpy():
    x = t64(rand(2, 3, 4))
    for ord_, axis, keepdims in [(None, None, False), (None, 1, True), (2, -1, False), (1, 0, False),
                                 ("fro", None, False), (None, (0, 2), True)]:
        if ord_ == "fro":
            x2 = t64(rand(3, 4))
            np.testing.assert_allclose(la.norm(x2, ord_).asnumpy(), ops.norm(x2, ord_).asnumpy())
            continue
        np.testing.assert_allclose(la.norm(x, ord_, axis, keepdims).asnumpy(),
                                   ops.norm(x, ord_, axis, keepdims).asnumpy(), rtol=1e-14)
    np.testing.assert_allclose(la.norm(mx.array([3.0, 4.0]), "inf").asnumpy(), 4.0)  # MXNet's string spelling


@pytest.mark.parametrize("ord,axis,match", [("nuc", 0, "invalid norm order 'nuc' for vectors"),
                                            (3, (0, 1), "invalid norm order 3 for matrices"),
                                            (2, None, "improper number of dimensions"),
                                            (None, (1, 1), "duplicate axes")])
def test_norm_errors(ord, axis, match):
    with pytest.raises(ValueError, match=match):
        la.norm(t64(rand(2, 3, 4)), ord, axis)


# -- MXNet 1.x face: the examples of MXNet's operator docs -----------------------------------------------------
def test_nd_examples_from_mxnets_docs():
    nd = mx.nd
    a2, b3 = nd.ones((2, 2)), nd.ones((3, 2))
    got = la.gemm(a2, b3, nd.ones((2, 3)), transpose_b=True, alpha=2.0, beta=10.0)
    assert got.asnumpy().tolist() == [[14.0] * 3] * 2
    got = la.gemm(nd.array([[[1.0, 1.0]], [[0.1, 0.1]]]), nd.array([[[1.0, 1.0]], [[0.1, 0.1]]]),
                  nd.array([[[10.0]], [[0.01]]]), transpose_b=True, alpha=2.0, beta=10.0)
    np.testing.assert_allclose(got.asnumpy(), [[[104.0]], [[0.14]]], rtol=1e-6)
    assert la.gemm2(a2, b3, transpose_b=True, alpha=2.0).asnumpy().tolist() == [[4.0] * 3] * 2
    np.testing.assert_allclose(la.potrf(nd.array([[4.0, 1.0], [1.0, 4.25]])).asnumpy(), [[2.0, 0], [0.5, 2.0]])
    np.testing.assert_allclose(la.potri(nd.array([[2.0, 0], [0.5, 2.0]])).asnumpy(),
                               [[0.265625, -0.0625], [-0.0625, 0.25]])
    np.testing.assert_allclose(la.trmm(nd.array([[1.0, 0], [1.0, 1.0]]), nd.ones((2, 3)), alpha=2.0).asnumpy(),
                               [[2.0] * 3, [4.0] * 3])
    np.testing.assert_allclose(la.trsm(nd.array([[1.0, 0], [1.0, 1.0]]), nd.array([[2.0] * 3, [4.0] * 3]),
                                       alpha=0.5).asnumpy(), np.ones((2, 3)))
    np.testing.assert_allclose(la.sumlogdiag(nd.array([[[1.0, 1.0], [1.0, 7.0]], [[3.0, 0], [0, 17.0]]])).asnumpy(),
                               [1.9459, 3.9318], rtol=1e-4)
    a = nd.array([[1.0, 2.0], [3.0, 4.0]])
    assert la.extractdiag(a).asnumpy().tolist() == [1.0, 4.0] and la.extractdiag(a, 1).asnumpy().tolist() == [2.0]
    assert la.makediag(nd.array([1.0, 2.0]), 1).asnumpy().tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    assert la.extracttrian(a).asnumpy().tolist() == [1, 3, 4]
    assert la.extracttrian(a, lower=False).asnumpy().tolist() == [1, 2, 4]
    assert la.extracttrian(a, 1).asnumpy().tolist() == [2] and la.extracttrian(a, -1).asnumpy().tolist() == [3]
    t = nd.array([1.0, 2.0, 3.0])
    assert la.maketrian(t).asnumpy().tolist() == [[1, 0], [2, 3]]
    assert la.maketrian(t, lower=False).asnumpy().tolist() == [[1, 2], [0, 3]]
    assert la.maketrian(t, offset=1).asnumpy().tolist() == [[0, 1, 2], [0, 0, 3], [0, 0, 0]]
    assert la.maketrian(t, offset=-1).asnumpy().tolist() == [[0, 0, 0], [1, 0, 0], [2, 3, 0]]
    syrk = la.syrk(nd.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), transpose=True)
    assert syrk.asnumpy().tolist() == [[17, 22, 27], [22, 29, 36], [27, 36, 45]]
    np.testing.assert_allclose(la.syrk(nd.array([[[1.0, 1.0]], [[0.1, 0.1]]]), alpha=2.0).asnumpy(),
                               [[[4.0]], [[0.04]]], rtol=1e-6)
    np.testing.assert_allclose(la.inverse(a).asnumpy(), [[-2.0, 1.0], [1.5, -0.5]], rtol=1e-6)


@pytest.mark.parametrize("offset", [-2, -1, 0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
def test_extracttrian_and_maketrian_are_inverse(offset, lower):
    a = rand(2, 4, 4)
    packed = la.extracttrian(t64(a), offset, lower)
    m = 4 - abs(offset)
    assert packed.shape == (2, m * (m + 1) // 2)
    rebuilt = la.maketrian(packed, offset, lower).asnumpy()
    keep = np.tril(a, offset) if (offset < 0 or (offset == 0 and lower)) else np.triu(a, offset)
    np.testing.assert_allclose(rebuilt, keep)


def test_gemm_axis_is_mxnets_swapaxes_form():
    a, b, c = rand(2, 3, 5, 4), rand(2, 4, 5, 6), rand(2, 3, 5, 6)  # rows on axis 1, columns last
    got = la.gemm(t64(a), t64(b), t64(c), alpha=0.5, beta=2.0, axis=1).asnumpy()
    want = np.swapaxes(0.5 * np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2) + 2.0 * np.swapaxes(c, 1, 2), 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_triangular_ops_read_only_their_triangle():
    a, b = lower_tri(2, 3, 3), rand(2, 3, 4)
    noisy = a + np.triu(rand(2, 3, 3), 1) * 5  # garbage in the other triangle
    for fn in (la.trmm, la.trsm):
        np.testing.assert_allclose(fn(t64(noisy), t64(b)).asnumpy(), fn(t64(np.tril(noisy)), t64(b)).asnumpy())
    np.testing.assert_allclose(la.trsm(t64(noisy), t64(b)).asnumpy(), np.linalg.solve(np.tril(noisy), b), rtol=1e-10)
    np.testing.assert_allclose(la.potri(t64(noisy)).asnumpy(), np.linalg.inv(np.tril(noisy) @ np.swapaxes(
        np.tril(noisy), -1, -2)), rtol=1e-10)


# -- gradients (float64, finite differences) --------------------------------------------------------------------
GRADS_NP = [
    ("inv", lambda a: la.inv(a), lambda: [well_conditioned(2, 3, 3)]),
    ("det", lambda a: la.det(a), lambda: [well_conditioned(2, 3, 3)]),
    ("slogdet", lambda a: la.slogdet(a)[1], lambda: [well_conditioned(3, 3) - 6 * np.eye(3)]),  # negative det
    ("solve-vectors", lambda a, b: la.solve(a, b), lambda: [well_conditioned(2, 3, 3), rand(2, 3)]),
    ("solve-matrices", lambda a, b: la.solve(a, b), lambda: [well_conditioned(2, 3, 3), rand(2, 3, 2)]),
    ("solve-broadcast", lambda a, b: la.solve(a, b), lambda: [well_conditioned(3, 3), rand(2, 3, 2)]),
    ("cholesky", lambda x: la.cholesky(sym(x)), lambda: [rand(2, 3, 3)]),
    ("cholesky-upper", lambda x: la.cholesky(sym(x), upper=True), lambda: [rand(3, 3)]),
    ("svd-wide", lambda a: flat(*la.svd(a)), lambda: [rand(2, 3, 5)]),
    ("svd-square", lambda a: flat(*la.svd(a)), lambda: [rand(4, 4)]),
    ("svd-tall", lambda a: flat(*la.svd(a)), lambda: [rand(5, 3)]),
    ("svd-u", lambda a: la.svd(a)[0], lambda: [rand(3, 5)]),
    ("svd-s", lambda a: la.svd(a)[1], lambda: [rand(5, 3)]),
    ("svd-v", lambda a: la.svd(a)[2], lambda: [rand(5, 3)]),
    ("qr-tall", lambda a: flat(*la.qr(a)), lambda: [rand(2, 5, 3)]),
    ("qr-square", lambda a: flat(*la.qr(a)), lambda: [rand(3, 3)]),
    ("qr-wide", lambda a: flat(*la.qr(a)), lambda: [rand(3, 5)]),
    ("qr-r-only", lambda a: la.qr(a)[1], lambda: [rand(3, 5)]),
    ("norm-nuc", lambda a: la.norm(a, "nuc"), lambda: [rand(3, 4)]),
    ("norm-2", lambda a: la.norm(a, 2, axis=(0, 2)), lambda: [rand(3, 2, 4)]),
    ("norm-p", lambda a: la.norm(a, 3, axis=-1), lambda: [rand(3, 4)]),
]


@pytest.mark.parametrize("name,fn,inputs", GRADS_NP, ids=[g[0] for g in GRADS_NP])
def test_np_gradients(name, fn, inputs):
    check_grad(fn, inputs())


def test_cholesky_gradient_is_mxnets_symmetric_one():
    p = spd(3, 3)
    t = t64(p)
    t.attach_grad()
    head = rand(3, 3)
    with mx.autograd.record():
        out = la.cholesky(t)
    out.backward(t64(head))
    g = t.grad.asnumpy()
    np.testing.assert_allclose(g, g.T, atol=1e-14)
    eps = 1e-6
    for i, j in itertools.product(range(3), repeat=2):  # symmetric perturbations E_ij + E_ji
        e = np.zeros((3, 3))
        e[i, j] += eps / 2
        e[j, i] += eps / 2
        fd = (np.sum(head * np.linalg.cholesky(p + e)) - np.sum(head * np.linalg.cholesky(p - e))) / eps
        np.testing.assert_allclose(np.sum(g * (e + e.T) / eps), fd, rtol=1e-5, atol=1e-7)


TRI_FLAGS = list(itertools.product([False, True], repeat=3))


@pytest.mark.parametrize("transpose,rightside,lower", TRI_FLAGS, ids=str)
@pytest.mark.parametrize("op", ["trmm", "trsm"])
def test_triangular_gradients(op, transpose, rightside, lower):
    a = lower_tri(2, 3, 3, upper=not lower)
    b = rand(2, 4, 3) if rightside else rand(2, 3, 4)
    fn = getattr(la, op)
    check_grad(lambda x, y: fn(x, y, transpose=transpose, rightside=rightside, lower=lower, alpha=0.7), [a, b])


GRADS_ND = [
    ("gemm", lambda a, b, c: la.gemm(a, b, c, alpha=0.5, beta=-2.0), lambda: [rand(2, 3, 4), rand(2, 4, 2),
                                                                              rand(2, 3, 2)]),
    ("gemm-transposed", lambda a, b, c: la.gemm(a, b, c, transpose_a=True, transpose_b=True),
     lambda: [rand(4, 3), rand(2, 4), rand(3, 2)]),
    ("gemm-axis", lambda a, b, c: la.gemm(a, b, c, axis=0), lambda: [rand(3, 2, 4), rand(4, 2, 5), rand(3, 2, 5)]),
    ("gemm2", lambda a, b: la.gemm2(a, b, transpose_a=True, alpha=3.0), lambda: [rand(2, 4, 3), rand(2, 4, 2)]),
    ("potrf", lambda x: la.potrf(sym(x)), lambda: [rand(2, 3, 3)]),
    ("potrf-upper", lambda x: la.potrf(sym(x), lower=False), lambda: [rand(3, 3)]),
    ("potri", lambda a: la.potri(a), lambda: [lower_tri(2, 3, 3)]),
    ("potri-upper", lambda a: la.potri(a, lower=False), lambda: [lower_tri(3, 3, upper=True)]),
    ("syrk", lambda a: la.syrk(a, alpha=0.5), lambda: [rand(2, 3, 4)]),
    ("syrk-transposed", lambda a: la.syrk(a, transpose=True), lambda: [rand(3, 4)]),
    ("sumlogdiag", lambda a: la.sumlogdiag(a), lambda: [well_conditioned(2, 3, 3)]),
    ("extractdiag", lambda a: la.extractdiag(a, -1), lambda: [rand(2, 4, 4)]),
    ("makediag", lambda a: la.makediag(a, 2), lambda: [rand(2, 3)]),
    ("extracttrian", lambda a: la.extracttrian(a, 1), lambda: [rand(2, 4, 4)]),
    ("maketrian", lambda a: la.maketrian(a, -1, False), lambda: [rand(2, 6)]),
    ("inverse", lambda a: la.inverse(a), lambda: [well_conditioned(3, 3)]),
]


@pytest.mark.parametrize("name,fn,inputs", GRADS_ND, ids=[g[0] for g in GRADS_ND])
def test_nd_gradients(name, fn, inputs):
    check_grad(fn, inputs())


@pytest.mark.parametrize("name,call", [
    ("eigh", lambda a: la.eigh(a)[1]), ("eigh", lambda a: la.eigh(a)[0]),
    ("lstsq", lambda a: la.lstsq(a, ops.sum(a, axis=1))[0]), ("pinv", lambda a: la.pinv(a)),
    ("qr", lambda a: la.qr(a, mode="complete")[0]), ("qr", lambda a: la.qr(a, mode="r"))])
def test_ops_without_gradient_raise_on_backward(name, call):
    a = t64(spd(3, 3))
    a.attach_grad()
    with mx.autograd.record():
        out = ops.sum(call(a))
    with pytest.raises(NotImplementedError, match=f"{name}: no gradient"):
        out.backward()
    with mx.autograd.record():  # not reaching the loss is fine
        loss = ops.sum(ops.multiply(a, 2.0))
        call(a)
    loss.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), 2.0)


# -- errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,match", [
    (lambda: la.inv(mx.nd.ones((2, 3))), r"inv: a must be a square matrix .*\(\.\.\., M, M\).*got shape \(2, 3\)"),
    (lambda: la.det(mx.nd.ones((3,))), r"det: a must be a square matrix.*got shape \(3,\)"),
    (lambda: la.cholesky(mx.nd.ones((2, 2, 3))), r"cholesky: a must be a square.*\(2, 2, 3\)"),
    (lambda: la.solve(mx.nd.ones((2, 3, 3)), mx.nd.ones((2, 4))), r"solve: b must have shape \(\.\.\., 3\) or "
                                                                  r"\(\.\.\., 3, K\).*got b of shape \(2, 4\)"),
    (lambda: la.solve(mx.nd.ones((2, 3, 3)), mx.nd.ones((4, 3, 1))), r"solve: the leading \(batch\) axes"),
    (lambda: la.trsm(mx.nd.ones((2, 3, 3)), mx.nd.ones((3, 3, 2))), r"trsm: the operands must have .* equal "
                                                                    r"leading .*A \(2, 3, 3\), B \(3, 3, 2\)"),
    (lambda: la.trmm(mx.nd.ones((3, 3)), mx.nd.ones((3, 2)), rightside=True), r"trmm: B must have 3 columns"),
    (lambda: la.gemm(mx.nd.ones((2, 3)), mx.nd.ones((4, 2)), mx.nd.ones((2, 2))), r"gemm: inner dimensions differ"),
    (lambda: la.gemm(mx.nd.ones((2, 3)), mx.nd.ones((3, 2)), mx.nd.ones((3, 3))), r"gemm: C must have the product"),
    (lambda: la.gemm2(mx.nd.ones((2, 3)), mx.nd.ones((3, 3)), axis=-1), r"gemm2: axis .* must lie in \[-2, 0\]"),
    (lambda: la.gemm2(mx.nd.ones((2, 2, 3)), mx.nd.ones((3, 2))), r"gemm2: the operands must have the same number"),
    (lambda: la.extractdiag(mx.nd.ones((3, 3)), 3), r"extractdiag: offset 3 is out of range"),
    (lambda: la.maketrian(mx.nd.ones((2, 4))), r"maketrian: the last axis of A must hold a triangle"),
    (lambda: la.lstsq(mx.nd.ones((2, 3, 3)), mx.nd.ones((3,))), r"lstsq: a must be one matrix \(M, N\)"),
    (lambda: la.eigh(mx.nd.ones((3, 3)), "X"), r"eigh: UPLO must be 'L' or 'U'"),
    (lambda: la.qr(mx.nd.ones((3, 3)), "raw"), r"qr: mode must be"),
])
def test_shape_errors_name_the_op_and_the_shapes(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    op = str(info.value).split(":")[0]
    assert str(info.value).count(f"{op}:") == 1  # named once, not again by the op wrapper


def test_singular_matrices_behave_as_numpy():
    s = mx.nd.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(LinAlgError, match="inv: Singular matrix"):
        la.inv(s)
    with pytest.raises(LinAlgError, match="solve"):
        la.solve(s, mx.nd.ones((2,)))
    with pytest.raises(LinAlgError, match="cholesky"):
        la.cholesky(mx.nd.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(LinAlgError, match="trsm"):
        la.trsm(mx.nd.array([[1.0, 0.0], [1.0, 0.0]]), mx.nd.ones((2, 2)))
    assert la.det(s).item() == 0.0
    sign, logdet = la.slogdet(s)
    assert sign.item() == 0.0 and logdet.item() == -np.inf
    t = t64(s.asnumpy())
    t.attach_grad()
    with mx.autograd.record():
        d = la.det(t)
    with pytest.raises(LinAlgError, match="det: the gradient at a singular matrix"):
        d.backward()


def test_inputs_may_be_numpy_arrays_and_lists():
    np.testing.assert_allclose(la.inv(np.array([[2.0, 0.0], [0.0, 4.0]])).asnumpy(), [[0.5, 0], [0, 0.25]])
    x = la.solve([[2.0, 0.0], [0.0, 4.0]], [1.0, 1.0])
    assert x.dtype == np.float32 and x.asnumpy().tolist() == [0.5, 0.25]


def test_face_lists_name_documented_callables():
    assert la.NP_LINALG == ["norm", "solve", "inv", "cholesky", "det", "slogdet", "lstsq", "svd", "eigh", "qr",
                            "pinv"]
    for name in la.NP_LINALG + la.ND_LINALG:
        fn = getattr(la, name)
        assert callable(fn) and fn.__doc__ and name in la.__all__
    assert {"gemm", "gemm2", "potrf", "potri", "trmm", "trsm", "syrk", "sumlogdiag", "inverse", "det",
            "slogdet"} <= set(la.ND_LINALG)


# -- GPUs (emulated where there is none) --------------------------------------------------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")

GPU_CASES = [
    ("inv", lambda a: la.inv(a), lambda: [well_conditioned(2, 3, 3)]),
    ("det", lambda a: la.det(a), lambda: [well_conditioned(2, 3, 3)]),
    ("slogdet", lambda a: la.slogdet(a)[1], lambda: [well_conditioned(3, 3)]),
    ("solve", lambda a, b: la.solve(a, b), lambda: [well_conditioned(2, 3, 3), rand(2, 3)]),
    ("cholesky", lambda x: la.cholesky(sym(x)), lambda: [rand(2, 3, 3)]),
    ("svd", lambda a: flat(*la.svd(a)), lambda: [rand(2, 3, 4)]),
    ("qr", lambda a: flat(*la.qr(a)), lambda: [rand(4, 3)]),
    ("norm-nuc", lambda a: la.norm(a, "nuc"), lambda: [rand(3, 4)]),
    ("gemm-axis", lambda a, b, c: la.gemm(a, b, c, axis=0), lambda: [rand(3, 2, 4), rand(4, 2, 5), rand(3, 2, 5)]),
    ("potri", lambda a: la.potri(a), lambda: [lower_tri(2, 3, 3)]),
    ("trsm", lambda a, b: la.trsm(a, b, transpose=True, rightside=True), lambda: [lower_tri(3, 3), rand(2, 3)]),
    ("trmm", lambda a, b: la.trmm(a, b, lower=False), lambda: [lower_tri(3, 3, upper=True), rand(3, 2)]),
    ("syrk", lambda a: la.syrk(a), lambda: [rand(2, 3, 4)]),
    ("extracttrian", lambda a: la.extracttrian(a, -1), lambda: [rand(2, 3, 3)]),
    ("makediag", lambda a: la.makediag(a, 1), lambda: [rand(2, 3)]),
]


@gpu
@needs_gpu
@pytest.mark.parametrize("name,fn,inputs", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_matches_cpu_with_gradients(name, fn, inputs):
    arrays = inputs()
    cpu_grads = check_grad(fn, arrays)
    gpu_grads = check_grad(fn, arrays, device=mx.gpu(0))
    for g_cpu, g_gpu in zip(cpu_grads, gpu_grads):
        np.testing.assert_allclose(g_gpu, g_cpu, rtol=1e-9, atol=1e-12)
    cpu_out = fn(*[t64(a) for a in arrays]).asnumpy()
    gpu_out = fn(*[mx.array(np.asarray(a, np.float64), device=mx.gpu(0)) for a in arrays])
    assert gpu_out.device == mx.gpu(0)
    np.testing.assert_allclose(gpu_out.asnumpy(), cpu_out, rtol=1e-10, atol=1e-12)


@gpu
@needs_gpu
def test_gpu_decompositions_and_least_squares_agree_with_cpu():
    a, p = rand(2, 3, 5), spd(2, 4, 4)
    g = mx.gpu(0)
    for cpu_out, gpu_out in [(la.svd(t64(a)), la.svd(mx.array(a, device=g))),
                             (la.eigh(t64(p)), la.eigh(mx.array(p, device=g))),
                             (la.lstsq(t64(a[0].T), t64(a[1, 0])), la.lstsq(mx.array(a[0].T, device=g),
                                                                           mx.array(a[1, 0], device=g))),
                             ((la.pinv(t64(a)),), (la.pinv(mx.array(a, device=g)),)),
                             ((la.norm(t64(a), 2, (1, 2)),), (la.norm(mx.array(a, device=g), 2, (1, 2)),))]:
        for c, gg in zip(cpu_out, gpu_out):
            assert gg.device == g
            np.testing.assert_allclose(gg.asnumpy(), c.asnumpy(), rtol=1e-10, atol=1e-12)


@gpu
@needs_gpu
def test_gpu_singular_matrices_raise_as_on_cpu():
    s = mx.array(np.array([[1.0, 2.0], [2.0, 4.0]]), device=mx.gpu(0))
    with pytest.raises(LinAlgError, match="inv"):
        la.inv(s)
    with pytest.raises(LinAlgError, match="cholesky"):
        la.cholesky(mx.array(np.array([[1.0, 2.0], [2.0, 1.0]]), device=mx.gpu(0)))
    assert la.det(s).item() == 0.0


@gpu
@needs_gpu
def test_emulated_cupy_makes_unchecked_failures_loud():
    """The double raises where a real GPU would return garbage: a failing cupy.linalg call without
    cupyx.errstate(linalg='raise') is an EmulatedGPUError; with it, LinAlgError as CuPy raises."""
    from mxlite._emulation import install as emu  # noqa: PLC0415

    if not emu.emulated_gpu_count():
        pytest.skip("checks the GPU emulation")
    import cupy  # noqa: PLC0415
    import cupyx  # noqa: PLC0415

    with mx.gpu(0).use():
        s = cupy.asarray(np.array([[1.0, 2.0], [2.0, 4.0]]))
        assert cupyx.geterr()["linalg"] == "ignore"
        with pytest.raises(emu.EmulatedGPUError, match="cupy.linalg.inv: Singular matrix.*errstate"):
            cupy.linalg.inv(s)
        with cupyx.errstate(linalg="raise"):
            assert cupyx.geterr()["linalg"] == "raise"
            with pytest.raises(LinAlgError):
                cupy.linalg.inv(s)
        assert cupyx.geterr()["linalg"] == "ignore"
        with pytest.raises(NotImplementedError):
            cupyx.seterr(divide="raise")
        u, s_, vt = cupy.linalg.svd(cupy.asarray(np.eye(2)))
        assert all(isinstance(x, cupy.ndarray) for x in (u, s_, vt))  # device arrays, not NumPy's named tuple
