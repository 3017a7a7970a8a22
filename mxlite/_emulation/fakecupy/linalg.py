"""``cupy.linalg``: NumPy's linear algebra on the current emulated GPU (CuPy's parameters)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = ["norm", "inv", "solve", "det", "slogdet", "svd", "qr", "cholesky", "eigh", "eigvalsh", "pinv",
           "matrix_power", "lstsq", "matrix_rank"]


def _run(name: str, *args: Any) -> Any:
    return _core.apply(f"linalg.{name}", getattr(np.linalg, name), args, {})


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A002 - NumPy's name
    """Matrix or vector norm."""
    return _run("norm", x, ord, axis, keepdims)


def inv(a: Any) -> Any:
    """Matrix inverse."""
    return _run("inv", a)


def solve(a: Any, b: Any) -> Any:
    """Solution of ``a @ x = b``."""
    return _run("solve", a, b)


def det(a: Any) -> Any:
    """Determinant."""
    return _run("det", a)


def slogdet(a: Any) -> Any:
    """Sign and log of the determinant."""
    return _run("slogdet", a)


def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """Singular value decomposition."""
    return _run("svd", a, full_matrices, compute_uv)


def qr(a: Any, mode: str = "reduced") -> Any:
    """QR decomposition."""
    return _run("qr", a, mode)


def cholesky(a: Any) -> Any:
    """Cholesky factor."""
    return _run("cholesky", a)


def eigh(a: Any, UPLO: str = "L") -> Any:  # noqa: N803 - NumPy's name
    """Eigen-decomposition of a symmetric matrix."""
    return _run("eigh", a, UPLO)


def eigvalsh(a: Any, UPLO: str = "L") -> Any:  # noqa: N803
    """Eigenvalues of a symmetric matrix."""
    return _run("eigvalsh", a, UPLO)


def pinv(a: Any, rcond: float = 1e-15) -> Any:
    """Pseudo-inverse."""
    return _run("pinv", a, rcond)


def matrix_power(M: Any, n: int) -> Any:  # noqa: N803
    """``M`` to the integer power ``n``."""
    return _run("matrix_power", M, n)


def lstsq(a: Any, b: Any, rcond: Any = None) -> Any:
    """Least-squares solution."""
    return _run("lstsq", a, b, rcond)


def matrix_rank(M: Any, tol: Any = None) -> Any:  # noqa: N803
    """Rank of a matrix."""
    return _core.apply("linalg.matrix_rank", lambda m, t: np.linalg.matrix_rank(m, tol=t), (M, tol), {})
