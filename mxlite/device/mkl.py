"""Intel MKL's GEMM for the large products of CPU devices, when the ``mkl`` wheel is installed.

Purpose: the matrix products that dominate a CPU training step (a Dense layer's ``x @ W^T``, ``dy @ W``,
``dy^T @ x``; a recurrent layer's whole-sequence products) run faster in MKL than in the OpenBLAS that
NumPy ships: 9-14% on one thread, 5-19% on two, as mxlite runs it (``benchmarks/bench_gemm.py``, 2-core
AVX-512 VM; a cache-blocked GEMM written for mxlite reached OpenBLAS's speed, not MKL's). MKL is
optional: ``pip install 'mxlite[mkl]'`` (about 1 GB installed with the libraries it pulls in). Without
it every product goes to NumPy, as before.

Which products (:func:`matmul`): 2-D float32 or float64 operands of one dtype with at least
``MIN_MULTIPLY_ADDS`` multiply-adds, each operand C-contiguous along one axis (a plain array or a
transposed view such as ``W.T``), the output's rows contiguous and apart from both operands. The rest
(batched, strided, small, integer) stays with NumPy. ``MXLITE_HOST_BLAS=numpy`` turns MKL off; ``auto`` (the
default) uses it when installed; another value raises ValueError naming the variable, the value and these two
(read by :mod:`mxlite.device.env`, at the first large product or :func:`status`).

Threads: MKL runs a product on its GNU OpenMP threads, as many as the caller gives for the call
(``mkl_set_num_threads_local``): ``blas._host_matmul`` gives the BLAS count of the moment
(``threads.blas_count``: it follows the machine's load while the count is the default), at most one
thread per 2^26 multiply-adds, and one inside mxlite's own parallel pieces. Before MKL is
loaded, ``OMP_WAIT_POLICY`` is set to ``PASSIVE`` unless it is already set, so that OpenMP's threads sleep
between products instead of spinning on the cores mxlite's kernels run on next (a process that loaded
libgomp earlier, through PyTorch for instance, keeps the policy it started with). Without libgomp MKL
runs on the calling thread, and so it does in a process forked from the one that loaded MKL.

Reproducibility: MKL runs in its strict conditional-numerical-reproducibility mode (``MKL_CBWR_AUTO |
MKL_CBWR_STRICT``), in which a GEMM gives the same bits for any number of threads on the same machine;
so a product's result does not depend on ``mx.set_num_threads`` or on the machine's load, as with
mxlite's other CPU work. The bits differ from OpenBLAS's (another summation order), within float32's
rounding. Measured on the 2-core VM: strict mode costs 10-13% of MKL's two-thread speed on two of the
MLP's three products (5.5 -> 6.2 ms) and nothing on one thread.
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys
import threading
from typing import Any

import numpy as np

from . import env
from .host_buffers import host_empty

__all__ = ["BLAS_ENV", "MIN_MULTIPLY_ADDS", "matmul", "status"]

BLAS_ENV = "MXLITE_HOST_BLAS"  # env.SETTINGS: "auto" (default): MKL when installed; "numpy": NumPy's BLAS only
MIN_MULTIPLY_ADDS = 1 << 20  # smaller products stay with NumPy: a call through ctypes costs a few microseconds

_THREADING_SEQUENTIAL, _THREADING_GNU = 1, 3  # MKL_THREADING_LAYER
_CBWR_AUTO, _CBWR_STRICT = 2, 0x10000  # MKL_CBWR_* (mkl_cbwr.h)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS enums
_GEMM_NAMES = {np.dtype(np.float32): "cblas_sgemm_64", np.dtype(np.float64): "cblas_dgemm_64"}


class _Mkl:
    """The loaded library: its ILP64 ``cblas_?gemm_64`` per dtype and its per-thread thread-count setter."""

    def __init__(self, library: Any, threaded: bool) -> None:
        self.threaded = threaded
        self.pid = os.getpid()  # a forked child (a DataLoader worker) must not start OpenMP threads: see matmul
        self.set_threads = library.MKL_Set_Num_Threads_Local
        self.set_threads.argtypes = [ctypes.c_int]
        self.set_threads.restype = ctypes.c_int
        self.gemms = {}
        for dtype, name in _GEMM_NAMES.items():
            scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
            gemm = getattr(library, name)
            gemm.restype = None
            gemm.argtypes = ([ctypes.c_int] * 3 + [ctypes.c_int64] * 3
                             + [scalar, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                scalar, ctypes.c_void_p, ctypes.c_int64])
            self.gemms[dtype] = gemm


_lock = threading.Lock()
_loaded: _Mkl | None = None
_why_not: str | None = None  # None: not looked for yet


def _library_path() -> str | None:
    """``libmkl_rt`` as the ``mkl`` wheel installs it: under this environment's ``lib`` or the user base's."""
    for prefix in (sys.prefix, site.getuserbase()):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[0]
    return None


def _load() -> _Mkl | None:
    """The library, loaded and set up once (None, with ``_why_not`` saying why, when it is not used).

    Raises:
        ValueError: ``MXLITE_HOST_BLAS`` is neither ``auto`` nor ``numpy`` (nothing is kept: the next call
            reads it again).
    """
    global _loaded, _why_not
    if _why_not is not None or _loaded is not None:
        return _loaded
    with _lock:
        if _why_not is not None or _loaded is not None:
            return _loaded
        choice = env.choice(BLAS_ENV)
        path = None if choice != "auto" else _library_path()
        if choice == "numpy":
            _why_not = f"{BLAS_ENV}=numpy"
        elif path is None:
            _why_not = "the mkl wheel is not installed (pip install 'mxlite[mkl]')"
        else:
            try:
                _loaded = _open(path)
            except (OSError, AttributeError) as exc:  # a library that does not load, or lacks a symbol
                _why_not = f"MKL at {path} could not be used ({type(exc).__name__}: {exc})"
        return _loaded


def _open(path: str) -> _Mkl:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read by libgomp when MKL first starts its threads
    library = ctypes.CDLL(path)
    try:  # MKL loads its GNU threading layer at the first product and ends the process if libgomp is missing
        ctypes.CDLL("libgomp.so.1")
        threaded = True
    except OSError:
        threaded = False
    library.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    library.MKL_Set_Threading_Layer(_THREADING_GNU if threaded else _THREADING_SEQUENTIAL)
    library.MKL_CBWR_Set.argtypes = [ctypes.c_int]
    if library.MKL_CBWR_Set(_CBWR_AUTO | _CBWR_STRICT) != 0:
        raise OSError("MKL refused its strict reproducible mode (MKL_CBWR_Set)")
    return _Mkl(library, threaded)


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a 2-D operand contiguous along one axis, else None."""
    rows, cols = x.shape
    step = x.itemsize
    row_stride, col_stride = x.strides
    if (cols == 1 or col_stride == step) and (rows == 1 or (row_stride > 0 and row_stride % step == 0)):
        lead = row_stride // step if rows > 1 else cols
        if lead >= cols:
            return _NO_TRANS, lead
    if (rows == 1 or row_stride == step) and (cols == 1 or (col_stride > 0 and col_stride % step == 0)):
        lead = col_stride // step if cols > 1 else rows
        if lead >= rows:
            return _TRANS, lead
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None, threads: int) -> np.ndarray | None:
    """``a @ b`` through MKL on ``threads`` threads, into ``out`` (or a new array); None when this product is
    not for MKL (see the module docstring) and the caller should run it elsewhere.

    Args:
        a: ``(m, k)`` float32 or float64.
        b: ``(k, n)`` of the same dtype.
        out: ``(m, n)`` of that dtype with contiguous rows, or None.
        threads: MKL's threads for this call (>= 1).

    Raises:
        ValueError: ``MXLITE_HOST_BLAS`` has a value other than ``auto`` or ``numpy`` (for a product MKL could
            take: large, 2-D, float32 or float64).
    """
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _GEMM_NAMES:
        return None
    (m, k), n = a.shape, b.shape[1]
    if k != b.shape[0] or m * n * k < MIN_MULTIPLY_ADDS:
        return None
    mkl = _load()
    if mkl is None:
        return None
    layout_a, layout_b = _layout(a), _layout(b)
    if layout_a is None or layout_b is None:
        return None
    if out is None:  # reused memory for a large result (host_buffers: no page faults every step)
        out = host_empty((m, n), a.dtype)
    elif (out.shape != (m, n) or out.dtype != a.dtype or out.strides[1] != out.itemsize
          or out.strides[0] < n * out.itemsize or out.strides[0] % out.itemsize
          or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    # libgomp cannot start threads in a child forked after the parent's OpenMP threads ran (it hangs), so
    # a forked process (DataLoader workers are forked) runs MKL on its calling thread only.
    mkl.set_threads(max(1, int(threads)) if mkl.threaded and os.getpid() == mkl.pid else 1)
    mkl.gemms[a.dtype](_ROW_MAJOR, layout_a[0], layout_b[0], m, n, k, 1.0, a.ctypes.data, layout_a[1],
                       b.ctypes.data, layout_b[1], 0.0, out.ctypes.data, out.strides[0] // out.itemsize)
    return out


def status() -> str:
    """One line for ``mxlite info``: whether large products run in MKL, and if not, why.

    Raises:
        ValueError: ``MXLITE_HOST_BLAS`` has a value other than ``auto`` or ``numpy``.
    """
    mkl = _load()
    if mkl is None:
        return f"NumPy's BLAS ({_why_not})"
    return "MKL (" + ("its GNU OpenMP threads" if mkl.threaded else "on the calling thread") + \
        ", strict reproducible mode) for float32/float64 products of at least 2^20 multiply-adds"
