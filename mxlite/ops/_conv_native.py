"""A convolution's per-sample backward pieces on CPU devices as one native call each (kernels/conv.cu).

Purpose: on CPU devices :class:`.conv._ConvGeom` computes a convolution's output (per sample ``W @ cols_n``,
with Conv(activation='relu')'s bias and ReLU), its input gradient (per sample the column gradient
``W^T @ g_n``, then col2im) and its weight gradient (per sample ``cols_n @ g_n^T``, summed over each piece of
the batch) piece by piece on host threads. Run from Python, every piece is a few calls into
NumPy and the host build, and on two threads those calls took turns at the interpreter's lock (a call of
12 us alone took about 180 us beside the other thread's piece). kernels/conv.cu's host build exports the same
work as ``mxlite_conv_{forward,input_grad,weight_grad}_{float,double}``: one call, the samples spread over the host
threads by the runtime, each product through NumPy's own ``cblas_?gemm`` (:func:`mxlite.device.blas.host_gemm`)
called as ``numpy.matmul`` calls it, and col2im through the kernel's own plane code. The results are the
Python pieces' bits (tests/test_conv_native.py).

Where it applies (:func:`applies`): a CPU device with the compiled kernels, the per-sample column layout,
one group, float32 or float64, and every product dimension at least 2 (NumPy hands a product with a
dimension of 1 to another BLAS routine). Elsewhere the Python pieces run, as they do with ``NATIVE`` off.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

import numpy as np

from ..device import blas
from ..device import threads as _threads
from ..device.kernels import HostEntry, array_address
from . import _conv_kernels as _ck

__all__: list[str] = []


class _ConvGeom(Protocol):
    """What the pieces read of a convolution's geometry (``conv.py``'s ``_ConvGeom``, which calls this module)."""

    n: int
    c_out: int
    groups: int
    kg: int
    l: int  # noqa: E741 - conv.py's name: output positions per sample
    merged: bool
    nd: int
    pointwise: bool

    def kernel_geometry(self, n: int) -> tuple[int, ...]: ...

# Whether CPU devices run the pieces natively where they apply (tests turn it off to compare with Python's).
NATIVE = True

_TYPE_NAMES = {"float32": "float", "float64": "double"}


class _Pieces(ctypes.Structure):
    """kernels/conv.cu's ``ConvPieces``."""

    _fields_ = [("gemm", ctypes.c_void_p), ("ilp64", ctypes.c_longlong), ("w", ctypes.c_void_p),
                ("g", ctypes.c_void_p), ("cols", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("n", ctypes.c_longlong), ("c_out", ctypes.c_longlong), ("kg", ctypes.c_longlong),
                ("l", ctypes.c_longlong), ("piece", ctypes.c_longlong), ("geometry", ctypes.c_longlong * 24)]


_ENTRIES: dict[tuple[str, str], tuple[HostEntry, tuple[int, bool]] | None] = {}


def _entry(what: str, dtype: np.dtype) -> tuple[HostEntry, tuple[int, bool]] | None:
    """(the host entry ``mxlite_conv_<what>_<T>``, NumPy's ``cblas_?gemm``), or None where either is missing."""
    key = (what, dtype.name)
    if key not in _ENTRIES:
        gemm = blas.host_gemm(dtype)
        entry = None if gemm is None else _ck.KERNELS.host_entry(
            f"mxlite_conv_{what}_{_TYPE_NAMES[dtype.name]}", [ctypes.c_void_p, ctypes.c_longlong])
        _ENTRIES[key] = None if entry is None else (entry, gemm)
    return _ENTRIES[key]


def applies(geo: _ConvGeom, *arrays: Any) -> bool:
    """Whether the native pieces compute this convolution's output or gradients from ``arrays`` (None entries
    skipped; see the module docstring)."""
    arrays = tuple(a for a in arrays if a is not None)
    dtype = arrays[0].dtype
    if (not NATIVE or geo.merged or geo.pointwise or geo.groups != 1 or dtype.name not in _TYPE_NAMES
            or min(geo.kg, geo.l, geo.c_out) < 2 or geo.n == 0):
        return False
    if any(type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous for a in arrays):
        return False
    return _ck.enabled(np, dtype, geo.nd) and _entry("input_grad", dtype) is not None


def _run(what: str, geo: _ConvGeom, piece: int, w: Any, g: Any, cols: Any, out: np.ndarray,
         geometry: tuple[int, ...] = ()) -> None:
    entry, (gemm, ilp64) = _entry(what, out.dtype)  # type: ignore[misc]
    pieces = _Pieces(gemm, int(ilp64), array_address(w), array_address(g), array_address(cols), array_address(out),
                     geo.n, geo.c_out, geo.kg, geo.l, piece, (ctypes.c_longlong * 24)(*geometry))
    with _threads.blas_threads_limited(1):  # each sample's product on the thread that runs it
        entry(ctypes.byref(pieces), HostEntry.launch_budget())


def forward(geo: _ConvGeom, w_mat: np.ndarray, cols: np.ndarray, out: np.ndarray, relu_bias: Any = None) -> np.ndarray:
    """``out`` (N, 1, C_out, L) = ``w_mat @ cols_n`` per sample, a sample per block; with ``relu_bias`` (C_out,),
    ``relu(out + bias)`` as kernels/bias_act.cu's ``bias_relu_forward``, each sample's planes right after its
    product. ``w_mat`` (1, C_out, Kg), ``cols`` (N, 1, Kg, L); :func:`applies` must hold (``relu_bias`` too).
    """
    _run("forward", geo, 1, w_mat, relu_bias, cols, out)
    return out


def input_grad(geo: _ConvGeom, w_mat: np.ndarray, g_mat: np.ndarray, gx: np.ndarray, accumulate: bool) -> np.ndarray:
    """``gx`` (N, C, *S) = the input gradient: per sample ``W^T @ g_n`` then col2im, a sample per block.

    ``w_mat`` (1, C_out, Kg) and ``g_mat`` (N, 1, C_out, L), C-contiguous; :func:`applies` must hold.
    ``accumulate``: whether windows may overlap (col2im adds instead of assigning; conv.py's ``_overlapping``).
    """
    geometry = _ck.kernel_values(geo.kernel_geometry(geo.n), "per_sample", accumulate)
    _run("input_grad", geo, 1, w_mat, g_mat, None, gx, geometry)
    return gx


def weight_grad_sums(geo: _ConvGeom, g_mat: np.ndarray, cols: np.ndarray, piece: int, sums: np.ndarray) -> np.ndarray:
    """``sums[b]`` (Kg, C_out) = the sum over piece b's samples (``piece`` each, in order) of ``cols_n @ g_n^T``.

    ``g_mat`` (N, 1, C_out, L), ``cols`` (N, 1, Kg, L) and ``sums`` (pieces, 1, Kg, C_out), C-contiguous;
    :func:`applies` must hold.
    """
    _run("weight_grad", geo, piece, None, g_mat, cols, sums)
    return sums

