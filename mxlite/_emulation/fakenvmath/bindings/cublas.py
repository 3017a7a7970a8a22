"""``nvmath.bindings.cublas`` on the emulated GPUs: handles, stream, workspace, modes, and the GEMMs.

Follows nvmath-python 1.0.0 (its ``cublas.pyi`` and documentation): the same names, parameter names and
order, enum values, and cuBLAS's conventions: matrices are column-major, handles, streams and buffers are
passed as integer addresses, alpha and beta by pointer (host memory in the default
``PointerMode.HOST``, device memory in ``PointerMode.DEVICE``). What cuBLAS rejects with a status raises
:class:`cuBLASError` with that status; what a GPU would get silently wrong raises ``EmulatedGPUError``.

The GEMMs compute with NumPy on the emulated device memory the pointers address: the product of the
operands is NumPy's ``matmul`` of their row-major transposes (so the usual row-major call,
``C^T = B^T A^T``, gives bit for bit what ``cupy.matmul`` gives on the double), in the compute type's
precision (float16 and bfloat16 operands are widened to float32 for ``COMPUTE_32F``; ``COMPUTE_16F``
accumulates in float32 and rounds once), then ``alpha`` and ``beta`` are applied (C is not read when beta
is 0). Reduced-precision math modes (TF32) are not emulated: products are full float32.

Stream capture: a GEMM on a capturing stream is recorded into the graph (alpha/beta values read from host
memory at the call, as cuBLAS does; device pointers read at each launch). Stricter than cuBLAS: during a
capture the handle needs a workspace (``set_workspace`` after ``set_stream``, which resets it), and a GEMM
whose handle's stream is not the capturing stream, while the current stream captures, raises (it would run
at once instead of being recorded).
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import operator
from typing import Any

import numpy as np

from ...fakecupy import _core, _counters, _memory, _state, _streams

# imported under private names: the module offers only nvmath-python's names (tests/test_real_apis.py)
from ...fakecupy._errors import EmulatedGPUError as _EmulatedGPUError
from ...fakecupy.cuda._reduce import bf16_to_f32 as _bf16_to_f32
from ...fakecupy.cuda._reduce import f32_to_bf16 as _f32_to_bf16

__all__ = ["AtomicsMode", "ComputeType", "GemmAlgo", "Math", "Operation", "PointerMode", "Status", "cuBLASError",
           "check_status", "create", "destroy", "set_stream", "get_stream", "set_workspace", "set_math_mode",
           "get_math_mode", "set_pointer_mode", "get_pointer_mode", "sgemm", "dgemm", "gemm_ex",
           "gemm_strided_batched_ex"]


class Status(enum.IntEnum):
    """``cublasStatus_t``."""

    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 3
    INVALID_VALUE = 7
    ARCH_MISMATCH = 8
    MAPPING_ERROR = 11
    EXECUTION_FAILED = 13
    INTERNAL_ERROR = 14
    NOT_SUPPORTED = 15
    LICENSE_ERROR = 16


class Operation(enum.IntEnum):
    """``cublasOperation_t``."""

    N = 0
    T = 1
    C = 2
    CONJG = 3
    HERMITAN = 2


class PointerMode(enum.IntEnum):
    """``cublasPointerMode_t``."""

    HOST = 0
    DEVICE = 1


class AtomicsMode(enum.IntEnum):
    """``cublasAtomicsMode_t``."""

    NOT_ALLOWED = 0
    ALLOWED = 1


class Math(enum.IntEnum):
    """``cublasMath_t`` (flags; ``DISALLOW_REDUCED_PRECISION_REDUCTION`` may be or-ed in)."""

    DEFAULT_MATH = 0
    TENSOR_OP_MATH = 1
    PEDANTIC_MATH = 2
    TF32_TENSOR_OP_MATH = 3
    FP32_EMULATED_BF16X9_MATH = 4
    FP64_EMULATED_FIXEDPOINT_MATH = 8
    DISALLOW_REDUCED_PRECISION_REDUCTION = 16


class ComputeType(enum.IntEnum):
    """``cublasComputeType_t``."""

    COMPUTE_16F = 64
    COMPUTE_16F_PEDANTIC = 65
    COMPUTE_32F = 68
    COMPUTE_32F_PEDANTIC = 69
    COMPUTE_32F_FAST_16F = 74
    COMPUTE_32F_FAST_16BF = 75
    COMPUTE_32F_FAST_TF32 = 77
    COMPUTE_32F_EMULATED_16BFX9 = 78
    COMPUTE_64F = 70
    COMPUTE_64F_PEDANTIC = 71
    COMPUTE_64F_EMULATED_FIXEDPOINT = 79
    COMPUTE_32I = 72
    COMPUTE_32I_PEDANTIC = 73


GemmAlgo = enum.IntEnum("GemmAlgo", [("DFALT", -1), ("DEFAULT", -1)] + [(f"ALGO{i}", i) for i in range(24)] + [
    ("DEFAULT_TENSOR_OP", 99), ("DFALT_TENSOR_OP", 99)] + [(f"ALGO{i}_TENSOR_OP", 100 + i) for i in range(16)] + [
    ("AUTOTUNE", 999)])
GemmAlgo.__doc__ = "``cublasGemmAlgo_t``."

_STATUS_TEXT = {
    0: "success", 1: "the library was not initialized", 3: "the resource allocation failed",
    7: "an invalid value was used as an argument", 8: "the device does not support this operation",
    11: "an access to GPU memory space failed", 13: "the GPU program failed to execute",
    14: "an internal operation failed", 15: "the functionality requested is not supported",
    16: "the functionality requested requires some license",
}


class cuBLASError(Exception):  # noqa: N801 - nvmath's name
    """A cuBLAS call returned ``status`` (a :class:`Status`); the message says which argument was wrong."""

    def __init__(self, status: int) -> None:
        self.status = status
        name = Status(status).name if status in Status._value2member_map_ else str(status)
        super().__init__(f"CUBLAS_STATUS_{name} ({status}): {_STATUS_TEXT.get(status, 'unknown status')}")

    def __reduce__(self) -> Any:
        return (type(self), (self.status,))


def _error(status: Status, detail: str) -> cuBLASError:
    err = cuBLASError(int(status))
    err.args = (f"{err.args[0]} ({detail})",)
    return err


def check_status(status: int) -> None:
    """Raise :class:`cuBLASError` unless ``status`` is ``Status.SUCCESS``."""
    if status != 0:
        raise cuBLASError(status)


# -- handles ---------------------------------------------------------------------------------------------
class _Handle:
    __slots__ = ("device_id", "stream", "workspace", "math_mode", "pointer_mode")

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.stream = 0  # the legacy null stream until set_stream
        self.workspace: tuple[int, int, int] | None = None  # (address, bytes, allocation id)
        self.math_mode = 0
        self.pointer_mode = 0


_handles: dict[int, _Handle] = {}
_handle_ids = itertools.count(1)


def _reset() -> None:
    """Forget every handle (used by install)."""
    _handles.clear()


def _int(value: Any, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer (an address, a handle or a count), got "
                        f"{type(value).__name__}") from None


def _handle(handle: Any) -> _Handle:
    h = _handles.get(_int(handle, "handle"))
    if h is None:
        raise _error(Status.NOT_INITIALIZED, f"handle {handle!r} was not made by create() or was destroyed")
    return h


def create() -> int:
    """A cuBLAS handle on the current device (``cublasCreate``): its stream is the legacy null stream."""
    device_id = _state.check_device_id(_state.current_device_id())
    address = 0xCB1A_0000_0000 + next(_handle_ids) * 0x100
    _handles[address] = _Handle(device_id)
    return address


def destroy(handle: int) -> None:
    """Release ``handle`` (``cublasDestroy``)."""
    _handle(handle)
    del _handles[int(handle)]


def set_stream(handle: int, stream_id: int) -> None:
    """Run the handle's later calls on the stream with address ``stream_id`` (``Stream.ptr``; 0: legacy).

    As cuBLAS does, this also resets the workspace to cuBLAS's own (call ``set_workspace`` after it).
    """
    h = _handle(handle)
    stream_id = _int(stream_id, "stream_id")
    _streams.stream_from_ptr(stream_id, h.device_id)
    h.stream = stream_id
    h.workspace = None


def get_stream(handle: int) -> int:
    """The address of the handle's stream (0: the legacy null stream)."""
    return _handle(handle).stream


def set_workspace(handle: int, workspace: int, workspace_size_in_bytes: int) -> None:
    """Give the handle ``workspace_size_in_bytes`` bytes of device memory at ``workspace`` (256-byte aligned).

    The memory must be a live allocation of the handle's device and stay alive while the handle (or a graph
    that recorded its calls) uses it: every GEMM counts as a write of it, for the stream rules.
    """
    h = _handle(handle)
    workspace, size = _int(workspace, "workspace"), _int(workspace_size_in_bytes, "workspace_size_in_bytes")
    if workspace == 0 and size == 0:
        h.workspace = None
        return
    if workspace % 256 or size < 0:
        raise _error(Status.INVALID_VALUE, f"workspace {workspace:#x} must be aligned to 256 bytes, size >= 0")
    allocation, _ = _memory.resolve(workspace, size, h.device_id)
    h.workspace = (workspace, size, allocation.id)


def set_math_mode(handle: int, mode: int) -> None:
    """Set the handle's ``Math`` mode (recorded; reduced-precision modes compute in full precision here)."""
    h = _handle(handle)
    mode = _int(mode, "mode")
    if mode & ~16 not in (0, 1, 2, 3, 4, 8):
        raise _error(Status.INVALID_VALUE, f"unknown math mode {mode}")
    h.math_mode = mode


def get_math_mode(handle: int) -> int:
    """The handle's ``Math`` mode."""
    return _handle(handle).math_mode


def set_pointer_mode(handle: int, mode: int) -> None:
    """Whether alpha and beta are host (``PointerMode.HOST``, the default) or device addresses."""
    h = _handle(handle)
    mode = _int(mode, "mode")
    if mode not in (0, 1):
        raise _error(Status.INVALID_VALUE, f"unknown pointer mode {mode}")
    h.pointer_mode = mode


def get_pointer_mode(handle: int) -> int:
    """The handle's ``PointerMode``."""
    return _handle(handle).pointer_mode


# -- GEMM ------------------------------------------------------------------------------------------------
_BF16 = "bfloat16"
_STORAGE = {0: np.dtype(np.float32), 1: np.dtype(np.float64), 2: np.dtype(np.float16), 14: _BF16}
_COMPUTE = {  # compute type -> (accumulation dtype, scale dtype, allowed (A, B, C) data types)
    **{c: (np.dtype(np.float32), np.dtype(np.float32), {(0, 0, 0), (2, 2, 2), (2, 2, 0), (14, 14, 14), (14, 14, 0)})
       for c in (68, 69, 74, 75, 77)},
    **{c: (np.dtype(np.float64), np.dtype(np.float64), {(1, 1, 1)}) for c in (70, 71)},
    **{c: (np.dtype(np.float32), np.dtype(np.float16), {(2, 2, 2)}) for c in (64, 65)},
}
_ALGOS = frozenset(m.value for m in GemmAlgo)


def _widen(x: np.ndarray, storage: Any, compute: np.dtype) -> np.ndarray:
    if storage is _BF16:
        return _bf16_to_f32(x)
    return x if x.dtype == compute else x.astype(compute)


def _narrow(x: np.ndarray, storage: Any) -> np.ndarray:
    if storage is _BF16:
        return _f32_to_bf16(x)
    return x.astype(storage, copy=False)


def _matrix(ptr: int, storage: Any, rows: int, cols: int, ld: int, stride: int, batch: int, device_id: int,
            what: str) -> tuple[np.ndarray, tuple[Any, int, int]]:
    """The column-major matrices at ``ptr`` as a (batch, rows, cols) NumPy view, and the byte range they span."""
    dtype = np.dtype(np.uint16) if storage is _BF16 else storage
    size = dtype.itemsize
    span = ((batch - 1) * stride + (cols - 1) * ld + rows) * size if rows and cols and batch else 0
    try:
        allocation, offset = _memory.resolve(ptr, span, device_id)
    except _EmulatedGPUError as exc:
        raise _EmulatedGPUError(f"{what}: {exc}") from None
    view = np.ndarray((batch, rows, cols), dtype, buffer=allocation.block.buf, offset=offset,
                      strides=(stride * size, size, ld * size))
    return view, (allocation, offset, offset + max(span, 1))


def _scalar(h: _Handle, ptr: int, dtype: np.dtype, name: str, what: str) -> tuple[Any, Any]:
    """(value, None) for a host pointer (read now), (None, (view, byte range)) for a device pointer."""
    if ptr == 0:
        raise _error(Status.INVALID_VALUE, f"{what}: {name} is a null pointer")
    try:
        allocation, offset = _memory.resolve(ptr, dtype.itemsize)
    except _EmulatedGPUError:
        allocation = None
    if h.pointer_mode == 0:
        if allocation is not None:
            raise _EmulatedGPUError(f"{what}: {name} ({ptr:#x}) points into device memory ({allocation!r}) but the "
                                    "handle's pointer mode is HOST; pass a host address (e.g. numpy_scalar_array"
                                    ".ctypes.data) or set_pointer_mode(handle, PointerMode.DEVICE)")
        return np.frombuffer(ctypes.string_at(ptr, dtype.itemsize), dtype)[0], None
    if allocation is None or allocation.device_id != h.device_id:
        raise _EmulatedGPUError(f"{what}: {name} ({ptr:#x}) is not in device memory of gpu({h.device_id}) but the "
                                "handle's pointer mode is DEVICE")
    view = np.ndarray((), dtype, buffer=allocation.block.buf, offset=offset)
    return None, (view, (allocation, offset, offset + dtype.itemsize))


def _overlap(x: tuple[Any, int, int], y: tuple[Any, int, int]) -> bool:
    return x[0] is y[0] and x[1] < y[2] and y[1] < x[2]


def _gemm(name: str, handle: Any, transa: Any, transb: Any, m: Any, n: Any, k: Any, alpha: Any, a: Any,
          atype: int, lda: Any, stride_a: Any, b: Any, btype: int, ldb: Any, stride_b: Any, beta: Any, c: Any,
          ctype: int, ldc: Any, stride_c: Any, batch: Any, compute: int, algo: int) -> None:
    h = _handle(handle)
    transa, transb, m, n, k = (_int(v, p) for v, p in ((transa, "transa"), (transb, "transb"), (m, "m"), (n, "n"),
                                                      (k, "k")))
    lda, ldb, ldc, batch = _int(lda, "lda"), _int(ldb, "ldb"), _int(ldc, "ldc"), _int(batch, "batch_count")
    stride_a, stride_b, stride_c = _int(stride_a, "stride_a"), _int(stride_b, "stride_b"), _int(stride_c, "stride_c")
    alpha, a, b, beta, c = (_int(v, p) for v, p in ((alpha, "alpha"), (a, "a"), (b, "b"), (beta, "beta"), (c, "c")))
    what = f"cublas {name}(m={m}, n={n}, k={k})"
    device_id = _state.current_device_id()
    if device_id != h.device_id:
        raise _EmulatedGPUError(f"{what}: the handle belongs to gpu({h.device_id}) but gpu({device_id}) is current")
    rows_a, cols_a = (m, k) if transa == 0 else (k, m)
    rows_b, cols_b = (k, n) if transb == 0 else (n, k)
    bad = [f"{p}={v}" for p, v, ok in (
        ("transa", transa, transa in (0, 1, 2)), ("transb", transb, transb in (0, 1, 2)), ("m", m, m >= 0),
        ("n", n, n >= 0), ("k", k, k >= 0), ("batch_count", batch, batch >= 0),
        ("lda", lda, lda >= max(1, rows_a)), ("ldb", ldb, ldb >= max(1, rows_b)), ("ldc", ldc, ldc >= max(1, m)))
        if not ok]
    if bad:
        raise _error(Status.INVALID_VALUE, f"{what}: {', '.join(bad)}")
    if min(stride_a, stride_b, stride_c) < 0:
        raise _EmulatedGPUError(f"{what}: negative batch strides are not emulated")
    if batch > 1 and n and stride_c < (n - 1) * ldc + m:
        raise _EmulatedGPUError(f"{what}: stride_c={stride_c} makes the output matrices overlap (each spans "
                                f"{(n - 1) * ldc + m} elements); cuBLAS's result would depend on the order of the "
                                "batch")
    if compute not in _COMPUTE or (atype, btype, ctype) not in _COMPUTE[compute][2]:
        raise _error(Status.NOT_SUPPORTED, f"{what}: compute type {compute} with data types A={atype}, B={btype}, "
                                           f"C={ctype} is not emulated")
    if algo not in _ALGOS:
        raise _error(Status.INVALID_VALUE, f"{what}: unknown algo {algo}")
    accumulate, scale, _ = _COMPUTE[compute]
    stream = _streams.stream_from_ptr(h.stream, h.device_id)
    current = _streams.get_current_stream(device_id)
    capture = None
    if _streams.active_captures:
        if current._capture is not None and stream._capture is not current._capture:
            raise _EmulatedGPUError(f"{what}: {current!r} is capturing but the handle's stream is {stream!r}: the "
                                    "GEMM would run at once instead of being recorded; set_stream(handle, "
                                    "capturing_stream.ptr) and set_workspace(...) before begin_capture()")
        from ...fakecupy import _graph  # noqa: PLC0415 - only under capture

        capture = _graph.issue(stream, what)
        if capture is not None and h.workspace is None:
            raise _EmulatedGPUError(f"{what} on {stream!r}, which is capturing, with no workspace: give the handle "
                                    "one with set_workspace() (after set_stream(), which resets it) before the "
                                    "capture, so the graph does not depend on cuBLAS's own allocations")
    alpha_value, alpha_dev = _scalar(h, alpha, scale, "alpha", what)
    beta_value, beta_dev = _scalar(h, beta, scale, "beta", what)
    if not (m and n and batch):
        return  # nothing to compute: cuBLAS returns at once
    sa, sb, sc = _STORAGE[atype], _STORAGE[btype], _STORAGE[ctype]
    single = name in ("sgemm", "dgemm", "gemm_ex")
    c_view, c_range = _matrix(c, sc, m, n, ldc, stride_c, batch, device_id, what)
    reads, writes = [], [c_range]
    if beta_dev is not None or beta_value != 0:
        reads.append(c_range)
    a_view = b_view = None
    if k:
        a_view, a_range = _matrix(a, sa, rows_a, cols_a, lda, stride_a, batch, device_id, what)
        b_view, b_range = _matrix(b, sb, rows_b, cols_b, ldb, stride_b, batch, device_id, what)
        for other, label in ((a_range, "A"), (b_range, "B")):
            if _overlap(c_range, other):
                raise _EmulatedGPUError(f"{what}: C overlaps {label} in {c_range[0]!r}; cuBLAS does not allow the "
                                        "output to alias an input")
        reads += [a_range, b_range]
    for dev in (alpha_dev, beta_dev):
        if dev is not None:
            reads.append(dev[1])
    if h.workspace is not None:
        address, size, alloc_id = h.workspace
        try:
            allocation, offset = _memory.resolve(address, size, h.device_id)
        except _EmulatedGPUError as exc:
            raise _EmulatedGPUError(f"{what}: the handle's workspace was freed: {exc}") from None
        if allocation.id != alloc_id:
            raise _EmulatedGPUError(f"{what}: the handle's workspace was freed and its memory now belongs to "
                                    f"{allocation!r}; keep the workspace alive while the handle uses it")
        writes.append((allocation, offset, offset + max(size, 1)))
    if single:
        c_view = c_view[0]
        a_view = None if a_view is None else a_view[0]
        b_view = None if b_view is None else b_view[0]
    # Row-major views: X = op(B)^T (n x k), W = op(A)^T (k x m), C^T (n x m) = X @ W.
    x = None if b_view is None else (b_view if transb else b_view.swapaxes(-1, -2))
    w = None if a_view is None else (a_view if transa else a_view.swapaxes(-1, -2))
    c_t = c_view.swapaxes(-1, -2)

    def run() -> None:
        al = alpha_value if alpha_dev is None else alpha_dev[0][()]
        be = beta_value if beta_dev is None else beta_dev[0][()]
        al, be = accumulate.type(al), accumulate.type(be)
        if x is None or al == 0:
            out = np.zeros(c_t.shape, accumulate)
        else:
            out = np.matmul(_widen(x, sb, accumulate), _widen(w, sa, accumulate))
            if al != 1:
                out = out * al
        if be != 0:
            out = out + be * _widen(c_t, sc, accumulate)
        c_t[...] = _narrow(out, sc)

    _core.check_access(stream, reads, writes, what)
    _core.record_access(stream, reads, writes)
    run()
    if capture is not None:
        capture.add(f"cublas.{name}", run, reads, writes)
    else:
        _counters.counters[device_id].kernel_launches[f"cublas.{name}"] += 1


def sgemm(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int, lda: int, b: int,
          ldb: int, beta: int, c: int, ldc: int) -> None:
    """``C = alpha op(A) op(B) + beta C`` in float32 (``cublasSgemm``); column-major, addresses as ints."""
    _gemm("sgemm", handle, transa, transb, m, n, k, alpha, a, 0, lda, 0, b, 0, ldb, 0, beta, c, 0, ldc, 0, 1, 68, -1)


def dgemm(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int, lda: int, b: int,
          ldb: int, beta: int, c: int, ldc: int) -> None:
    """``C = alpha op(A) op(B) + beta C`` in float64 (``cublasDgemm``); column-major, addresses as ints."""
    _gemm("dgemm", handle, transa, transb, m, n, k, alpha, a, 1, lda, 0, b, 1, ldb, 0, beta, c, 1, ldc, 0, 1, 70, -1)


def gemm_ex(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int, atype: int,
            lda: int, b: int, btype: int, ldb: int, beta: int, c: int, ctype: int, ldc: int, compute_type: int,
            algo: int) -> None:
    """``C = alpha op(A) op(B) + beta C`` with data types and a compute type (``cublasGemmEx``).

    Emulated: ``COMPUTE_32F`` (and its PEDANTIC/FAST variants) with A/B/C float32, float16 or bfloat16
    (A and B alike; C like them or float32), ``COMPUTE_64F`` with float64, ``COMPUTE_16F`` with float16;
    alpha/beta in float32, float64 and float16 respectively. Anything else: ``Status.NOT_SUPPORTED``.
    """
    _gemm("gemm_ex", handle, transa, transb, m, n, k, alpha, a, _int(atype, "atype"), lda, 0, b,
          _int(btype, "btype"), ldb, 0, beta, c, _int(ctype, "ctype"), ldc, 0, 1, _int(compute_type, "compute_type"),
          _int(algo, "algo"))


def gemm_strided_batched_ex(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, a: int,
                            atype: int, lda: int, stride_a: int, b: int, btype: int, ldb: int, stride_b: int,
                            beta: int, c: int, ctype: int, ldc: int, stride_c: int, batch_count: int,
                            compute_type: int, algo: int) -> None:
    """``batch_count`` GEMMs ``C_i = alpha op(A_i) op(B_i) + beta C_i``, matrix ``i`` at ``ptr + i * stride``
    elements (``cublasGemmStridedBatchedEx``; types as :func:`gemm_ex`)."""
    _gemm("gemm_strided_batched_ex", handle, transa, transb, m, n, k, alpha, a, _int(atype, "atype"), lda,
          stride_a, b, _int(btype, "btype"), ldb, stride_b, beta, c, _int(ctype, "ctype"), ldc, stride_c,
          batch_count, _int(compute_type, "compute_type"), _int(algo, "algo"))
