"""The ``cupy`` namespace of the GPU emulation: a strict CuPy double backed by NumPy.

Install it with :func:`mxlite._emulation.install.install` (``import cupy`` then gets this package).
N GPUs are emulated in one process; each allocation is host memory whose address is the device pointer.
Operations run eagerly, and four rules a real GPU would not check are enforced (errors:
:class:`~mxlite._emulation.fakecupy._errors.EmulatedGPUError`):

1. an array used on a device other than the current one (except peer copies: ``asarray``/``array``/``copy``);
2. a buffer read or written by a stream while another stream's last conflicting access is not ordered before
   it (event wait, or host synchronisation);
3. a freed buffer reused while work on another stream may still use it;
4. a host read (``get``, ``asnumpy``, ``float``, ``item``, ...) of a buffer whose last writer is neither the
   current stream nor known complete.

Streams can capture their work into CUDA graphs (``Stream.begin_capture`` / ``end_capture``,
``cupy.cuda.graph.Graph.launch``), with CUDA's and CuPy's refusals (see :mod:`._graph`).

Only names that real CuPy has are offered, with parameters CuPy accepts.
"""

from __future__ import annotations

import numpy as _np

from . import _functions, cuda, lib, linalg
from . import _random as random
from ._creation import asnumpy
from ._dlpack import from_dlpack, fromDlpack
from ._functions import *  # noqa: F403 - NumPy-like functions and ufuncs, built from CuPy's signatures
from ._functions import ufunc
from ._memory import get_default_memory_pool
from ._ndarray import ndarray
from ._rawmodule import RawKernel, RawModule

__version__ = "14.2.0"

for _name in ("bool", "bool_", "byte", "cdouble", "complex128", "complex64", "complexfloating", "csingle", "double",
              "dtype", "finfo", "float16", "float32", "float64", "floating", "generic", "half", "iinfo", "inexact",
              "int16", "int32", "int64", "int8", "int_", "intc", "integer", "intp", "long", "longlong", "ndindex",
              "number", "short", "signedinteger", "single", "ubyte", "uint", "uint16", "uint32", "uint64", "uint8",
              "uintc", "uintp", "ulong", "ulonglong", "unsignedinteger", "ushort", "e", "euler_gamma", "inf", "nan",
              "pi", "newaxis"):
    if hasattr(_np, _name):
        globals()[_name] = getattr(_np, _name)
for _name in [n for n in vars(_functions) if not n.startswith("_") and n not in ("annotations", "Any", "np")]:
    globals()[_name] = getattr(_functions, _name)


def get_array_module(*args: object) -> object:
    """This module when any argument is a device array, else NumPy."""
    import sys  # noqa: PLC0415

    for arg in args:
        if isinstance(arg, ndarray):
            return sys.modules[__name__]
    return _np


def is_available() -> bool:
    """True when at least one GPU is emulated."""
    return cuda.is_available()


def get_default_pinned_memory_pool() -> object:
    """The pinned (host) memory pool: the emulation has none; returns the device pool object."""
    return get_default_memory_pool()


__all__ = ["RawKernel", "RawModule", "asnumpy", "cuda", "from_dlpack", "fromDlpack", "get_array_module",
           "get_default_memory_pool", "is_available", "lib", "linalg", "ndarray", "random", "ufunc"]
