"""Matrix products that a CUDA graph can capture: every GEMM of mxlite goes through :func:`matmul`.

* **CPU devices:** NumPy's ``matmul`` with its BLAS on one thread, a large product cut into pieces that run
  side by side on mxlite's host threads (:func:`_host_matmul`); a large 2-D float32/float64 product goes to
  Intel MKL instead when the ``mkl`` wheel is installed (:mod:`mxlite.device.mkl`).
* **GPUs:** cuBLAS through nvmath-python's raw bindings (``nvmath.bindings.cublas``), with a cuBLAS handle
  of mxlite's own per (device, stream) and a workspace from a memory pool of its own. CuPy 14 refuses its
  cuBLAS calls (``cupy.matmul``, ``dot``, ``@``) while a stream captures ("calling cuBLAS API during stream
  capture is currently unsupported"), because its handles' workspace comes from CuPy's default pool and
  its stream is set on every call; a handle whose stream is set once, before the capture, and whose
  workspace was given with ``cublasSetWorkspace`` can be recorded into a graph. Measured on an H200:
  GEMMs issued this way were captured into a CuPy graph and replayed at 7.2 us each, with results
  identical to ``cupy.matmul``.
* **GPUs without nvmath-python:** ``cupy.matmul``. Everything runs as before, but no block can be
  captured as a CUDA graph (:meth:`Block.hybridize` says so once and runs eagerly); install
  nvmath-python (the ``cuda12``/``cuda13`` extras do).

Why this route rather than another: CuPy's own ``cupy.cuda.cublas`` wrappers could take a handle of
mxlite's own too, but they are CuPy internals (``cupy_backends``), not an API; cuBLASLt through
``nvmath.linalg.advanced.matmul`` plans each shape and allocates through its own allocator, which a graph
would have to take over; a GEMM kernel of mxlite's own in ``kernels/`` would be far slower than cuBLAS.
nvmath-python's bindings are NVIDIA's public, versioned mapping of the C API (1.0.0's signatures are
used), one Python call per GEMM, and the emulated GPUs ship a double of them (docs/gpu-emulation.md).

Row-major products through a column-major library: ``C = A @ B`` is computed as ``C^T = B^T A^T``, which
cuBLAS sees as a column-major product of the same memory, no copy: a C-contiguous operand passes with
``op N``, a transposed view (``x.T``, ``swapaxes``) with ``op T``, anything else is copied contiguous
first. Batches (batch axes broadcast as in NumPy, a broadcast operand has stride 0) go through
``gemm_strided_batched_ex`` when their strides allow one call, else one call per outer index. float32
and float64 compute in their own precision, float16 in float32 (``COMPUTE_32F``, what CuPy's matmul
asks for); other dtypes (integers, complex) go to ``cupy.matmul`` (integer products use no cuBLAS).
mxlite's tensors hold no bfloat16 (NumPy has none), so that cuBLAS type is not offered here.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import math
import os
import threading
import warnings
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info

from . import mkl as _mkl
from . import threads as _threads
from .devices import cuda_status
from .host_buffers import host_empty
from .parallel import inside_parallel_for, parallel_for

__all__ = ["backend", "host_gemm", "matmul", "prepare"]

# cuBLAS's guidance (cublasSetWorkspace, "cuBLAS workspace" in the cuBLAS documentation): at least 4 MiB,
# its own default pool's size, and 32 MiB on Hopper (compute capability 9.x) and later.
_WORKSPACE_BYTES = {True: 32 << 20, False: 4 << 20}
_CUDA_R_16F, _CUDA_R_32F, _CUDA_R_64F = 2, 0, 1  # cudaDataType_t
_COMPUTE_32F, _COMPUTE_64F = 68, 70  # cublasComputeType_t
_ALGO_DEFAULT = -1  # CUBLAS_GEMM_DEFAULT
_OP_N, _OP_T = 0, 1
# dtype -> (cudaDataType of A, B and C, compute type, host alpha = 1, host beta = 0). The scalars live as
# long as the module: cuBLAS reads host scalars when the call is made (in a capture too).
_SCALARS = {dt: (np.ones(1, dt), np.zeros(1, dt)) for dt in (np.float32, np.float64)}
_TYPES: dict[np.dtype, tuple[int, int, np.ndarray, np.ndarray]] = {
    np.dtype(np.float32): (_CUDA_R_32F, _COMPUTE_32F, *_SCALARS[np.float32]),
    np.dtype(np.float64): (_CUDA_R_64F, _COMPUTE_64F, *_SCALARS[np.float64]),
    np.dtype(np.float16): (_CUDA_R_16F, _COMPUTE_32F, *_SCALARS[np.float32]),
}

_lock = threading.Lock()
_status: list[Any] = []  # [(nvmath.bindings.cublas module or None, why not)], filled on first use
# (device id, stream address) -> (handle, workspace array): one handle per stream, its stream set once.
_handles: dict[tuple[int, int], tuple[int, Any]] = {}
_pools: dict[int, Any] = {}  # device id -> the cupy.cuda.MemoryPool the workspaces come from


def _forget() -> None:
    """Forget every handle, workspace and the nvmath probe (the GPU emulation calls this when it is installed
    again: the handles of the previous emulation no longer exist)."""
    with _lock:
        _status.clear()
        _handles.clear()
        _pools.clear()


def _cublas() -> Any:
    """``nvmath.bindings.cublas``, or None (with the reason in :func:`backend`) when it cannot be used."""
    if not _status:
        cuda_status()  # first: with MXLITE_EMULATE_GPUS this installs the double, nvmath's bindings included
        with _lock:
            if not _status:
                try:
                    module = importlib.import_module("nvmath.bindings.cublas")
                    _status.append((module, ""))
                except Exception as exc:  # ImportError, or a broken native library
                    _status.append((None, f"nvmath-python is not importable ({type(exc).__name__}: {exc})"))
    return _status[0][0]


def _disable(reason: str) -> None:
    """Stop using nvmath for this process (cuBLAS could not be set up), saying why once."""
    with _lock:
        _status[:] = [(None, reason)]
    warnings.warn(f"mxlite: GPU matrix products go through cupy.matmul: {reason}. CUDA graphs of hybridized blocks "
                  "need nvmath-python's cuBLAS bindings: pip install 'nvmath-python[cu12]' (or [cu13])", stacklevel=3)


def backend() -> tuple[str, str]:
    """Which library computes GPU matrix products: ``('nvmath', '')`` or ``('cupy', why not nvmath)``.

    ``'nvmath'`` means cuBLAS through ``nvmath.bindings.cublas``, which a CUDA graph can capture;
    ``'cupy'`` means ``cupy.matmul``, which cannot be captured (hybridized blocks then run eagerly).
    """
    return ("nvmath", "") if _cublas() is not None else ("cupy", _status[0][1])


def _handle(cublas: Any, cupy: Any, device_id: int, stream_ptr: int) -> int:
    """The handle of ``(device, stream)``: created on first use, its stream and workspace set once."""
    key = (device_id, stream_ptr)
    entry = _handles.get(key)
    if entry is not None:
        return entry[0]
    with _lock:
        entry = _handles.get(key)
        if entry is None:
            with cupy.cuda.Device(device_id):
                pool = _pools.get(device_id)
                if pool is None:
                    pool = _pools[device_id] = cupy.cuda.MemoryPool()
                hopper = int(cupy.cuda.Device(device_id).compute_capability) >= 90
                size = _WORKSPACE_BYTES[hopper]
                # A pool of its own, never freed: nothing else is ever handed this memory, so a graph that
                # recorded GEMMs can rely on it for as long as the process lives.
                with cupy.cuda.using_allocator(pool.malloc):
                    workspace = cupy.empty(size, dtype=np.uint8)
                handle = cublas.create()
                cublas.set_stream(handle, stream_ptr)  # resets the workspace: set it after
                cublas.set_workspace(handle, workspace.data.ptr, size)
            entry = _handles[key] = (handle, workspace)
    return entry[0]


def prepare(device_id: int, stream: Any) -> bool:
    """Set up the cuBLAS handle of ``stream`` on GPU ``device_id`` before a capture; False without nvmath.

    A handle is made on first use otherwise; a stream about to capture needs it made (and its workspace
    allocated) beforehand, since neither may happen inside the capture.
    """
    cublas = _cublas()
    if cublas is None:
        return False
    cupy = cuda_status()[0]
    try:
        _handle(cublas, cupy, device_id, int(stream.ptr))
    except Exception as exc:  # cuBLAS missing or failing to initialise under nvmath
        _disable(f"cuBLAS could not be set up through nvmath-python ({type(exc).__name__}: {exc})")
        return False
    return True


# -- CPU devices -------------------------------------------------------------------------------------------
# mxlite runs NumPy's BLAS on one thread and spreads a large product over its own host threads, a piece of
# the output per thread (parallel.parallel_for). OpenBLAS's threads busy-wait for up to about 0.1 s after each
# multi-threaded call (its THREAD_TIMEOUT, fixed when NumPy loads it): in a training step, whose GEMMs alternate
# with mxlite's host kernels and with the pieces of its convolutions, those spinning threads held the cores the
# next kernels needed (the CNN of benchmarks/bench_train.py at batch 128 on two cores: 74 ms a step against 64
# with the spinning cut short). mxlite's threads sleep when idle, take pieces dynamically (a thread the system
# does not schedule holds nothing up) and leave the BLAS's count for the user's own NumPy calls untouched.
# One piece per core, as OpenBLAS splits a product: each piece packs its own copy of the operand it shares
# with the others, so more pieces cost more (a 256 x 2048 x 2048 product on two cores: 7.4 ms in 2 pieces, 7.9
# in 4, 8.4 in 8; OpenBLAS's two threads 7.6). The pieces are the same whatever the thread count: as many as
# the process has cores (threads.cores(), fixed for the process), run side by side on mxlite's threads, or
# one after another on one thread (set_num_threads(1), or inside another piece). A BLAS may round a piece
# differently from the whole product (OpenBLAS's Haswell kernels do, for a cut at any multiple of 16), so
# only a cut that does not depend on the thread count gives the same bits on every thread count.
_SMALL_MNK = 1 << 16  # m*n*k below which OpenBLAS stays on one thread by itself (its SMP threshold)
_PIECE_MNK = 1 << 26  # m*n*k of a piece at least: about 1.3 ms on one core
_PIECE_ALIGN = 16  # rows or columns of a piece: a multiple of this (whole register tiles of the BLAS)


_HOST_GEMMS: dict[str, tuple[int, bool] | None] = {}


def host_gemm(dtype: Any) -> tuple[int, bool] | None:
    """``(address, ilp64)`` of the ``cblas_sgemm`` (float32) or ``cblas_dgemm`` (float64) of the OpenBLAS NumPy
    itself loaded, for native code that runs many products (a convolution's per-sample products in
    ``kernels/conv.cu``): calling it as ``numpy.matmul`` does gives ``numpy.matmul``'s bits. ``ilp64``: its
    integer arguments are 64-bit. None for other dtypes, another BLAS, or when it cannot be found.
    """
    name = np.dtype(dtype).name
    if name not in _HOST_GEMMS:
        _HOST_GEMMS[name] = _find_host_gemm({"float32": "s", "float64": "d"}.get(name))
    return _HOST_GEMMS[name]


def _find_host_gemm(letter: str | None) -> tuple[int, bool] | None:
    if letter is None:
        return None
    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))
    for info in threadpool_info():  # the OpenBLAS NumPy's wheel ships (numpy.libs), not another library's
        path = info.get("filepath", "")
        if info.get("internal_api") != "openblas" or not path.startswith(numpy_dir) or "numpy" not in path:
            continue
        try:
            library = ctypes.CDLL(path)
        except OSError:
            return None
        prefix = "scipy_" if "scipy_openblas" in os.path.basename(path) else ""
        for symbol, ilp64 in ((f"{prefix}cblas_{letter}gemm64_", True), (f"{prefix}cblas_{letter}gemm", False)):
            entry = getattr(library, symbol, None)
            if entry is not None:
                return ctypes.cast(entry, ctypes.c_void_p).value, ilp64
    return None


def _spans(extent: int, pieces: int, align: int) -> list[tuple[int, int]]:
    size = -(-extent // pieces)
    size = -(-size // align) * align
    return [(start, min(start + size, extent)) for start in range(0, extent, size)]


def _host_matmul(a: np.ndarray, b: np.ndarray, out: Any) -> np.ndarray:
    """``numpy.matmul(a, b, out=out)`` on CPU devices: MKL for a large 2-D product when installed, else the BLAS
    on one thread, a large product in pieces.

    One piece per core (:func:`threads.cores`, not the thread count: see above) with at least ``_PIECE_MNK``
    multiply-adds each: the stacked axis when there are enough matrices, else the output's columns (when it
    has at least as many columns as rows: each piece then packs only its own share of ``b``) or its rows, cut
    at multiples of 16; the pieces run on up to :func:`threads.usable_threads` threads, each with the BLAS on
    one thread.
    """
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)  # vectors; numpy's own errors
    m, n = a.shape[-2], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
    mnk = math.prod(batch) * m * n * a.shape[-1]
    if not batch:  # MKL, when installed, for a large 2-D product (mkl.py); threads as for pieces
        threads = 1 if inside_parallel_for() else max(1, min(_threads.blas_count(), mnk // _PIECE_MNK))
        done = _mkl.matmul(a, b, out, threads)
        if done is not None:
            return done
    pieces = 1 if mnk < 2 * _PIECE_MNK else min(_threads.cores(), mnk // _PIECE_MNK)
    if pieces < 2 and (mnk < _SMALL_MNK or _threads.blas_on_one_thread()):
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
    dtype = np.result_type(a.dtype, b.dtype)
    shape = batch + (m, n)
    if out is None:  # reused memory for a large result (host_buffers: no page faults every step)
        out = host_empty(shape, dtype)
    if pieces < 2 or out.shape != shape or out.dtype != dtype:
        with _threads.blas_threads_limited(1):
            return np.matmul(a, b, out=out)
    if batch and batch[0] >= pieces:
        spans, axis = _spans(batch[0], pieces, 1), 0
    elif n >= m:
        spans, axis = _spans(n, pieces, _PIECE_ALIGN), -1
    else:
        spans, axis = _spans(m, pieces, _PIECE_ALIGN), -2

    def piece(i: int) -> None:
        cut = slice(*spans[i])
        if axis == 0:
            np.matmul(a[cut] if a.ndim == out.ndim and a.shape[0] > 1 else a,
                      b[cut] if b.ndim == out.ndim and b.shape[0] > 1 else b, out=out[cut])
        elif axis == -1:
            np.matmul(a, b[..., cut], out=out[..., cut])
        else:
            np.matmul(a[..., cut, :], b, out=out[..., cut, :])

    with _threads.blas_threads_limited(1):  # also where the pieces run one after another on this thread
        parallel_for(len(spans), piece)
    return out


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``a @ b`` as NumPy's ``matmul`` defines it (batch axes broadcast), optionally into ``out``.

    NumPy arrays (CPU devices) go to ``numpy.matmul``; CuPy arrays to cuBLAS through nvmath-python (see the
    module docstring), else ``cupy.matmul``. The result has ``numpy.result_type(a, b)``; the operands must
    be on the current GPU. The GPU path gives the bits ``cupy.matmul`` gives on the emulated GPUs.

    Raises:
        ValueError: shapes that do not multiply (as ``numpy.matmul``/``cupy.matmul``).
    """
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return _host_matmul(a, b, out)
    cupy = cuda_status()[0]
    cublas = _cublas()
    dtype = a.dtype if a.dtype == b.dtype else np.result_type(a.dtype, b.dtype)
    if (cublas is None or dtype not in _TYPES or a.ndim == 0 or b.ndim == 0
            or a.shape[-1] != b.shape[-1 if b.ndim == 1 else -2]):
        return cupy.matmul(a, b, out=out)  # also raises cupy's errors for shapes that do not multiply
    try:
        handle = _handle(cublas, cupy, cupy.cuda.runtime.getDevice(), int(cupy.cuda.get_current_stream().ptr))
    except Exception as exc:  # cuBLAS missing or failing to initialise under nvmath
        _disable(f"cuBLAS could not be set up through nvmath-python ({type(exc).__name__}: {exc})")
        return cupy.matmul(a, b, out=out)
    if a.dtype != dtype:
        a = a.astype(dtype)
    if b.dtype != dtype:
        b = b.astype(dtype)
    if a.ndim == 2 and b.ndim == 2 and (out is None or out.dtype == dtype):
        c = _gemm_2d(cublas, handle, cupy, a, b, out, dtype)  # the common case, with the least Python
        if c is not None:
            return c
    vector_a, vector_b = a.ndim == 1, b.ndim == 1
    a2 = a.reshape(1, a.shape[0]) if vector_a else a
    b2 = b.reshape(b.shape[0], 1) if vector_b else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    shape = batch + (m, n)
    result_shape = shape[:-2] + ((m,) if not vector_a else ()) + ((n,) if not vector_b else ())
    if out is not None and (tuple(out.shape) != result_shape or out.dtype != dtype):
        return cupy.matmul(a, b, out=out)  # cupy's checks and casts
    c = None if vector_a or vector_b else out  # (a vector's result is written through a temporary)
    in_place = c is not None and _writable_rows(c, n) and not _overlaps(c, a2) and not _overlaps(c, b2)
    if not in_place:
        c = cupy.ndarray(shape, dtype=dtype)  # as cupy.matmul allocates its result (cupy.empty wraps this)
    if m and n and math.prod(batch):
        if k == 0:
            c.fill(0)
        else:
            _gemm(cublas, handle, cupy, a2, b2, c, m, n, k, batch, dtype)
    if out is not None:
        if not in_place:
            out[...] = c.reshape(result_shape)
        return out
    return c.reshape(result_shape) if (vector_a or vector_b) else c


def _gemm_2d(cublas: Any, handle: int, cupy: Any, a: Any, b: Any, out: Any, dtype: np.dtype) -> Any:
    """``a @ b`` for matrices through one ``gemm_ex`` into ``out`` or a new array; None when the general path
    is needed (an operand cuBLAS cannot read as it is, an ``out`` it cannot write, an empty product)."""
    (m, k), n = a.shape, b.shape[1]
    if not (m and n and k):
        return None
    la, lb = _strides(a), _strides(b)
    la = None if la is None else _layout(m, k, la[0], la[1])
    lb = None if lb is None else _layout(k, n, lb[0], lb[1])
    if la is None or lb is None:
        return None
    if out is None:
        c = cupy.ndarray((m, n), dtype=dtype)  # as cupy.matmul allocates its result (cupy.empty wraps this)
        ld_c = max(1, n)
    else:
        if tuple(out.shape) != (m, n) or not _writable_rows(out, n) or _overlaps(out, a) or _overlaps(out, b):
            return None
        c = out
        ld_c = _strides(out)[0] if m > 1 else max(1, n)
    ctype, compute, alpha, beta = _TYPES[dtype]
    cublas.gemm_ex(handle, lb[0], la[0], n, m, k, alpha.ctypes.data, int(b.data.ptr), ctype, lb[1],
                   int(a.data.ptr), ctype, la[1], beta.ctypes.data, int(c.data.ptr), ctype, ld_c, compute,
                   _ALGO_DEFAULT)
    return c


def _strides(x: Any) -> tuple[int, ...] | None:
    """``x``'s strides in elements, or None where one is negative or not a whole element."""
    size = x.dtype.itemsize
    out = []
    for s in x.strides:
        if s < 0 or s % size:
            return None
        out.append(s // size)
    return tuple(out)


def _layout(rows: int, cols: int, sr: int, sc: int) -> tuple[int, int] | None:
    """How cuBLAS reads a row-major (rows x cols) matrix with element strides (sr, sc) in the swapped product:
    ``(op, ld)``, op N for rows laid out contiguously (ld = row stride), op T for columns (ld = column
    stride); None when neither holds (the operand is copied)."""
    if (sc == 1 or cols == 1) and (sr >= max(1, cols) or rows == 1):
        return _OP_N, sr if rows > 1 else max(1, cols)
    if (sr == 1 or rows == 1) and (sc >= max(1, rows) or cols == 1):
        return _OP_T, sc if cols > 1 else max(1, rows)
    return None


def _writable_rows(c: Any, n: int) -> bool:
    """Whether cuBLAS can write the (..., m, n) output ``c`` in place: rows contiguous, batch strides whole."""
    s = _strides(c)
    return s is not None and (s[-1] == 1 or n == 1) and (s[-2] >= max(1, n) or c.shape[-2] == 1)


def _span(x: Any) -> tuple[int, int]:
    """The byte range ``x``'s elements lie in."""
    lo = int(x.data.ptr)
    hi = lo + sum((d - 1) * abs(s) for d, s in zip(x.shape, x.strides) if d) + x.dtype.itemsize
    return lo, hi


def _overlaps(c: Any, x: Any) -> bool:
    (c0, c1), (x0, x1) = _span(c), _span(x)
    return c0 < x1 and x0 < c1


def _operand(cupy: Any, x: Any, rows: int, cols: int) -> tuple[Any, int, int, tuple[int, ...]]:
    """``(array, op, ld, batch strides)`` of an operand (copied C-contiguous when cuBLAS cannot read it)."""
    s = _strides(x)
    lay = None if s is None else _layout(rows, cols, s[-2], s[-1])
    if lay is None:
        x = cupy.ascontiguousarray(x)
        s = _strides(x)
        lay = _layout(rows, cols, s[-2], s[-1])
    return x, lay[0], lay[1], s[:-2]


def _batch_strides(own: tuple[int, ...], shape: tuple[int, ...], batch: tuple[int, ...]) -> list[int]:
    """An operand's strides over the broadcast ``batch`` axes: 0 where it is broadcast."""
    lead = len(batch) - len(own)
    return [0 if i < lead or shape[i - lead] == 1 else own[i - lead] for i in range(len(batch))]


def _gemm(cublas: Any, handle: int, cupy: Any, a: Any, b: Any, c: Any, m: int, n: int, k: int,
          batch: tuple[int, ...], dtype: np.dtype) -> None:
    """``c = a @ b`` (shapes checked, nothing empty) through cuBLAS: ``c^T = b^T a^T`` column-major."""
    a, op_a, ld_a, sa = _operand(cupy, a, m, k)
    b, op_b, ld_b, sb = _operand(cupy, b, k, n)
    sc = _strides(c)
    ld_c = sc[-2] if m > 1 else max(1, n)
    # Batch axes with their strides for (b, a, c); size-1 axes dropped.
    axes = [(size, x, y, z) for size, x, y, z in zip(batch, _batch_strides(sb, b.shape[:-2], batch),
                                                     _batch_strides(sa, a.shape[:-2], batch), sc[:-2]) if size > 1]
    loops, (count, stride_b, stride_a, stride_c) = _plan(axes)
    ctype, compute, alpha, beta = _TYPES[dtype]
    size = dtype.itemsize
    pa, pb, pc = int(a.data.ptr), int(b.data.ptr), int(c.data.ptr)
    for index in itertools.product(*(range(ax[0]) for ax in loops)):
        ob = sum(i * ax[1] for i, ax in zip(index, loops)) * size
        oa = sum(i * ax[2] for i, ax in zip(index, loops)) * size
        oc = sum(i * ax[3] for i, ax in zip(index, loops)) * size
        if count == 1:
            cublas.gemm_ex(handle, op_b, op_a, n, m, k, alpha.ctypes.data, pb + ob, ctype, ld_b, pa + oa, ctype,
                           ld_a, beta.ctypes.data, pc + oc, ctype, ld_c, compute, _ALGO_DEFAULT)
        else:
            cublas.gemm_strided_batched_ex(handle, op_b, op_a, n, m, k, alpha.ctypes.data, pb + ob, ctype, ld_b,
                                           stride_b, pa + oa, ctype, ld_a, stride_a, beta.ctypes.data, pc + oc,
                                           ctype, ld_c, stride_c, count, compute, _ALGO_DEFAULT)


def _plan(axes: list[tuple[int, int, int, int]]) -> tuple[list[tuple[int, int, int, int]], tuple[int, int, int, int]]:
    """Split batch axes ``(size, stride of b, of a, of c)`` into axes looped over in Python and one batched run.

    Adjacent axes merge when every operand's stride of the outer one is the inner one's times its size
    (a constant stride over both); the longest merged run becomes the strided batch of one cuBLAS call,
    the other axes are looped over, so the number of calls is the smallest this split allows.
    """
    if not axes:
        return [], (1, 0, 0, 0)
    runs: list[tuple[int, int, int, int]] = [axes[-1]]
    for ax in reversed(axes[:-1]):
        inner = runs[0]
        if all(ax[j] == inner[j] * inner[0] for j in (1, 2, 3)):
            runs[0] = (ax[0] * inner[0], inner[1], inner[2], inner[3])
        else:
            runs.insert(0, ax)
    best = max(range(len(runs)), key=lambda i: runs[i][0])
    return runs[:best] + runs[best + 1:], runs[best]
