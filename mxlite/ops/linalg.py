"""Linear algebra on Tensors: NumPy's ``linalg`` (MXNet 2.x ``mx.np.linalg``) and MXNet 1.x's ``mx.nd.linalg``.

Every function takes Tensors (NumPy arrays and lists are copied onto the device of the Tensor operands, else the
current device), works on the trailing two axes with any leading axes as a batch, and runs on the operands' device:
NumPy's LAPACK on CPU devices, CuPy's cuSOLVER/cuBLAS on GPUs. Inside ``autograd.record()`` each records its
backward closure beside its forward, as the ops of ``core.py`` do; the formulas are the standard matrix-calculus ones
and each is checked against finite differences in float64 (``tests/test_linalg.py``).

Conventions shared by all functions:

* dtypes: float32 and float64 compute in their own precision; integer and boolean inputs are computed in float64,
  and mixed float32/float64 operands in float64 (NumPy's rule). float16 and complex raise TypeError, as in NumPy
  and MXNet.
* errors: a shape that is not a (stack of) square matrices, or batches that do not agree, raise ValueError naming
  the op, the shapes and what is needed.
* singular matrices behave as NumPy's do, on GPUs too: ``inv``, ``solve``, the triangular solves and the Cholesky
  factorisation raise ``numpy.linalg.LinAlgError`` (a ValueError); ``det`` gives 0 and ``slogdet`` (0, -inf).
  MXNet instead returns inf/NaN for a singular inverse. On a GPU this asks CuPy to read cuSOLVER's error flag
  (``cupyx.errstate(linalg='raise')``), which waits for the device: once per such call in the forward pass and
  in ``det``/``slogdet``'s backward; other backward solves reuse a matrix the forward pass already checked.
* empty matrices (an axis of length 0) give NumPy's results: ``svd``, ``eigh``, ``qr``, ``inv`` and the other
  factorisations return empty arrays, ``det`` 1, ``norm`` 0 for the orders that take a sum or a maximum (None,
  'fro', 'nuc', 1, 2, inf); the orders that take a minimum (-1, -2, -inf) over no values raise ValueError naming
  ``ord`` and the shape, as NumPy does.
* gradients follow MXNet's: where MXNet's op has one, so does this one (Cholesky's is the symmetric gradient, as
  MXNet's ``potrf``); where it has none (``eigh``, ``lstsq``, ``pinv``, ``qr`` in modes other than 'reduced'),
  back-propagating through the result raises NotImplementedError naming the op (MXNet silently gives zeros).

The two faces: :data:`NP_LINALG` lists what ``mx.np.linalg`` exposes, :data:`ND_LINALG` what ``mx.nd.linalg`` does.
"""

from __future__ import annotations

import builtins as _b
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor, op_result, unbroadcast
from ..device.blas import matmul as _mm
from . import core as _core
from .core import _run
from .creation import array as _array

__all__ = ["norm", "solve", "inv", "cholesky", "det", "slogdet", "lstsq", "svd", "eigh", "qr", "pinv",
           "gemm", "gemm2", "potrf", "potri", "trmm", "trsm", "syrk", "sumlogdiag", "extractdiag", "makediag",
           "extracttrian", "maketrian", "inverse", "NP_LINALG", "ND_LINALG"]

Array = Any  # numpy.ndarray or cupy.ndarray


# -- shared helpers -----------------------------------------------------------------------------------------------
def _tensors(*xs: Any) -> list[Any]:
    """Tensors unchanged; other operands (NumPy arrays, lists, numbers) copied onto the first Tensor's device, or the
    current device when there is none (lists and numbers as float32, MXNet's default). ``None`` stays ``None``."""
    like = next((x for x in xs if isinstance(x, Tensor)), None)
    dev = like.device if like is not None else None
    return [x if x is None or isinstance(x, Tensor) else _array(x, dev) for x in xs]


def _named(exc: Exception) -> Exception:
    """Mark an error whose message already names the op, so ``ops._run`` passes it on without naming it again."""
    exc._mx_named = True  # type: ignore[attr-defined]
    return exc


def _dtype(op: str, *ts: Tensor) -> np.dtype:
    """The dtype ``op`` computes in: float32 when every float operand is float32 and none is an integer, else
    float64 (NumPy's rule for linalg). Raises TypeError for float16, complex and other dtypes LAPACK lacks here."""
    found = []
    for t in ts:
        d = np.dtype(t.dtype)
        if d in (np.float32, np.float64):
            found.append(d)
        elif d == np.bool_ or np.issubdtype(d, np.integer):
            found.append(np.dtype(np.float64))
        else:
            raise _named(TypeError(f"{op}: array type {d} is unsupported in linalg (shape {t.shape}); float32 or "
                                   "float64 is needed: cast it first, e.g. x.astype('float32')"))
    return np.result_type(*found)


def _data(t: Tensor, dtype: np.dtype) -> Array:
    return t._data.astype(dtype, copy=False)


def _grad_as(g: Array | None, t: Tensor) -> Array | None:
    """A gradient in the dtype of the input it belongs to (a float32 input of a float64 computation)."""
    if g is None or g.dtype == t.dtype or not np.issubdtype(t.dtype, np.floating):
        return g
    return g.astype(t.dtype)


def _mT(x: Array) -> Array:
    """The matrix transpose of the trailing two axes."""
    return x.swapaxes(-1, -2)


def _need_matrix(op: str, t: Tensor, name: str = "a") -> None:
    if t.ndim < 2:
        raise _named(ValueError(f"{op}: {name} must be a matrix or a stack of matrices (shape (..., M, N), at "
                                f"least 2-D), got shape {t.shape}"))


def _need_square(op: str, t: Tensor, name: str = "a") -> int:
    """Raise unless ``t`` is a (stack of) square matrices; returns M."""
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise _named(ValueError(f"{op}: {name} must be a square matrix or a stack of square matrices (shape "
                                f"(..., M, M)), got shape {t.shape}"))
    return t.shape[-1]


def _need_same_batch(op: str, named: dict[str, Tensor]) -> None:
    """MXNet 1.x's rule for several matrix operands: the same number of dimensions and equal leading axes."""
    shapes = {k: t.shape for k, t in named.items()}
    ndims = {len(s) for s in shapes.values()}
    batches = {s[:-2] for s in shapes.values()}
    if len(ndims) != 1 or len(batches) != 1:
        listed = ", ".join(f"{k} {s}" for k, s in shapes.items())
        raise _named(ValueError(f"{op}: the operands must have the same number of dimensions and equal leading "
                                f"(batch) axes; got {listed}"))


def _lapack(xp: Any, name: str, *args: Any, check: bool = True) -> Any:
    """``xp.linalg.<name>(*args)``; on a GPU with ``check``, CuPy reads cuSOLVER's error flag (a host wait) so a
    singular or indefinite matrix raises LinAlgError as NumPy does instead of giving meaningless numbers."""
    fn = getattr(xp.linalg, name)
    if xp is np or not check:
        return fn(*args)
    import cupyx  # noqa: PLC0415 - only on GPU devices

    with cupyx.errstate(linalg="raise"):
        return fn(*args)


def _eye_like(xp: Any, a: Array) -> Array:
    """Identity matrices with ``a``'s shape (..., M, M) and dtype, contiguous."""
    return xp.broadcast_to(xp.eye(a.shape[-1], dtype=a.dtype), a.shape).copy()


def _tri(xp: Any, a: Array, lower: bool) -> Array:
    return xp.tril(a) if lower else xp.triu(a)


def _symmetrize_lower(xp: Any, a: Array) -> Array:
    """The symmetric matrix whose lower triangle is ``a``'s (MXNet's results of syrk and potri are exactly so)."""
    return xp.tril(a) + _mT(xp.tril(a, -1))


def _solve_right(xp: Any, m: Array, b: Array, check: bool) -> Array:
    """``b @ inv(m)``: solves ``x m = b`` (as ``m^T x^T = b^T``)."""
    return _mT(_lapack(xp, "solve", _mT(m), _mT(b), check=check))


def _no_gradient(op: str, why: str) -> Callable[[Array], Any]:
    def backward(g: Array) -> Any:
        raise NotImplementedError(f"{op}: no gradient: {why}; compute it outside autograd.record(), or on a "
                                  "detach()ed input, if its result does not need to be differentiated")

    return backward


def _outputs(op: str, arrays: Sequence[Array], a: Tensor, parents: tuple[Tensor, ...],
             backward: Callable[[list[Array | None]], tuple[Array | None, ...]]) -> list[Tensor]:
    """One Tensor per array of a multi-output op. ``backward`` maps the outputs' cotangents (None: no gradient
    reached that output) to the parents' gradients. Each output records its own node passing its cotangent alone;
    a vector-Jacobian product is linear in the cotangents, so the engine's sum over the outputs is the gradient."""
    outs = []
    for i, data in enumerate(arrays):
        def one(g: Array, i: int = i) -> tuple[Array | None, ...]:
            cot: list[Array | None] = [None] * len(arrays)
            cot[i] = g
            return backward(cot)

        outs.append(op_result(op, data, a.device, parents, one))
    return outs


def _sign_by_largest(xp: Any, rows: Array) -> Array:
    """+1/-1 per row (..., k, n) making each row's largest-magnitude entry (the first, on ties) positive: MXNet's
    deterministic sign of singular and eigen vectors, so CPU and GPU results agree. Rows of length 0 (the vectors
    of an empty matrix) get +1."""
    if rows.shape[-1] == 0:
        return xp.ones(rows.shape[:-1], dtype=rows.dtype)
    idx = xp.argmax(xp.abs(rows), axis=-1)[..., None]
    pick = xp.take_along_axis(rows, idx, axis=-1)[..., 0]
    return xp.where(pick < 0, -1, 1).astype(rows.dtype)


# -- inverse, determinants, solve ---------------------------------------------------------------------------------
def inv(a: Any) -> Tensor:
    """The inverse of a square matrix, or of each matrix in a stack: ``(..., M, M) -> (..., M, M)``.

    Gradient: ``-inv(a)^T g inv(a)^T``.

    Raises:
        ValueError: ``a`` is not (a stack of) square matrices.
        numpy.linalg.LinAlgError: a singular matrix (as NumPy; MXNet returns inf/NaN), on CPU and GPU alike.
    """
    (a,) = _tensors(a)
    return _run("inv", _inv, ("inv", a), {})


def inverse(A: Any) -> Tensor:  # noqa: N803 - MXNet's name
    """MXNet 1.x ``linalg.inverse``: :func:`inv` of each matrix of ``A`` (..., M, M), with its gradient and errors."""
    (A,) = _tensors(A)
    return _run("inverse", _inv, ("inverse", A), {})


def _inv(op: str, a: Tensor) -> Tensor:
    _need_square(op, a)
    xp = a.device.xp
    y = _lapack(xp, "inv", _data(a, _dtype(op, a)))

    def backward(g: Array) -> tuple[Array]:
        yt = _mT(y)
        return (_grad_as(-_mm(_mm(yt, g), yt), a),)

    return op_result(op, y, a.device, (a,), backward)


def _inv_transpose_checked(op: str, xp: Any, a: Array) -> Array:
    """``inv(a)^T`` for a determinant's gradient; a singular ``a`` has none this way: LinAlgError naming ``op``."""
    try:
        return _mT(_lapack(xp, "inv", a))
    except np.linalg.LinAlgError as exc:
        raise np.linalg.LinAlgError(f"{op}: the gradient at a singular matrix is not computed ({exc}); its "
                                    "determinant is 0") from None


def det(a: Any) -> Tensor:
    """The determinant of each square matrix: ``(..., M, M) -> (...)``.

    A singular matrix gives 0, as NumPy. For one matrix the result has shape ``()`` in both faces (MXNet 1.x's
    ``nd.linalg.det`` gives ``(1,)``; mxlite's ``nd`` reductions give ``()`` throughout).

    Gradient: ``g * det(a) * inv(a)^T``; at a singular matrix backward raises LinAlgError.

    Raises:
        ValueError: ``a`` is not (a stack of) square matrices.
    """
    (a,) = _tensors(a)
    return _run("det", _det, (a,), {})


def _det(a: Tensor) -> Tensor:
    _need_square("det", a)
    xp = a.device.xp
    data = _data(a, _dtype("det", a))
    out = xp.asarray(_lapack(xp, "det", data, check=False))

    def backward(g: Array) -> tuple[Array]:
        return (_grad_as((g * out)[..., None, None] * _inv_transpose_checked("det", xp, data), a),)

    return op_result("det", out, a.device, (a,), backward)


def slogdet(a: Any) -> tuple[Tensor, Tensor]:
    """``(sign, logabsdet)`` of each square matrix: ``det = sign * exp(logabsdet)``, both of shape ``(...)``.

    A singular matrix gives ``(0, -inf)``, as NumPy. The sign has no gradient; ``logabsdet``'s is ``g * inv(a)^T``
    (LinAlgError at a singular matrix). For one matrix both have shape ``()`` (MXNet 1.x's nd face: ``(1,)``).

    Raises:
        ValueError: ``a`` is not (a stack of) square matrices.
    """
    (a,) = _tensors(a)
    return _run("slogdet", _slogdet, (a,), {})


def _slogdet(a: Tensor) -> tuple[Tensor, Tensor]:
    _need_square("slogdet", a)
    xp = a.device.xp
    data = _data(a, _dtype("slogdet", a))
    sign, logdet = (xp.asarray(r) for r in _lapack(xp, "slogdet", data, check=False))

    def backward(g: Array) -> tuple[Array]:
        return (_grad_as(g[..., None, None] * _inv_transpose_checked("slogdet", xp, data), a),)

    return Tensor(sign, a.device), op_result("slogdet", logdet, a.device, (a,), backward)


def solve(a: Any, b: Any) -> Tensor:
    """The solution ``x`` of ``a @ x = b`` for square ``a`` (..., M, M).

    ``b`` is a stack of vectors (..., M) when it has one dimension fewer than ``a`` (MXNet's rule) or is 1-D, else a
    stack of matrices (..., M, K); ``x`` has ``b``'s shape. Leading axes broadcast (MXNet requires them equal).

    Gradient: ``b_grad = solve(a^T, g)``, ``a_grad = -b_grad x^T``.

    Raises:
        ValueError: ``a`` not square, or ``b``'s shape does not fit ``a``'s (names both).
        numpy.linalg.LinAlgError: ``a`` is singular (as NumPy; MXNet returns inf/NaN), on CPU and GPU alike.
    """
    a, b = _tensors(a, b)
    return _run("solve", _solve, (a, b), {})


def _solve(a: Tensor, b: Tensor) -> Tensor:
    m = _need_square("solve", a)
    vector = b.ndim == 1 or b.ndim == a.ndim - 1
    rows = b.shape[-1] if vector else (b.shape[-2] if b.ndim >= 2 else None)
    if b.ndim == 0 or rows != m:
        raise _named(ValueError(f"solve: b must have shape (..., {m}) or (..., {m}, K) to match a of shape {a.shape} "
                                f"(b with one dimension fewer than a holds vectors), got b of shape {b.shape}"))
    xp = a.device.xp
    dtype = _dtype("solve", a, b)
    ad, bd = _data(a, dtype), _data(b, dtype)
    bm = bd[..., None] if vector else bd
    try:
        batch = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2])
    except ValueError:
        raise _named(ValueError(f"solve: the leading (batch) axes of a {a.shape} and b {b.shape} do not "
                                "broadcast")) from None
    ab = ad if ad.shape[:-2] == batch else xp.broadcast_to(ad, batch + ad.shape[-2:]).copy()
    bb = bm if bm.shape[:-2] == batch else xp.broadcast_to(bm, batch + bm.shape[-2:]).copy()
    x = _lapack(xp, "solve", ab, bb)
    out = x[..., 0] if vector else x

    def backward(g: Array) -> tuple[Array, Array]:
        gm = g[..., None] if vector else g
        gb = _lapack(xp, "solve", _mT(ab), gm, check=False)
        ga = -_mm(gb, _mT(x))
        gb = unbroadcast(gb, bm.shape)
        return _grad_as(unbroadcast(ga, a.shape), a), _grad_as(gb[..., 0] if vector else gb, b)

    return op_result("solve", out, a.device, (a, b), backward)


# -- Cholesky -----------------------------------------------------------------------------------------------------
def cholesky(a: Any, upper: bool = False) -> Tensor:
    """The Cholesky factor of each symmetric positive-definite matrix (..., M, M): lower ``L`` with
    ``a = L @ L^T`` (read from ``a``'s lower triangle), or with ``upper=True`` upper ``U`` with ``a = U^T @ U``
    (read from the upper triangle).

    Gradient: MXNet's symmetric one, ``sym(L^-T Phi(L^T g) L^-1) / 2`` with ``Phi`` the lower triangle at half
    diagonal: exact for symmetric perturbations of ``a``.

    Raises:
        ValueError: ``a`` is not (a stack of) square matrices.
        numpy.linalg.LinAlgError: a matrix that is not positive definite (NumPy and MXNet raise too).
    """
    (a,) = _tensors(a)
    return _run("cholesky", _cholesky, ("cholesky", a, not upper), {})


def potrf(A: Any, lower: bool = True) -> Tensor:  # noqa: N803 - MXNet's names
    """MXNet 1.x ``linalg.potrf``: the Cholesky factor of each matrix of ``A`` (..., M, M): ``A = B B^T`` with lower
    ``B`` (``lower=True``, MXNet's default) or ``A = B^T B`` with upper ``B``; the other triangle is zero.
    Gradient and errors as :func:`cholesky`."""
    (A,) = _tensors(A)
    return _run("potrf", _cholesky, ("potrf", A, lower), {})


def _cholesky(op: str, a: Tensor, lower: bool) -> Tensor:
    _need_square(op, a)
    xp = a.device.xp
    data = _data(a, _dtype(op, a))
    # The upper factor of a is the transpose of the lower factor of a^T (which reads a's upper triangle).
    low = _lapack(xp, "cholesky", data if lower else _mT(data))
    out = low if lower else _mT(low)

    def backward(g: Array) -> tuple[Array]:
        gl = g if lower else _mT(g)
        n = low.shape[-1]
        phi = xp.tril(xp.ones((n, n), dtype=low.dtype)) - 0.5 * xp.eye(n, dtype=low.dtype)
        p = _mm(_mT(low), gl) * phi                                            # Phi(L^T g)
        lt = _mT(low)
        s = _mT(_lapack(xp, "solve", lt, _mT(_lapack(xp, "solve", lt, p, check=False)), check=False))
        return (_grad_as(0.5 * (s + _mT(s)), a),)                             # L^-T Phi L^-1, symmetrised

    return op_result(op, out, a.device, (a,), backward)


def potri(A: Any, lower: bool = True) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.potri``: the inverse of ``B`` from its Cholesky factor ``A`` (..., M, M):
    ``A^-T A^-1`` for lower ``A`` (``lower=True``), ``A^-1 A^-T`` for upper. Only ``A``'s triangle is read; the
    result is exactly symmetric.

    Gradient: ``-tri(out (g + g^T) A^-T)`` (MXNet's; ``tri`` keeps the triangle that ``A`` uses).

    Raises:
        ValueError: ``A`` is not (a stack of) square matrices.
        numpy.linalg.LinAlgError: a zero on ``A``'s diagonal (MXNet returns inf/NaN).
    """
    (A,) = _tensors(A)
    return _run("potri", _potri, (A, lower), {})


def _potri(a: Tensor, lower: bool) -> Tensor:
    _need_square("potri", a)
    xp = a.device.xp
    data = _data(a, _dtype("potri", a))
    low = xp.tril(data) if lower else _mT(xp.triu(data))  # upper U is handled as L = U^T: (L L^T)^-1 either way
    low_inv = _lapack(xp, "solve", low, _eye_like(xp, low))
    out = _symmetrize_lower(xp, _mm(_mT(low_inv), low_inv))

    def backward(g: Array) -> tuple[Array]:
        w = _mm(out, g + _mT(g))
        gl = -xp.tril(_solve_right(xp, _mT(low), w, check=False))            # -tril(out (g + g^T) L^-T)
        return (_grad_as(gl if lower else _mT(gl), a),)

    return op_result("potri", out, a.device, (a,), backward)


# -- triangular products and solves (MXNet 1.x) --------------------------------------------------------------------
def trmm(A: Any, B: Any, transpose: bool = False, rightside: bool = False, lower: bool = True,  # noqa: N803
         alpha: float = 1.0) -> Tensor:
    """MXNet 1.x ``linalg.trmm``: ``alpha * op(A) @ B`` (or ``alpha * B @ op(A)`` with ``rightside``) for triangular
    ``A`` (..., M, M), of which only the lower (``lower=True``) or upper triangle is read; ``op`` transposes with
    ``transpose``. ``A`` and ``B`` have the same leading axes. Differentiable in both.

    Raises:
        ValueError: ``A`` not square, different leading axes, or ``B``'s matrix shape does not fit.
    """
    A, B = _tensors(A, B)
    return _run("trmm", _triangular, ("trmm", A, B, transpose, rightside, lower, float(alpha)), {})


def trsm(A: Any, B: Any, transpose: bool = False, rightside: bool = False, lower: bool = True,  # noqa: N803
         alpha: float = 1.0) -> Tensor:
    """MXNet 1.x ``linalg.trsm``: the solution ``X`` of ``op(A) @ X = alpha * B`` (or ``X @ op(A) = alpha * B`` with
    ``rightside``) for triangular ``A`` (..., M, M), of which only the lower (``lower=True``) or upper triangle is
    read. ``A`` and ``B`` have the same leading axes. Differentiable in both.

    Raises:
        ValueError: ``A`` not square, different leading axes, or ``B``'s matrix shape does not fit.
        numpy.linalg.LinAlgError: a zero on ``A``'s diagonal (BLAS, and so MXNet, returns inf/NaN).
    """
    A, B = _tensors(A, B)
    return _run("trsm", _triangular, ("trsm", A, B, transpose, rightside, lower, float(alpha)), {})


def _triangular(op: str, a: Tensor, b: Tensor, transpose: bool, rightside: bool, lower: bool,
                alpha: float) -> Tensor:
    m = _need_square(op, a, "A")
    _need_matrix(op, b, "B")
    _need_same_batch(op, {"A": a, "B": b})
    if b.shape[-1 if rightside else -2] != m:
        side = "columns" if rightside else "rows"
        raise _named(ValueError(f"{op}: B must have {m} {side} to match the triangular A of shape {a.shape} "
                                f"(rightside={rightside}), got B of shape {b.shape}"))
    xp = a.device.xp
    dtype = _dtype(op, a, b)
    mask = _tri(xp, _data(a, dtype), lower)
    mat = _mT(mask) if transpose else mask                                   # op(A)
    bd = _data(b, dtype)
    if op == "trmm":
        out = alpha * (_mm(bd, mat) if rightside else _mm(mat, bd))
    else:
        out = alpha * _solve_right(xp, mat, bd, True) if rightside else alpha * _lapack(xp, "solve", mat, bd)

    def backward(g: Array) -> tuple[Array, Array]:
        if op == "trmm":
            gb = alpha * (_mm(g, _mT(mat)) if rightside else _mm(_mT(mat), g))
            gm = alpha * (_mm(_mT(bd), g) if rightside else _mm(g, _mT(bd)))
        else:
            w = _solve_right(xp, _mT(mat), g, False) if rightside else _lapack(xp, "solve", _mT(mat), g, check=False)
            gb = alpha * w
            gm = -_mm(_mT(out), w) if rightside else -_mm(w, _mT(out))
        ga = _tri(xp, _mT(gm) if transpose else gm, lower)
        return _grad_as(ga, a), _grad_as(gb, b)

    return op_result(op, out, a.device, (a, b), backward)


# -- products (MXNet 1.x) ------------------------------------------------------------------------------------------
def gemm(A: Any, B: Any, C: Any, transpose_a: bool = False, transpose_b: bool = False,  # noqa: N803
         alpha: float = 1.0, beta: float = 1.0, axis: int = -2) -> Tensor:
    """MXNet 1.x ``linalg.gemm``: ``alpha * op(A) @ op(B) + beta * C`` for each matrix of a batch; ``op``
    transposes with ``transpose_a``/``transpose_b``.

    The matrices' columns are the last axis and their rows ``axis`` (default -2, the second to last): the other
    axes form the batch, equal in ``A``, ``B`` and ``C`` (no broadcasting, as MXNet). ``C`` has the result's shape.
    Differentiable in all three.

    Raises:
        ValueError: operands of different dimensions or batch axes, inner dimensions that differ, ``C`` of
            another shape than the product, or ``axis`` outside ``[-ndim, ndim - 2]`` (the last axis holds columns).
    """
    A, B, C = _tensors(A, B, C)
    return _gemm("gemm", A, B, C, transpose_a, transpose_b, float(alpha), float(beta), axis)


def gemm2(A: Any, B: Any, transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0,  # noqa: N803
          axis: int = -2) -> Tensor:
    """MXNet 1.x ``linalg.gemm2``: ``alpha * op(A) @ op(B)``, as :func:`gemm` without ``C``."""
    A, B = _tensors(A, B)
    return _gemm("gemm2", A, B, None, transpose_a, transpose_b, float(alpha), 0.0, axis)


def _gemm(op: str, a: Tensor, b: Tensor, c: Tensor | None, ta: bool, tb: bool, alpha: float, beta: float,
          axis: int) -> Tensor:
    named = {"A": a, "B": b} if c is None else {"A": a, "B": b, "C": c}
    for name, t in named.items():
        _need_matrix(op, t, name)
    if len({t.ndim for t in named.values()}) != 1:
        listed = ", ".join(f"{k} {t.shape}" for k, t in named.items())
        raise _named(ValueError(f"{op}: the operands must have the same number of dimensions, got {listed}"))
    ndim = a.ndim
    row = axis + ndim if axis < 0 else axis
    if not 0 <= row < ndim - 1:
        raise _named(ValueError(f"{op}: axis (the rows' axis) must lie in [{-ndim}, {ndim - 2}] for {ndim}-D operands "
                                f"(the last axis holds the columns), got {axis}"))
    if row == ndim - 2:
        return _run(op, _gemm_core, (op, a, b, c, ta, tb, alpha, beta), {})
    # MXNet's swapaxes/gemm/swapaxes, differentiable through the swaps.
    a, b, c = (None if t is None else _core.swapaxes(t, row, ndim - 2) for t in (a, b, c))
    return _core.swapaxes(_run(op, _gemm_core, (op, a, b, c, ta, tb, alpha, beta), {}), row, ndim - 2)


def _gemm_core(op: str, a: Tensor, b: Tensor, c: Tensor | None, ta: bool, tb: bool, alpha: float,
               beta: float) -> Tensor:
    parents = (a, b) if c is None else (a, b, c)
    _need_same_batch(op, dict(zip("ABC", parents)))
    xp = a.device.xp
    dtype = _dtype(op, *parents)
    opa = _mT(_data(a, dtype)) if ta else _data(a, dtype)
    opb = _mT(_data(b, dtype)) if tb else _data(b, dtype)
    if opa.shape[-1] != opb.shape[-2]:
        raise _named(ValueError(f"{op}: inner dimensions differ: op(A) is {opa.shape[-2]}x{opa.shape[-1]} (A "
                                f"{a.shape}, transpose_a={ta}), op(B) is {opb.shape[-2]}x{opb.shape[-1]} (B {b.shape}, "
                                f"transpose_b={tb})"))
    out = alpha * _mm(opa, opb)
    if c is not None:
        if c.shape != out.shape:
            raise _named(ValueError(f"{op}: C must have the product's shape {tuple(out.shape)}, got C of shape "
                                    f"{c.shape}"))
        out = out + beta * _data(c, dtype)

    def backward(g: Array) -> tuple[Array, ...]:
        gopa = alpha * _mm(g, _mT(opb))
        gopb = alpha * _mm(_mT(opa), g)
        grads = [_grad_as(_mT(gopa) if ta else gopa, a), _grad_as(_mT(gopb) if tb else gopb, b)]
        if c is not None:
            grads.append(_grad_as(beta * g, c))
        return tuple(grads)

    return op_result(op, xp.asarray(out), a.device, parents, backward)


def syrk(A: Any, transpose: bool = False, alpha: float = 1.0) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.syrk``: ``alpha * A @ A^T`` (or ``alpha * A^T @ A`` with ``transpose``) for each matrix of
    ``A`` (..., M, N); the result is exactly symmetric. Gradient: ``alpha (g + g^T) A`` (resp. ``alpha A (g + g^T)``).

    Raises:
        ValueError: ``A`` has fewer than 2 dimensions.
    """
    (A,) = _tensors(A)
    return _run("syrk", _syrk, (A, transpose, float(alpha)), {})


def _syrk(a: Tensor, transpose: bool, alpha: float) -> Tensor:
    _need_matrix("syrk", a, "A")
    xp = a.device.xp
    data = _data(a, _dtype("syrk", a))
    out = _symmetrize_lower(xp, alpha * (_mm(_mT(data), data) if transpose else _mm(data, _mT(data))))

    def backward(g: Array) -> tuple[Array]:
        gs = g + _mT(g)
        return (_grad_as(alpha * (_mm(data, gs) if transpose else _mm(gs, data)), a),)

    return op_result("syrk", out, a.device, (a,), backward)


# -- diagonals and triangles (MXNet 1.x) ---------------------------------------------------------------------------
def _diag_index(n: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of diagonal ``offset`` of an n x n matrix (0 main, > 0 above, < 0 below)."""
    i = np.arange(n - abs(offset))
    return (i - _b.min(offset, 0), i + _b.max(offset, 0))


def _trian_index(n: int, offset: int, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the triangle MXNet's extracttrian packs, in its order.

    Lower triangles (``offset < 0``, or 0 with ``lower``) are packed row by row: for an (n - |offset|) triangle,
    row r holds r + 1 entries. Upper ones (``offset > 0``, or 0 without ``lower``) are the transposed case: packed
    column by column.
    """
    m = n - abs(offset)
    r = np.repeat(np.arange(m), np.arange(1, m + 1))           # r' = 0, 1, 1, 2, 2, 2, ...
    c = np.concatenate([np.arange(k + 1) for k in range(m)]) if m else np.zeros(0, np.int64)
    if offset < 0 or (offset == 0 and lower):
        return r + abs(offset), c
    return c, r + abs(offset)


def _gather(op: str, a: Tensor, rows: np.ndarray, cols: np.ndarray) -> Tensor:
    """``a[..., rows, cols]`` (the entries listed, along a new last axis), differentiable."""
    xp = a.device.xp
    ri, ci = xp.asarray(rows), xp.asarray(cols)
    data = _data(a, _dtype(op, a))
    shape = data.shape

    def backward(g: Array) -> tuple[Array]:
        ga = xp.zeros(shape, dtype=g.dtype)
        ga[..., ri, ci] = g                                        # the listed entries are distinct
        return (_grad_as(ga, a),)

    return op_result(op, data[..., ri, ci], a.device, (a,), backward)


def _scatter(op: str, a: Tensor, rows: np.ndarray, cols: np.ndarray, n: int) -> Tensor:
    """An (..., n, n) zero matrix with the last axis of ``a`` written at ``(rows, cols)``, differentiable."""
    xp = a.device.xp
    ri, ci = xp.asarray(rows), xp.asarray(cols)
    data = _data(a, _dtype(op, a))
    out = xp.zeros(data.shape[:-1] + (n, n), dtype=data.dtype)
    out[..., ri, ci] = data
    return op_result(op, out, a.device, (a,), lambda g: (_grad_as(g[..., ri, ci], a),))


def _need_offset(op: str, a: Tensor, offset: int) -> int:
    n = _need_square(op, a, "A")
    if abs(offset) >= n:
        raise _named(ValueError(f"{op}: offset {offset} is out of range for matrices of size {n}x{n} (A {a.shape}); "
                                f"|offset| must be below {n}"))
    return n


def extractdiag(A: Any, offset: int = 0) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.extractdiag``: diagonal ``offset`` (0 main, > 0 above, < 0 below) of each square matrix of
    ``A`` (..., M, M), as (..., M - |offset|). Differentiable.

    Raises:
        ValueError: ``A`` not (a stack of) square matrices, or ``|offset| >= M``.
    """
    (A,) = _tensors(A)
    return _run("extractdiag", _extractdiag, (A, int(offset)), {})


def _extractdiag(a: Tensor, offset: int) -> Tensor:
    n = _need_offset("extractdiag", a, offset)
    return _gather("extractdiag", a, *_diag_index(n, offset))


def makediag(A: Any, offset: int = 0) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.makediag``: square matrices (..., N + |offset|, N + |offset|) of zeros with ``A``'s last
    axis (..., N) on diagonal ``offset``. Differentiable.

    Raises:
        ValueError: ``A`` is 0-D.
    """
    (A,) = _tensors(A)
    return _run("makediag", _makediag, (A, int(offset)), {})


def _makediag(a: Tensor, offset: int) -> Tensor:
    if a.ndim < 1:
        raise _named(ValueError(f"makediag: A must have at least 1 dimension (the diagonal's entries), got shape "
                                f"{a.shape}"))
    n = a.shape[-1] + abs(offset)
    return _scatter("makediag", a, *_diag_index(n, offset), n)


def extracttrian(A: Any, offset: int = 0, lower: bool = True) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.extracttrian``: a triangle of each square matrix of ``A`` (..., M, M) packed into the last
    axis, in MXNet's order: the lower triangle row by row (``offset < 0``: below diagonal ``offset``; 0 with
    ``lower``: including the main diagonal), or the upper one column by column (``offset > 0``, or 0 without
    ``lower``). The result has (..., K) with K = m(m+1)/2, m = M - |offset|. Differentiable.

    Raises:
        ValueError: ``A`` not (a stack of) square matrices, or ``|offset| >= M``.
    """
    (A,) = _tensors(A)
    return _run("extracttrian", _extracttrian, (A, int(offset), bool(lower)), {})


def _extracttrian(a: Tensor, offset: int, lower: bool) -> Tensor:
    n = _need_offset("extracttrian", a, offset)
    return _gather("extracttrian", a, *_trian_index(n, offset, lower))


def maketrian(A: Any, offset: int = 0, lower: bool = True) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.maketrian``: the inverse of :func:`extracttrian`: square matrices (..., m + |offset|,
    m + |offset|) of zeros holding the packed triangle ``A`` (..., m(m+1)/2). Differentiable.

    Raises:
        ValueError: ``A``'s last axis is not a triangular number m(m+1)/2.
    """
    (A,) = _tensors(A)
    return _run("maketrian", _maketrian, (A, int(offset), bool(lower)), {})


def _maketrian(a: Tensor, offset: int, lower: bool) -> Tensor:
    k = a.shape[-1] if a.ndim else -1
    m = int((np.sqrt(8 * k + 1) - 1) // 2) if k >= 0 else -1
    if m < 1 or m * (m + 1) // 2 != k:
        raise _named(ValueError(f"maketrian: the last axis of A must hold a triangle, m(m+1)/2 entries for some m >= 1 "
                                f"(1, 3, 6, 10, ...), got A of shape {a.shape}"))
    n = m + abs(offset)
    return _scatter("maketrian", a, *_trian_index(n, offset, lower), n)


def sumlogdiag(A: Any) -> Tensor:  # noqa: N803
    """MXNet 1.x ``linalg.sumlogdiag``: the sum of the natural logarithms of each square matrix's diagonal, shape
    (...); for one matrix ``()`` (MXNet 1.x: ``(1,)``). The diagonal must be positive (else NaN or -inf, as
    ``log``). Gradient: ``g / diag(A)`` on the diagonal.

    Raises:
        ValueError: ``A`` is not (a stack of) square matrices.
    """
    (A,) = _tensors(A)
    _need_square("sumlogdiag", A, "A")
    return _core.sum(_core.log(extractdiag(A)), axis=-1)


# -- decompositions (MXNet 2.x np.linalg) ---------------------------------------------------------------------------
def svd(a: Any) -> tuple[Tensor, Tensor, Tensor]:
    """Singular value decomposition as MXNet 2.x's ``np.linalg.svd(a)``: ``(ut, s, v)`` with
    ``a = ut @ (s[..., None] * v)``, for ``a`` (..., M, N) and K = min(M, N): ``ut`` (..., M, K) with orthonormal
    columns, ``s`` (..., K) descending, ``v`` (..., K, N) with orthonormal rows.

    MXNet requires M <= N (``ut`` is then square); M > N is accepted here as well (the reduced SVD). Signs are
    MXNet's: each row of ``v`` has its largest-magnitude entry positive (NumPy's signs may differ), so CPU and GPU
    agree. This is NumPy's ``svd(a, full_matrices=False)`` up to those signs.

    Gradient (MXNet has one): the standard formula for the reduced SVD; singular values that coincide or vanish
    make it ill-defined, and they are kept apart by the smallest normal float, as MXNet does.

    Raises:
        ValueError: ``a`` has fewer than 2 dimensions.
        numpy.linalg.LinAlgError: the decomposition did not converge.
    """
    (a,) = _tensors(a)
    return _run("svd", _svd, (a,), {})


def _svd(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _need_matrix("svd", a)
    xp = a.device.xp
    data = _data(a, _dtype("svd", a))
    u, s, vt = _lapack(xp, "svd", data, False)
    sign = _sign_by_largest(xp, vt)
    u, vt = u * sign[..., None, :], vt * sign[..., :, None]

    def backward(cot: list[Array | None]) -> tuple[Array]:
        return (_grad_as(_svd_grad(xp, u, s, vt, *cot), a),)

    return tuple(_outputs("svd", (u, s, vt), a, (a,), backward))


def _svd_grad(xp: Any, u: Array, s: Array, vt: Array, gu: Array | None, gs: Array | None,
              gvt: Array | None) -> Array:
    """The gradient of ``a = u diag(s) vt`` (reduced SVD, u (m, k), vt (k, n)) given the outputs' cotangents.

    With F_ij = 1 / (s_j^2 - s_i^2) off the diagonal (0 on it):
    ``u [ (F o (u^T gu - gu^T u)) S + diag(gs) + S (F o (v^T gv - gv^T v)) ] vt
    + (I - u u^T) gu S^-1 vt + u S^-1 gvt (I - v v^T)``.
    """
    k = s.shape[-1]
    tiny = np.finfo(s.dtype).tiny
    inner = xp.zeros(s.shape + (k,), dtype=s.dtype)
    if gs is not None:
        inner = inner + xp.eye(k, dtype=s.dtype) * gs[..., None, :]
    if gu is not None or gvt is not None:
        denom = s[..., None, :] ** 2 - s[..., :, None] ** 2                  # s_j^2 - s_i^2 at [i, j]
        denom = xp.where(xp.abs(denom) < tiny, tiny, denom)
        f = xp.where(xp.eye(k, dtype=bool), 0, 1 / denom).astype(s.dtype)
    s_inv = 1 / xp.maximum(s, tiny)
    ga = 0
    if gu is not None:
        utg = _mm(_mT(u), gu)
        inner = inner + f * (utg - _mT(utg)) * s[..., None, :]              # (F o ...) S
        if u.shape[-2] > k:
            ga = ga + _mm((gu - _mm(u, _mm(_mT(u), gu))) * s_inv[..., None, :], vt)
    if gvt is not None:
        vtg = _mm(vt, _mT(gvt))
        inner = inner + s[..., :, None] * (f * (vtg - _mT(vtg)))            # S (F o ...)
        if vt.shape[-1] > k:
            ga = ga + _mm(u, s_inv[..., :, None] * (gvt - _mm(_mm(gvt, _mT(vt)), vt)))
    return _mm(_mm(u, inner), vt) + ga


def eigh(a: Any, UPLO: str = "L", upper: bool | None = None) -> tuple[Tensor, Tensor]:  # noqa: N803 - NumPy's name
    """Eigenvalues (ascending) and eigenvectors of each real symmetric matrix (..., M, M): ``(w, v)`` with
    ``a @ v[..., :, i] = w[..., i] * v[..., :, i]``, reading the lower triangle (``UPLO='L'``) or the upper one
    (``'U'``; MXNet's newer ``upper=True`` says the same). Signs are MXNet's: each eigenvector's largest-magnitude
    entry is positive (NumPy's may differ), so CPU and GPU agree.

    No gradient (MXNet's has none): back-propagating through ``w`` or ``v`` raises NotImplementedError.

    Raises:
        ValueError: ``a`` not (a stack of) square matrices, or ``UPLO`` not 'L'/'U'.
        numpy.linalg.LinAlgError: the computation did not converge.
    """
    (a,) = _tensors(a)
    if upper is not None:
        UPLO = "U" if upper else "L"
    if UPLO not in ("L", "U"):
        raise _named(ValueError(f"eigh: UPLO must be 'L' or 'U', got {UPLO!r}"))
    return _run("eigh", _eigh, (a, UPLO), {})


def _eigh(a: Tensor, uplo: str) -> tuple[Tensor, Tensor]:
    _need_square("eigh", a)
    xp = a.device.xp
    w, v = _lapack(xp, "eigh", _data(a, _dtype("eigh", a)), uplo)
    v = v * _sign_by_largest(xp, _mT(v))[..., None, :]
    back = _no_gradient("eigh", "MXNet's np.linalg.eigh has none either")
    return op_result("eigh", w, a.device, (a,), back), op_result("eigh", v, a.device, (a,), back)


def qr(a: Any, mode: str = "reduced") -> Any:
    """QR factorisation of each matrix (..., M, N), K = min(M, N): ``(q, r)`` with orthonormal columns in ``q``
    (..., M, K) and upper-triangular ``r`` (..., K, N) for ``mode='reduced'`` (MXNet's only mode);
    ``'complete'`` gives ``q`` (..., M, M) and ``r`` (..., M, N); ``'r'`` gives ``r`` alone. Signs as LAPACK's.

    Gradient (mode 'reduced', as MXNet): well defined when the first K columns of ``a`` are linearly independent.
    Other modes have none (NotImplementedError on backward).

    Raises:
        ValueError: ``a`` has fewer than 2 dimensions, or an unknown ``mode`` ('raw' is not offered).
        numpy.linalg.LinAlgError: the factorisation failed.
    """
    (a,) = _tensors(a)
    if mode not in ("reduced", "complete", "r"):
        raise _named(ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}"))
    return _run("qr", _qr, (a, mode), {})


def _qr(a: Tensor, mode: str) -> Any:
    _need_matrix("qr", a)
    xp = a.device.xp
    data = _data(a, _dtype("qr", a))
    if mode == "r":
        r = _lapack(xp, "qr", data, "r")
        return op_result("qr", r, a.device, (a,), _no_gradient("qr", "only mode='reduced' has one (as in MXNet)"))
    q, r = _lapack(xp, "qr", data, mode)
    if mode == "complete":
        back = _no_gradient("qr", "only mode='reduced' has one (as in MXNet)")
        return op_result("qr", q, a.device, (a,), back), op_result("qr", r, a.device, (a,), back)

    def backward(cot: list[Array | None]) -> tuple[Array]:
        return (_grad_as(_qr_grad(xp, data, q, r, *cot), a),)

    return tuple(_outputs("qr", (q, r), a, (a,), backward))


def _qr_grad(xp: Any, a: Array, q: Array, r: Array, gq: Array | None, gr: Array | None) -> Array:
    """The gradient of the reduced ``a = q r``. For M >= N: ``(gq + q copyltu(M)) r^-T`` with
    ``M = r gr^T - gq^T q`` and ``copyltu`` mirroring the lower triangle; for M < N, ``a = [x | y]`` and
    ``r = [u | v]``: x's gradient is that of ``x = q u`` with ``gq + y gv^T``, y's is ``q gv``."""
    m, n = a.shape[-2:]
    if m < n:
        y = a[..., :, m:]
        gu = None if gr is None else gr[..., :, :m]
        gv = xp.zeros(y.shape[:-2] + (m, n - m), dtype=a.dtype) if gr is None else gr[..., :, m:]
        gq2 = _mm(y, _mT(gv)) if gq is None else gq + _mm(y, _mT(gv))
        gx = _qr_grad(xp, a[..., :, :m], q, r[..., :, :m], gq2, gu)
        return xp.concatenate([gx, _mm(q, gv)], axis=-1)
    k = r.shape[-1]
    mm = xp.zeros(r.shape[:-2] + (k, k), dtype=r.dtype)
    if gr is not None:
        mm = mm + _mm(r, _mT(gr))
    if gq is not None:
        mm = mm - _mm(_mT(gq), q)
    b = _mm(q, xp.tril(mm) + _mT(xp.tril(mm, -1)))
    if gq is not None:
        b = b + gq
    return _solve_right(xp, _mT(r), b, check=False)                        # b r^-T


# -- least squares, pseudo-inverse ---------------------------------------------------------------------------------
def _rcond_value(rcond: Any, dtype: np.dtype, m: int, n: int) -> float:
    eps = float(np.finfo(dtype).eps)
    if rcond is None:
        return eps * max(m, n)                                              # NumPy 2's default
    if isinstance(rcond, str):
        if rcond != "warn":
            raise _named(ValueError(f"lstsq: rcond must be a number, None or 'warn', got {rcond!r}"))
        return eps                                                          # MXNet's default: machine precision
    rcond = float(rcond)
    return eps if rcond < 0 else rcond                                      # LAPACK: negative means eps


def lstsq(a: Any, b: Any, rcond: Any = "warn") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The least-squares solution of ``a @ x = b`` for ``a`` (M, N) and ``b`` (M,) or (M, K), as MXNet 2.x's
    ``np.linalg.lstsq``: ``(x, residuals, rank, s)``.

    ``x`` (N,) or (N, K) is the minimum-norm solution; ``residuals`` the squared norm of each column of
    ``b - a @ x``, shape (K,) ((1,) for 1-D ``b``), or empty (0,) when rank < N or M <= N; ``rank`` a 0-d int64
    tensor; ``s`` the singular values (min(M, N),). Singular values ``<= rcond * s.max()`` count as zero: ``rcond``
    'warn' (MXNet's default) or a negative number means the dtype's machine epsilon, None (NumPy 2's default)
    epsilon times max(M, N). Computed from the SVD on every device, so CPU and GPU agree; the rank and the
    residuals' shape need one read of the rank by the host on a GPU.

    No gradient (MXNet's has none): back-propagating through the results raises NotImplementedError.

    Raises:
        ValueError: ``a`` is not 2-D, or ``b`` is not (M,) or (M, K).
    """
    a, b = _tensors(a, b)
    return _run("lstsq", _lstsq, (a, b, rcond), {})


def _lstsq(a: Tensor, b: Tensor, rcond: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise _named(ValueError(f"lstsq: a must be one matrix (M, N) and b of shape (M,) or (M, K) with the same "
                                f"M; got a {a.shape}, b {b.shape}"))
    xp = a.device.xp
    dtype = _dtype("lstsq", a, b)
    ad, bd = _data(a, dtype), _data(b, dtype)
    m, n = a.shape
    u, s, vt = _lapack(xp, "svd", ad, False)
    keep = s > _rcond_value(rcond, dtype, m, n) * (s.max() if s.size else 0)
    s_inv = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(dtype)
    rank = keep.sum().astype(np.int64)
    bm = bd[:, None] if b.ndim == 1 else bd
    x = _mm(_mT(vt), s_inv[:, None] * _mm(_mT(u), bm))
    if m > n and int(rank) == n:
        residuals = ((bm - _mm(ad, x)) ** 2).sum(axis=0)
    else:
        residuals = xp.zeros((0,), dtype=dtype)
    back = _no_gradient("lstsq", "MXNet's np.linalg.lstsq has none either")
    parents = (a, b)
    return (op_result("lstsq", x[:, 0] if b.ndim == 1 else x, a.device, parents, back),
            op_result("lstsq", residuals, a.device, parents, back),
            Tensor(xp.asarray(rank), a.device),
            op_result("lstsq", s, a.device, parents, back))


def pinv(a: Any, rcond: Any = 1e-15, hermitian: bool = False) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix (..., M, N) -> (..., N, M), from its SVD: singular values
    ``<= rcond * largest`` count as zero; ``rcond`` may be a number, an array broadcasting against the stack
    (...), or None (NumPy 2's default: epsilon times max(M, N)). ``hermitian=True`` is accepted (MXNet refuses
    it) and computes the same thing by the general SVD.

    No gradient (MXNet's has none): back-propagating through the result raises NotImplementedError.

    Raises:
        ValueError: ``a`` has fewer than 2 dimensions.
        numpy.linalg.LinAlgError: the SVD did not converge.
    """
    array_rcond = rcond is not None and not isinstance(rcond, numbers.Number)
    a, rc = _tensors(a, rcond if array_rcond else None)
    return _run("pinv", _pinv, (a, rc if array_rcond else rcond), {})


def _pinv(a: Tensor, rcond: Any) -> Tensor:
    _need_matrix("pinv", a)
    xp = a.device.xp
    dtype = _dtype("pinv", a)
    data = _data(a, dtype)
    back = _no_gradient("pinv", "MXNet's np.linalg.pinv has none either")
    if data.size == 0:
        return op_result("pinv", xp.zeros(data.shape[:-2] + data.shape[-2:][::-1], dtype=dtype), a.device, (a,), back)
    u, s, vt = _lapack(xp, "svd", data, False)
    if rcond is None:                                                       # NumPy 2's default
        rc = float(np.finfo(dtype).eps) * max(data.shape[-2:])
    else:
        rc = rcond._data.astype(dtype)[..., None] if isinstance(rcond, Tensor) else float(rcond)
    keep = s > rc * s.max(axis=-1, keepdims=True)
    s_inv = xp.where(keep, 1 / xp.where(keep, s, 1), 0).astype(dtype)
    return op_result("pinv", _mm(_mT(vt), s_inv[..., :, None] * _mT(u)), a.device, (a,), back)


# -- norms --------------------------------------------------------------------------------------------------------
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A002 - NumPy's name
    """Vector or matrix norm, as NumPy's ``linalg.norm`` (and MXNet 2.x's), differentiable.

    ``axis`` None: the 2-norm of all entries when ``ord`` is None (or 'fro' for a matrix, 2 for a vector), else
    ``x`` must be 1-D (vector norm) or 2-D (matrix norm). An int: vector norms along it; a pair: matrix norms.
    Vector ``ord``: None/2, 1, inf, -inf, 0 (count of non-zeros, no gradient), any other number p
    ``(sum |x|^p)^(1/p)``. Matrix ``ord``: None/'fro', 'nuc', 1/-1 (max/min column sum), inf/-inf (max/min row
    sum), 2/-2 (largest/smallest singular value). 'inf'/'-inf' strings are accepted as MXNet does. Integer inputs
    are computed in float64.

    Same results as mxlite's earlier ``np.linalg.norm`` wherever that agreed with NumPy (``ord`` None or 'fro'
    anywhere, 1 and 2 along one axis or of a vector); matrix ``ord`` 1/2 now give NumPy's matrix norms.

    Raises:
        ValueError: an ``ord`` that has no meaning for the chosen axes, repeated axes, or more than two axes.
    """
    (x,) = _tensors(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = _core.astype(x, np.float64)
    ord = {"inf": np.inf, "-inf": -np.inf}.get(ord, ord) if isinstance(ord, str) else ord  # noqa: A001
    if axis is None:
        flat = ord is None or (ord in ("f", "fro") and x.ndim == 2) or (ord == 2 and x.ndim == 1)
        if flat:
            out = _euclidean(x, tuple(range(x.ndim)))
            return _core.reshape(out, (1,) * x.ndim) if keepdims else out
        axes = tuple(range(x.ndim))
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(ax) % x.ndim if x.ndim else int(ax) for ax in axes)
    if len(axes) == 1:
        out = _vector_norm(x, ord, axes[0], keepdims)
    elif len(axes) == 2:
        if axes[0] == axes[1]:
            raise _named(ValueError(f"norm: duplicate axes given: {axis}"))
        out = _matrix_norm(x, ord, axes[0], axes[1])
        if keepdims:
            shape = list(out.shape)
            for ax in sorted(axes):
                shape.insert(ax, 1)
            out = _core.reshape(out, tuple(shape))
    else:
        raise _named(ValueError(f"norm: improper number of dimensions to norm: {len(axes)} axes of x {x.shape} "
                                f"(axis={axis}, ord={ord!r}); give axis=None with ord=None, one axis (vectors) or "
                                "two (matrices)"))
    return out


def _euclidean(x: Tensor, axes: tuple[int, ...], keepdims: bool = False) -> Tensor:
    """``sqrt(sum(x**2))`` over ``axes``; over no elements, the sum alone (0, in the graph), so the backward pass
    does not divide by the zero norm of nothing."""
    if any(x.shape[ax] == 0 for ax in axes):
        return _core.sum(x, axis=axes, keepdims=keepdims)
    return _core.sqrt(_core.sum(_core.square(x), axis=axes, keepdims=keepdims))


def _largest(values: Tensor, axis: int, keepdims: bool = False) -> Tensor:
    """The maximum of non-negative ``values`` along ``axis``; 0 along an empty axis (NumPy's ``initial=0``), where
    the sum, also 0, keeps the result in the graph."""
    if values.shape[axis] == 0:
        return _core.sum(values, axis=axis, keepdims=keepdims)
    return _core.max(values, axis=axis, keepdims=keepdims)


def _smallest(values: Tensor, axis: int, ord: Any, x: Tensor, keepdims: bool = False) -> Tensor:  # noqa: A002
    """The minimum of ``values`` along ``axis`` for the norm ``ord`` of ``x``.

    Raises:
        ValueError: the axis is empty (the minimum of no values is undefined, as NumPy says), naming ``ord`` and
            ``x``'s shape.
    """
    if values.shape[axis] == 0:
        raise _named(ValueError(f"norm: ord={ord!r} takes a minimum over an empty axis of x (shape {x.shape}), "
                                "and the minimum of no values is undefined (as in NumPy); ord None, 'fro', 'nuc', "
                                "1, 2 and inf give 0 for an empty array"))
    return _core.min(values, axis=axis, keepdims=keepdims)


def _vector_norm(x: Tensor, ord: Any, ax: int, keepdims: bool) -> Tensor:  # noqa: A002
    if ord is None or ord == 2:
        return _euclidean(x, (ax,), keepdims)
    if isinstance(ord, str):
        raise _named(ValueError(f"norm: invalid norm order {ord!r} for vectors"))
    if ord == np.inf:
        return _largest(_core.abs(x), ax, keepdims)
    if ord == -np.inf:
        return _smallest(_core.abs(x), ax, ord, x, keepdims)
    if ord == 0:
        return _core.sum(_core.astype(_core.not_equal(x, 0), x.dtype), axis=ax, keepdims=keepdims)
    if ord == 1:
        return _core.sum(_core.abs(x), axis=ax, keepdims=keepdims)
    p = float(ord)
    return _core.power(_core.sum(_core.power(_core.abs(x), p), axis=ax, keepdims=keepdims), 1.0 / p)


def _matrix_norm(x: Tensor, ord: Any, row: int, col: int) -> Tensor:  # noqa: A002
    if ord in (2, -2, "nuc"):
        order = [i for i in range(x.ndim) if i not in (row, col)] + [row, col]
        s = svd(_core.transpose(x, tuple(order)))[1]
        return _largest(s, -1) if ord == 2 else _smallest(s, -1, ord, x) if ord == -2 else _core.sum(s, axis=-1)
    if ord in (None, "fro", "f"):
        return _euclidean(x, (row, col))
    if ord in (1, -1):   # column sums: sum over the rows' axis, then the extreme over the columns
        sums = _core.sum(_core.abs(x), axis=row)
        col -= 1 if col > row else 0
        return _largest(sums, col) if ord == 1 else _smallest(sums, col, ord, x)
    if ord in (np.inf, -np.inf):
        sums = _core.sum(_core.abs(x), axis=col)
        row -= 1 if row > col else 0
        return _largest(sums, row) if ord == np.inf else _smallest(sums, row, ord, x)
    raise _named(ValueError(f"norm: invalid norm order {ord!r} for matrices (None, 'fro', 'nuc', 1, -1, 2, -2, "
                            "inf, -inf)"))


# -- the two faces ------------------------------------------------------------------------------------------------
NP_LINALG = ["norm", "solve", "inv", "cholesky", "det", "slogdet", "lstsq", "svd", "eigh", "qr", "pinv"]
"""The names ``mx.np.linalg`` exposes (MXNet 2.x)."""

ND_LINALG = ["gemm", "gemm2", "potrf", "potri", "trmm", "trsm", "syrk", "sumlogdiag", "extractdiag", "makediag",
             "extracttrian", "maketrian", "inverse", "det", "slogdet"]
"""The names ``mx.nd.linalg`` exposes (MXNet 1.x)."""
