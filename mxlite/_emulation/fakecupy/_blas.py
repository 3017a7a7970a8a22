"""What CuPy's cuBLAS calls compute, for the double's ``matmul``, ``dot`` and ``@`` (NumPy's loops otherwise)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["half_in_float32"]


def half_in_float32(func: Any) -> Any:
    """``func`` (NumPy's ``matmul`` or ``dot``) computing float16 operands as CuPy's cuBLAS call does.

    CuPy multiplies float16 matrices with ``cublasGemmEx`` and ``CUBLAS_COMPUTE_32F``: products summed in
    float32, rounded to float16 once. NumPy's float16 loop sums in another order, so the double widens the
    operands, multiplies in float32 and rounds, which is also what the emulated cuBLAS bindings
    (``nvmath.bindings.cublas``) compute.
    """
    def gemm(*args: Any, **kwargs: Any) -> Any:
        a, b = args[0], args[1] if len(args) > 1 else None
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == np.float16
                and b.dtype == np.float16 and kwargs.get("dtype") is None):
            return func(*args, **kwargs)
        out = kwargs.pop("out", None)
        result = np.asarray(func(a.astype(np.float32), b.astype(np.float32), *args[2:], **kwargs))
        if out is None:
            return result.astype(np.float16)
        np.copyto(out, result, casting="unsafe")
        return out

    gemm.__name__ = getattr(func, "__name__", "gemm")
    return gemm
