"""``cupy.linalg``: NumPy's linear algebra on the current emulated GPU (CuPy's parameters).

Results are plain tuples of device arrays where CuPy returns tuples (NumPy's named tuples would leak host arrays).

Failures are stricter than a GPU. Where NumPy raises ``LinAlgError`` (a singular matrix, one that is not positive
definite, no convergence), real CuPy skips cuSOLVER's error flag unless ``cupyx.errstate(linalg='raise')`` (or
``cupyx.seterr``) asks it to read it (a host synchronisation), and otherwise hands back meaningless numbers without a
word. The double raises ``LinAlgError`` under ``'raise'``, as CuPy then does, and ``EmulatedGPUError`` under CuPy's
default ``'ignore'``, naming the call, so a program that would silently compute with garbage on a GPU fails here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _core, _errors

__all__ = ["norm", "inv", "solve", "det", "slogdet", "svd", "qr", "cholesky", "eigh", "eigvalsh", "pinv",
           "matrix_power", "lstsq", "matrix_rank", "LinAlgError"]

LinAlgError = np.linalg.LinAlgError  # real CuPy re-exports NumPy's class


class _Config(threading.local):
    """cupyx's ``linalg`` error setting, per thread as in CuPy ('ignore' is CuPy's default)."""

    def __init__(self) -> None:
        self.linalg = "ignore"


_config = _Config()


def _run(name: str, *args: Any, fn: Callable[..., Any] | None = None) -> Any:
    return _core.apply(f"linalg.{name}", _checked(name, fn or getattr(np.linalg, name)), args, {})


def _checked(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with NumPy's named-tuple results made plain tuples and its LinAlgError handled as described above."""

    def run(*args: Any) -> Any:
        try:
            result = fn(*args)
        except np.linalg.LinAlgError as exc:
            if _config.linalg == "raise":
                raise
            raise _errors.EmulatedGPUError(
                f"cupy.linalg.{name}: {exc}. On a real GPU this call returns meaningless numbers without an error "
                "(CuPy does not read cuSOLVER's error flag under its default cupyx.seterr(linalg='ignore')); check "
                "inside `with cupyx.errstate(linalg='raise'):` to get LinAlgError, as NumPy raises") from None
        return tuple(result) if isinstance(result, tuple) else result

    return run


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
    return _run("matrix_rank", M, tol, fn=lambda m, t: np.linalg.matrix_rank(m, tol=t))
