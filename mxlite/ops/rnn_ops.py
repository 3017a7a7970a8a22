"""One recurrent layer in one direction over a whole sequence, as one autograd op on fused cell kernels.

Purpose: :func:`recurrence` runs what ``mxlite/gluon/rnn/_steps.py`` composes step by step (RNN with tanh
or relu, LSTM, GRU; MXNet's gate order and formulas) with a handful of launches per time step
instead of a dozen recorded ops: the input projection of the whole sequence is one GEMM before the
time loop; each step is one GEMM (``h @ W_h^T``; on CPU devices against W_h laid out once per pass,
:class:`_PackedWeight`) and one fused cell kernel (``kernels/rnn.cu``);
the whole layer-direction is one autograd node, whose backward runs the loop in reverse (one cell
kernel and one GEMM per step) and then forms ``dW_i``, ``db_i``, ``dW_h``, ``db_h`` and ``dx`` as
whole-sequence GEMMs and sums.

Where it runs: on a GPU the kernels go through CuPy and the GEMMs through ``mxlite.device.blas`` (cuBLAS):
no host synchronisation and no host-to-device copy inside the loops (scalars travel as launch
arguments). On a CPU device the serial host build of the same kernels runs when
:func:`mxlite.device.kernels.cpu_kernels_enabled` allows it, else the NumPy twins below
(``MXLITE_CPU_KERNELS=numpy``), which are the kernels operation by operation: same results, bit
for bit. sigmoid and tanh are computed from IEEE arithmetic (``_exp_parts``; ``kernels/rnn.cu``'s
header says why and how accurate) so that the twins, the host build and a GPU agree exactly.

Example (what ``_steps.rnn_sequence`` does per layer ``l`` and direction ``d``)::

    out, last = recurrence("lstm", layer_in, [h0, c0], weights[l * dirs + d], reverse=d == 1, clip=clip)

Passes over memory: a forward step reads the step's input projection, ``h @ W_h^T`` and the previous
cell state once and writes the new states (and, training, the activated gates: LSTM i, f, g, o; GRU
r, z, n and ``W_hn h + b_hn``; RNN nothing, its state is its output) once; both biases are added in
the kernel, not in passes of their own over the projections. A backward step reads the saved gates,
the previous cell state and the three parts of ``dh'`` and writes the gate gradients, ``dc`` and the
carried part of ``dh``.
``dW_h`` and ``db_h`` are one GEMM and one sum over all steps after the loop (the states of every step
are kept, ``(T+1, N, H)``), not a small GEMM per step.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograd import is_recording
from ..autograd.tensor import Tensor, grad_out, op_result
from ..device import blas
from ..device.kernels import HostEntry, KernelFile, array_address
from ..device.threads import blas_threads_limited
from .core import _op

__all__ = ["GATES", "KERNELS", "KERNEL_FILE", "NUM_STATES", "recurrence"]

KERNEL_FILE = "rnn.cu"
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}  # gate blocks of H rows in the weights
NUM_STATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 2, "gru": 1}
_SAVED = {"rnn_relu": 0, "rnn_tanh": 0, "lstm": 4, "gru": 4}  # H-wide blocks saved per step for backward
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float64", "float16"),
                     ("lstm_forward", "lstm_backward", "gru_forward", "gru_backward", "rnn_forward", "rnn_backward"))
_MAX_BLOCKS = 65535  # a block per row; blocks loop over rows past it
# CPU devices: a cell step with fewer units (rows x hidden) than this runs on the calling thread. Such a
# launch takes about 0.1 ms (32 x 256 LSTM units), which the host pool would still spread over a second
# thread; on the 2-core development machine the word LMs of benchmarks/bench_train.py ran 4-6% faster
# with their cell steps on one thread (LSTM 108.5 -> 104.0 ms, GRU 97.6 -> 91.7, three A/B pairs, two threads).
_CPU_SPREAD_UNITS = 1 << 16
_NULL = np.uint64(0)  # an 8-byte zero is a null pointer argument


# -- the NumPy twins of kernels/rnn.cu's arithmetic -------------------------------------------------------------
class _ExpConstants:
    """kernels/rnn.cu's ``Exp<A>``: the constants of exp(y) = 2^k (1 + q) in math dtype ``dtype``."""

    def __init__(self, dtype: Any, bits: Any, lowest: float, ln2_hi: float, ln2_lo: float, magic: float,
                 magic_bits: int, bias: int, mantissa: int, degree: int) -> None:
        self.dtype, self.bits = np.dtype(dtype), bits
        self.lowest = dtype(lowest)
        self.log2e = dtype(1.4426950408889634)
        self.ln2_hi, self.ln2_lo = dtype(ln2_hi), dtype(ln2_lo)
        self.magic, self.magic_bits = dtype(magic), bits(magic_bits)
        self.bias, self.mantissa = bits(bias), bits(mantissa)
        # (e^r - 1)/r to 1/(degree+1)!: 1/n! rounded to double (n! is exact), then to the math dtype
        self.poly = tuple(dtype(1 / math.factorial(n)) for n in range(1, degree + 2))


_EXP = {
    np.dtype(np.float32): _ExpConstants(np.float32, np.uint32, -87.3, 0.693359375, 0.6931471805599453 - 0.693359375,
                                        12582912.0, 0x4B400000, 127, 23, 7),
    np.dtype(np.float64): _ExpConstants(np.float64, np.uint64, -708.3, 6.93147180369123816490e-01,
                                        1.90821492927058770002e-10, 6755399441055744.0, 0x4338000000000000,
                                        1023, 52, 13),
}


def _exp_parts(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, q)`` with exp(y) = s * (1 + q), s = 2^k, for y <= 0 (kernels/rnn.cu: exp_parts)."""
    c = _EXP[y.dtype]
    y = np.where(y < c.lowest, c.lowest, y)          # clamp; NaN stays NaN
    j = y * c.log2e
    j += c.magic                                     # k in the low mantissa bits
    kf = j - c.magic
    r = y - kf * c.ln2_hi
    r -= kf * c.ln2_lo                               # r = y - k ln 2
    poly = np.full_like(r, c.poly[-1])
    for coefficient in c.poly[-2::-1]:               # Horner: c0 + r*(c1 + r*(...))
        poly *= r
        poly += coefficient
    q = r * poly
    k = j.view(c.bits) - c.magic_bits                # two's complement k, modulo 2^32 / 2^64
    s = ((k + c.bias) << c.mantissa).view(y.dtype)
    return s, q


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """sigmoid as kernels/rnn.cu computes it: (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|)."""
    s, q = _exp_parts(-np.abs(x))
    e = s * q
    e += s
    one = x.dtype.type(1)
    return np.where(x >= 0, one, e) / (one + e)


def _tanh(x: np.ndarray) -> np.ndarray:
    """tanh as kernels/rnn.cu computes it: copysign(-m / (2 + m), x), m = expm1(-2|x|)."""
    s, q = _exp_parts(x.dtype.type(-2) * np.abs(x))
    m = s - x.dtype.type(1)
    m += s * q
    return np.copysign(-m / (x.dtype.type(2) + m), x)


def _math_dtype(dtype: Any) -> np.dtype:
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _load(a: np.ndarray) -> np.ndarray:
    """``a`` in its math dtype (float16 computes in float32, as the kernels' ``arith``)."""
    return a.astype(_math_dtype(a.dtype), copy=False)


def _rows(active: np.ndarray | None) -> np.ndarray | None:
    return None if active is None else active[:, None]


def _put(dst: np.ndarray, value: Any, active: np.ndarray | None, frozen: Any = None) -> None:
    """dst = value on live rows; ``frozen`` (or nothing, when None) on rows past their end; rounded to dst's dtype."""
    if active is None:
        np.copyto(dst, value, casting="same_kind")
        return
    np.copyto(dst, value, casting="same_kind", where=active[:, None])
    if frozen is not None:
        np.copyto(dst, frozen, casting="same_kind", where=~active[:, None])


def _store_live(h_next: Any, y: Any, saved: Any, h: np.ndarray, values: Sequence[np.ndarray], active: Any,
                h_prev: Any) -> None:
    """A step's results (kernels/rnn.cu: freeze_row, store_live): the state (frozen rows keep ``h_prev``),
    the output (0 on frozen rows) and the saved H-wide blocks (frozen rows untouched)."""
    _put(h_next, h, active, h_prev)
    if y is not None:
        _put(y, h, active, 0)
    if saved is not None:
        width = h.shape[1]
        for k, value in enumerate(values):
            _put(saved[:, k * width:(k + 1) * width], value, active)


def _active(lengths: np.ndarray | None, step: Any) -> np.ndarray | None:
    return None if lengths is None else int(step) < lengths


def _recurrent(xg: np.ndarray, hg: np.ndarray, bias_i: np.ndarray, bias_h: np.ndarray, k: int,
               hidden: int) -> np.ndarray:
    """Gate block ``k``'s pre-activation: (xg + b_i) + (hg + b_h), in the math dtype."""
    cols = slice(k * hidden, (k + 1) * hidden)
    return (_load(xg[:, cols]) + _load(bias_i[cols])) + (_load(hg[:, cols]) + _load(bias_h[cols]))


def _lstm_forward(xg: Any, hg: Any, bias_i: Any, bias_h: Any, h_prev: Any, c_prev: Any, h_next: Any, c_next: Any,
                  y: Any, gates: Any, lengths: Any, step: Any, rows: Any, hidden: Any, clip: Any, lo: Any,
                  hi: Any) -> None:
    """Twin of ``lstm_forward<T>`` (same arguments, None for a null pointer)."""
    H = int(hidden)
    active = _active(lengths, step)
    i = _sigmoid(_recurrent(xg, hg, bias_i, bias_h, 0, H))
    f = _sigmoid(_recurrent(xg, hg, bias_i, bias_h, 1, H))
    g = _tanh(_recurrent(xg, hg, bias_i, bias_h, 2, H))
    o = _sigmoid(_recurrent(xg, hg, bias_i, bias_h, 3, H))
    c = f * _load(c_prev)
    c += i * g                                       # c' = f*c + i*g
    if clip:
        c = np.where(c < lo, lo, c)
        c = np.where(c > hi, hi, c)                  # clamp, NaN kept
    h = o * _tanh(c)
    _put(c_next, c, active, c_prev)
    _store_live(h_next, y, gates, h, (i, f, g, o), active, h_prev)


def _pass_rows(active: np.ndarray, rec: np.ndarray, carry: Any, grads: Sequence[Any]) -> None:
    """Rows past their end, backward: zero gate gradients, carry = dh_rec + carry."""
    for d in grads:
        np.copyto(d, 0, where=~active[:, None])
    np.copyto(carry, rec, casting="same_kind", where=~active[:, None])


def _lstm_backward(gates: Any, c_prev: Any, dy: Any, dh_rec: Any, carry: Any, dc: Any, dgates: Any, lengths: Any,
                   step: Any, rows: Any, hidden: Any, clip: Any, lo: Any, hi: Any) -> None:
    """Twin of ``lstm_backward<T>``."""
    H = int(hidden)
    active = _active(lengths, step)
    rec = _load(dh_rec) + _load(carry)
    dh = rec + _load(dy)
    i, f, g, o = (_load(gates[:, k * H:(k + 1) * H]) for k in range(4))
    cp = _load(c_prev)
    raw = f * cp
    raw += i * g
    c = np.where(raw > hi, hi, np.where(raw < lo, lo, raw)) if clip else raw
    tc = _tanh(c)
    one = raw.dtype.type(1)
    dct = _load(dc) + (dh * o) * (one - tc * tc)
    if clip:
        dct = np.where((raw >= lo) & (raw <= hi), dct, raw.dtype.type(0))
    parts = ((dct * g) * (i * (one - i)), (dct * cp) * (f * (one - f)), (dct * i) * (one - g * g),
             (dh * tc) * (o * (one - o)))
    for k, value in enumerate(parts):
        _put(dgates[:, k * H:(k + 1) * H], value, active)
    _put(dc, dct * f, active)
    _put(carry, 0, active)
    if active is not None:
        _pass_rows(active, rec, carry, (dgates,))


def _gru_forward(xg: Any, hg: Any, bias_i: Any, bias_h: Any, h_prev: Any, h_next: Any, y: Any, saved: Any,
                 lengths: Any, step: Any, rows: Any, hidden: Any) -> None:
    """Twin of ``gru_forward<T>``."""
    H = int(hidden)
    active = _active(lengths, step)
    r = _sigmoid(_recurrent(xg, hg, bias_i, bias_h, 0, H))
    z = _sigmoid(_recurrent(xg, hg, bias_i, bias_h, 1, H))
    hn = _load(hg[:, 2 * H:]) + _load(bias_h[2 * H:])
    n = _tanh((_load(xg[:, 2 * H:]) + _load(bias_i[2 * H:])) + r * hn)
    one = r.dtype.type(1)
    h = (one - z) * n
    h += z * _load(h_prev)                           # h' = (1-z)*n + z*h
    _store_live(h_next, y, saved, h, (r, z, n, hn), active, h_prev)


def _gru_backward(saved: Any, h_prev: Any, dy: Any, dh_rec: Any, carry: Any, dx_gates: Any, dh_gates: Any,
                  lengths: Any, step: Any, rows: Any, hidden: Any) -> None:
    """Twin of ``gru_backward<T>``."""
    H = int(hidden)
    active = _active(lengths, step)
    rec = _load(dh_rec) + _load(carry)
    dh = rec + _load(dy)
    r, z, n, hn = (_load(saved[:, k * H:(k + 1) * H]) for k in range(4))
    one = r.dtype.type(1)
    dn = (dh * (one - z)) * (one - n * n)
    dr = (dn * hn) * (r * (one - r))
    dz = (dh * (_load(h_prev) - n)) * (z * (one - z))
    for k, value in enumerate((dr, dz, dn)):
        _put(dx_gates[:, k * H:(k + 1) * H], value, active)
    for k, value in enumerate((dr, dz, dn * r)):
        _put(dh_gates[:, k * H:(k + 1) * H], value, active)
    _put(carry, dh * z, active)
    if active is not None:
        _pass_rows(active, rec, carry, (dx_gates, dh_gates))


def _rnn_forward(xg: Any, hg: Any, bias_i: Any, bias_h: Any, h_prev: Any, h_next: Any, y: Any, lengths: Any,
                 step: Any, rows: Any, hidden: Any, relu: Any) -> None:
    """Twin of ``rnn_forward<T>``."""
    active = _active(lengths, step)
    pre = _recurrent(xg, hg, bias_i, bias_h, 0, int(hidden))
    h = np.where((pre > 0) | (pre != pre), pre, pre.dtype.type(0)) if relu else _tanh(pre)
    _store_live(h_next, y, None, h, (), active, h_prev)


def _rnn_backward(h_next: Any, dy: Any, dh_rec: Any, carry: Any, dgates: Any, lengths: Any, step: Any, rows: Any,
                  hidden: Any, relu: Any) -> None:
    """Twin of ``rnn_backward<T>``."""
    active = _active(lengths, step)
    rec = _load(dh_rec) + _load(carry)
    dh = rec + _load(dy)
    h = _load(h_next)
    d = np.where(h > 0, dh, dh.dtype.type(0)) if relu else dh * (h.dtype.type(1) - h * h)
    _put(dgates, d, active)
    _put(carry, 0, active)
    if active is not None:
        _pass_rows(active, rec, carry, (dgates,))


_TWINS = {"lstm_forward": _lstm_forward, "lstm_backward": _lstm_backward, "gru_forward": _gru_forward,
          "gru_backward": _gru_backward, "rnn_forward": _rnn_forward, "rnn_backward": _rnn_backward}


# -- launching ------------------------------------------------------------------------------------------------
class _Cells:
    """The cell kernels (or, on a CPU device without the host build, their twins) for one dtype and device."""

    def __init__(self, device: Any, dtype: Any, threads: int | None = None) -> None:
        name = np.dtype(dtype).name
        if not KERNELS.supports(name):
            raise TypeError(f"recurrent kernels take float16, float32 or float64 data, got {name}")
        self.device, self.type_name = device, KERNELS.type_name(name)
        self.math = np.float64 if name == "float64" else np.float32
        self.compiled = KERNELS.compiled_on(device)
        self.threads = threads
        self._functions: dict[str, Any] = {}  # kernel name -> launchable, looked up once per call of the op

    def __call__(self, kernel: str, buffers: Sequence[Any], ints: Sequence[int], reals: Sequence[float] = ()) -> None:
        """``kernel<T>(*buffers, *ints as int32, *reals in the math dtype)``; a None buffer is a null pointer."""
        rows, hidden = int(ints[1]), int(ints[2])  # every kernel's ints: step, rows, hidden, [clip | relu]
        if not self.compiled:
            with np.errstate(all="ignore"):  # NaN and inf flow through as in the kernels, silently
                _TWINS[kernel](*buffers, *(np.int32(i) for i in ints), *(self.math(r) for r in reals))
            return
        if rows == 0:
            return  # a grid of 0 blocks is a CUDA error
        function = self._functions.get(kernel)
        if function is None:
            function = KERNELS.function(f"{kernel}<{self.type_name}>", self.device)
            self._functions[kernel] = function
        threads = self.threads
        if threads is None:
            # on a GPU: the declared block, fewer for a narrow hidden size
            threads = min(KERNELS.block_threads, max(32, -(-hidden // 32) * 32)) if self.device.is_gpu else 1
        args = (*[_NULL if b is None else b for b in buffers], *[np.int32(i) for i in ints],
                *[self.math(r) for r in reals])
        if not self.device.is_gpu and rows * hidden < _CPU_SPREAD_UNITS:
            function((min(rows, _MAX_BLOCKS),), (threads,), args, threads=1)  # the host build's thread budget
        else:
            function((min(rows, _MAX_BLOCKS),), (threads,), args)


# -- the time loops in one native call (CPU devices) --------------------------------------------------------------
# kernels/rnn.cu's host-only loops take one struct each: StepsHead, their buffers' addresses, then Clip.
_STEPS_HEAD = [(name, ctypes.c_longlong) for name in (
    "mode", "length", "batch", "hidden", "gate_rows", "saved_rows", "backwards", "threads")]
_CLIP = [("clip_on", ctypes.c_longlong), ("clip_lo", ctypes.c_double), ("clip_hi", ctypes.c_double)]


def _steps_struct(name: str, buffers: tuple[str, ...]) -> type[ctypes.Structure]:
    fields = [*_STEPS_HEAD, *[(b, ctypes.c_void_p) for b in buffers], ("lengths", ctypes.c_void_p), *_CLIP]
    return type(name, (ctypes.Structure,), {"_fields_": fields, "__doc__": f"kernels/rnn.cu's ``{name[1:]}``."})


_FORWARD_BUFFERS = ("proj", "bias_i", "bias_h", "w_packed", "hg", "hs", "cs", "y", "saved")
_BACKWARD_BUFFERS = ("saved", "cs", "hs", "dy", "w_packed", "rec", "carry", "dc", "d_gates", "dh_gates")
_ForwardSteps = _steps_struct("_ForwardSteps", _FORWARD_BUFFERS)
_BackwardSteps = _steps_struct("_BackwardSteps", _BACKWARD_BUFFERS)
_MODES = {"lstm": 0, "gru": 1, "rnn_tanh": 2, "rnn_relu": 3}


class _NativeSteps:
    """A layer's forward or backward steps as calls of kernels/rnn.cu's host loops: per step the product against
    the packed W_h (:class:`_PackedWeight`) and the cell kernel, as :meth:`_Layer.run` and :meth:`_Layer.run_back`
    do, with the same bits, but a whole range of steps per call, without the interpreter (and its lock) between
    them. The layer's buffers (``arrays``, C-contiguous) must stay where they are while it is used."""

    def __init__(self, layer: _Layer, entry: HostEntry, struct: type[ctypes.Structure], arrays: Sequence[Any]) -> None:
        L = layer
        self._entry, self._units = entry, L.batch * L.hidden
        self._steps = struct(_MODES[L.mode], L.length, L.batch, L.hidden, L.gate_rows, _SAVED[L.mode] * L.hidden,
                             int(L.backwards), 1, *[array_address(a) for a in arrays], array_address(L.lengths),
                             *L.clip)

    def __call__(self, s0: int, s1: int) -> None:
        # the cells' thread budget as _Cells gives it: small steps on the calling thread
        self._steps.threads = 1 if self._units < _CPU_SPREAD_UNITS else HostEntry.launch_budget()
        self._entry(ctypes.byref(self._steps), s0, s1)


def _native_steps(layer: _Layer, direction: str, arrays: Sequence[Any]) -> _NativeSteps | None:
    """kernels/rnn.cu's ``mxlite_rnn_<direction>_steps_<T>`` over ``arrays`` (the struct's buffers, in order, the
    packed W_h among them: called only where :func:`_packs_w_h` holds) where the native loops apply (C-contiguous
    buffers and int32 lengths); else None, and the steps run from Python."""
    if not NATIVE_STEPS or layer.batch == 0:
        return None  # (an empty batch launches nothing: the Python loop skips its cells)
    if any(a is not None and not a.flags.c_contiguous for a in arrays):
        return None
    lengths = layer.lengths
    if lengths is not None and (lengths.dtype != np.int32 or not lengths.flags.c_contiguous):
        return None
    entry = KERNELS.host_entry(f"mxlite_rnn_{direction}_steps_{KERNELS.type_name(layer.dtype)}",
                               [ctypes.c_void_p, ctypes.c_int, ctypes.c_int])
    if entry is None:
        return None
    struct = _ForwardSteps if direction == "forward" else _BackwardSteps
    return _NativeSteps(layer, entry, struct, arrays)


# -- host scratch buffers ---------------------------------------------------------------------------------------
class _Spares:
    """Large host arrays handed back after use and handed out again (CPU devices; CuPy pools device memory).

    Why: glibc serves a request as large as the largest block freed so far with a fresh mapping, so
    every call's 4.6 MB projection or saved gates (T=35, N=32, 4H=1024, float32) was faulted in page by
    page again: about 1,900 page faults per LSTM layer-direction, a quarter of its time on a 2-core VM,
    where PyTorch's caching allocator had none. Only arrays that never leave this module are handed
    back (never the outputs, states or gradients a caller holds). At most ``limit`` arrays are kept,
    the most recently returned (16: a two-layer bidirectional LSTM has 9 in use at its peak, 4 saved
    gates, 4 cell-state buffers and a projection, besides the packed W_h of the layer running), so what
    stays allocated is never more than recent steps had in use, as with PyTorch's caching allocator.
    """

    def __init__(self, limit: int = 16) -> None:
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []
        self.limit = limit

    def empty(self, xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised array: a spare one of this shape and dtype if there is one (NumPy only)."""
        if xp is np:
            with self._lock:
                for k, spare in enumerate(self._free):
                    if spare.shape == shape and spare.dtype == dtype:
                        return self._free.pop(k)
        return xp.empty(shape, dtype=dtype)

    def give(self, *arrays: Any) -> None:
        """Take back arrays that nothing else references any more (None and device arrays are skipped)."""
        with self._lock:
            self._free.extend(a for a in arrays if isinstance(a, np.ndarray))
            del self._free[:-self.limit]


_SPARES = _Spares()


# -- the per-step product against a packed W_h (CPU devices) ------------------------------------------------------
class _PackedWeight:
    """``a @ B`` for the B of a whole pass (W_h^T forward, W_h backward), laid out once in panels by the host
    build (kernels/packed_product.cuh) and multiplied by each step's ``a``: about 1.7x faster than NumPy's BLAS at
    a batch of 32 (OpenBLAS lays B out again on every call). The native loops read :attr:`panels` directly; the
    Python loop calls the product (same bits); both run on the calling thread.

    Args:
        matrix: the C-contiguous source, ``(k, n)``, or ``(n, k)`` with ``transposed`` (B is then its transpose).
        transposed: see ``matrix``.
    """

    TYPES = ("float32", "float64")

    def __init__(self, matrix: np.ndarray, transposed: bool) -> None:
        name = matrix.dtype.name
        self.n, self.k = matrix.shape if transposed else matrix.shape[::-1]
        width = 128 // matrix.itemsize  # packed_product.cuh's Panel<T>::width: two 64-byte vectors
        self.panels = _SPARES.empty(np, (self.k * -(-self.n // width) * width,), matrix.dtype)
        pack, self._product = _packed_entries(name)
        pack(matrix.ctypes.data, matrix.shape[1], int(transposed), self.k, self.n, self.panels.ctypes.data)

    def __call__(self, a: np.ndarray, out: np.ndarray) -> None:
        """``out[...] = a @ B``: ``a`` ``(m, k)`` and ``out`` ``(m, n)`` of B's dtype, each row unit-stride."""
        size = a.dtype.itemsize
        self._product(a.shape[0], self.n, self.k, a.ctypes.data, a.strides[0] // size, self.panels.ctypes.data,
                      out.ctypes.data, out.strides[0] // size, 0)

    def release(self) -> None:
        """Hand the panels back for reuse (no loop may use this product afterwards)."""
        _SPARES.give(self.panels)
        self.panels = None


_PACKED_ENTRIES: dict[str, tuple[HostEntry, HostEntry]] = {}


def _packed_entries(type_name: str) -> tuple[HostEntry, HostEntry]:
    """kernels/rnn.cu's ``mxlite_pack_panels_<T>`` and ``mxlite_packed_product_<T>`` for ``float32``/``float64``."""
    entries = _PACKED_ENTRIES.get(type_name)
    if entries is None:
        c = KERNELS.type_name(type_name)
        i64, ptr = ctypes.c_longlong, ctypes.c_void_p
        pack = KERNELS.host_entry(f"mxlite_pack_panels_{c}", [ptr, i64, ctypes.c_int, i64, i64, ptr])
        product = KERNELS.host_entry(f"mxlite_packed_product_{c}",
                                     [i64, i64, i64, ptr, i64, ptr, ptr, i64, ctypes.c_int])
        if pack is None or product is None:
            raise RuntimeError(f"the host build of {KERNEL_FILE} lacks the packed product's entries")
        entries = _PACKED_ENTRIES[type_name] = (pack, product)
    return entries


def _packs_w_h(layer: _Layer) -> bool:
    """Whether ``layer``'s per-step products go through :class:`_PackedWeight` (CPU devices with the compiled
    kernels, float32 and float64); otherwise they are :func:`mxlite.device.blas.matmul` calls."""
    return layer.xp is np and layer.cells.compiled and layer.dtype.name in _PackedWeight.TYPES


# The per-step GEMMs where they go to NumPy's BLAS (float16 on CPU devices, the twins; h @ W_h^T forward,
# d(gates) @ W_h backward: N rows by a few hundred columns) run on this many threads (None: the BLAS's own count).
# OpenBLAS splits even these statically over all its threads, whose wake-ups cost more than they save,
# and waits for the slowest: on the 2-core VM beside a busy neighbour one such product took 1.3 ms on
# two threads against 0.2 ms on one (benchmarks/bench_busy.py, docs/design.md "CPU threads").
STEP_GEMM_THREADS: int | None = 1
# Whether CPU devices run a layer's time loops in native calls (_NativeSteps) where they apply.
NATIVE_STEPS = True


def _step_gemms(xp: Any) -> Any:
    """The context the time loops run in: the BLAS limited to STEP_GEMM_THREADS on a CPU device."""
    if xp is not np or STEP_GEMM_THREADS is None:
        return contextlib.nullcontext()
    return blas_threads_limited(STEP_GEMM_THREADS)


# -- the op ---------------------------------------------------------------------------------------------------
def recurrence(mode: str, x: Tensor, states: Sequence[Tensor], weights: Sequence[Tensor | None],
               reverse: bool = False, clip: tuple[float | None, float | None] | None = None,
               valid_length: Any = None) -> tuple[Tensor, list[Tensor]]:
    """One layer of a recurrence in one direction over a whole sequence (MXNet's fused ``RNN`` op, one layer).

    Computes what ``mxlite.gluon.rnn._steps`` composes step by step, with the same gate order, formulas
    and arguments (``_steps.rnn_sequence`` calls it per layer and direction), as one autograd node:

    - RNN: ``h' = act(W_i x + b_i + W_h h + b_h)``, act tanh (``'rnn_tanh'``) or relu (``'rnn_relu'``);
    - LSTM (gates ``i, f, c, o``): ``c' = sig(f) c + sig(i) tanh(g)``, ``h' = sig(o) tanh(c')``;
    - GRU (gates ``r, z, n``, MXNet's / cuDNN's variant): ``n = tanh(W_in x + b_in + r (W_hn h + b_hn))``,
      ``h' = (1 - z) n + z h``.

    Args:
        mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        x: the input sequence ``(T, N, C)``, time-major.
        states: begin states ``[h]``, or ``[h, c]`` for LSTM, each ``(N, H)``.
        weights: ``(i2h_weight (G*H, C), h2h_weight (G*H, H), i2h_bias (G*H,) or None,
            h2h_bias (G*H,) or None)``, G = 4 (LSTM), 3 (GRU) or 1, gates stacked in MXNet's order.
        reverse: run from the last step to the first (the backward direction of a bidirectional layer).
        clip: LSTM only: ``(min, max)`` bounds of the cell state (MXNet's ``state_clip_min/max``; a None
            side is open), or None.
        valid_length: optional per-sample sequence lengths ``(N,)`` (a Tensor on ``x``'s device, or a
            NumPy array or list; integers stored in any real dtype), MXNet's ``use_sequence_length``:
            sample ``b`` runs its first ``valid_length[b]`` steps (the reverse direction runs them from
            the last valid step back to step 0), its state is frozen after them, and its outputs there
            are 0. On a CPU device the lengths must be integers in ``[0, T]``; on a GPU they are not
            checked (that would wait for the device) and act as clamped into ``[0, T]``.

    Returns:
        ``(outputs, final_states)``: outputs ``(T, N, H)`` in time order, and the final ``[h]`` or
        ``[h, c]``, each ``(N, H)`` (after the last valid step of each sample).

    All tensors share one device and one dtype: float16 (float32 math, half storage), float32 or
    float64. The outputs of one call are recorded as one node; their gradients may come from any
    subset of them.

    Raises:
        ValueError: an unknown mode, shapes or dtypes that disagree (the message names the tensor,
            its shape and the shape expected), clip for a mode other than LSTM, or (CPU devices)
            lengths that are not integers in ``[0, T]``.
        TypeError: a dtype other than float16, float32 or float64.
    """
    if mode not in GATES:
        raise ValueError(f"recurrence: mode must be one of {sorted(GATES)}, got {mode!r}")
    weights = tuple(weights)
    if len(weights) != 4:
        raise ValueError(f"recurrence: weights must be (i2h_weight, h2h_weight, i2h_bias, h2h_bias), "
                         f"got {len(weights)} entries")
    return _recurrence(mode, x, list(states), weights, valid_length, bool(reverse), clip)


def _check(mode: str, x: Tensor, states: list[Tensor], weights: tuple[Tensor | None, ...]) -> tuple[int, int, int, int]:
    """(T, N, C, H) after checking every shape and dtype against ``x`` and ``h2h_weight``."""
    if x.ndim != 3:
        raise ValueError(f"x must be (T, N, C), got shape {x.shape}")
    length, batch, features = x.shape
    i2h_weight, h2h_weight, i2h_bias, h2h_bias = weights
    if i2h_weight is None or h2h_weight is None or h2h_weight.ndim != 2:
        raise ValueError("i2h_weight and h2h_weight are required; h2h_weight must be (G*H, H)")
    gates, hidden = h2h_weight.shape
    if gates != GATES[mode] * hidden:
        raise ValueError(f"h2h_weight has shape {h2h_weight.shape}; {mode} needs ({GATES[mode]}*H, H)")
    if len(states) != NUM_STATES[mode]:
        raise ValueError(f"{mode} takes {NUM_STATES[mode]} begin state(s), got {len(states)}")
    expected = {"i2h_weight": (gates, features), "i2h_bias": (gates,), "h2h_bias": (gates,)}
    named = [("i2h_weight", i2h_weight), ("i2h_bias", i2h_bias), ("h2h_bias", h2h_bias)]
    named += [(f"states[{k}]", s) for k, s in enumerate(states)]
    expected.update({f"states[{k}]": (batch, hidden) for k in range(len(states))})
    for name, t in named:
        if t is not None and t.shape != expected[name]:
            raise ValueError(f"{name} has shape {t.shape}, expected {expected[name]} (x {x.shape}, H = {hidden})")
    for name, t in [("h2h_weight", h2h_weight), *named]:
        if t is not None and t.dtype != x.dtype:
            raise ValueError(f"{name} is {t.dtype} but x is {x.dtype}; cast them to one dtype")
    if not KERNELS.supports(x.dtype):
        raise TypeError(f"recurrent layers take float16, float32 or float64 data, got {x.dtype}")
    return length, batch, features, hidden


def _lengths(device: Any, valid_length: Any, length: int, batch: int) -> Any:
    """The lengths as an int32 (N,) array on ``device``: checked on a CPU device, clamped on a GPU."""
    xp = device.xp
    data = valid_length._data if isinstance(valid_length, Tensor) else valid_length
    if not device.is_gpu:
        host = np.asarray(data)
        if host.shape != (batch,) or host.dtype.kind not in "iuf":
            raise ValueError(f"valid_length must be ({batch},) real numbers, got {host.dtype} {host.shape}")
        if host.size and (not np.all(np.isfinite(host)) or np.any(host != np.trunc(host))
                          or host.min() < 0 or host.max() > length):
            raise ValueError(f"valid_length must hold integers in [0, {length}] (the sequence length), got "
                             f"{host.tolist()}")
        return host.astype(np.int32)
    arr = xp.asarray(data)
    if arr.shape != (batch,):
        raise ValueError(f"valid_length must have shape ({batch},), got {arr.shape}")
    return xp.clip(arr, 0, length).astype(np.int32)


@_op("recurrence")
def _recurrence(mode: str, x: Tensor, states: list[Tensor], weights: tuple[Tensor | None, ...], valid_length: Any,
                reverse: bool, clip: tuple[float | None, float | None] | None) -> tuple[Tensor, list[Tensor]]:
    length, batch, _, hidden = _check(mode, x, states, weights)
    if clip is not None and mode != "lstm":
        raise ValueError(f"clip bounds the LSTM cell state; {mode} has none, got clip={clip}")
    lengths = None if valid_length is None else _lengths(x.device, valid_length, length, batch)
    parents = (x, *states, *(w for w in weights if w is not None))
    record = is_recording() and any(p._requires_grad() for p in parents)
    layer = _Layer(mode, x._data, x.device, [s._data for s in states], weights, lengths, reverse, clip)
    outputs, finals = layer.forward(save=record)
    device = x.device
    if not record:
        return Tensor(outputs, device), [Tensor(f, device) for f in finals]

    def backward(grads: dict[str, Any]) -> list[Any]:
        return layer.backward(grads, x._requires_grad(), [s._requires_grad() for s in states])

    return _one_node("recurrence", device, x.dtype, parents, backward, outputs, finals)


def _one_node(name: str, device: Any, dtype: Any, parents: Sequence[Tensor], backward: Any, outputs: Any,
              finals: Sequence[Any]) -> tuple[Tensor, list[Tensor]]:
    """Record a recurrence as one autograd node: the outputs and final states (``[h]`` or ``[h, c]``) are views of
    it. ``backward(grads)`` gets the gradients that reached them, keyed 'out', 'h', 'c' (absent: none reached
    it), and returns the parents' gradients in order."""
    # The views are views of a 0-d token (`anchor`). Their nodes hand their gradients to `handed` and a zero to the
    # anchor, whose node the engine runs after all of them (it waits for every consumer), so the backward sees
    # whichever of the three received one.
    handed: dict[str, Any] = {}
    xp = device.xp

    def run(_: Any) -> list[Any]:
        grads = dict(handed)
        handed.clear()
        return backward(grads)

    with device.use():
        anchor = op_result(name, xp.zeros((), dtype=dtype), device, tuple(parents), run)

    def view(data: Any, key: str) -> Tensor:
        def hand_over(g: Any) -> tuple[Any]:
            handed[key] = g
            return (xp.zeros((), dtype=dtype),)

        return op_result(f"{name}_view", data, device, (anchor,), hand_over)

    keys = ("h", "c")[:len(finals)]
    return view(outputs, "out"), [view(f, k) for f, k in zip(finals, keys)]


class _Layer:
    """One layer in one direction of a recurrence: the forward's arrays, kept for its backward.

    States live in ``(T+1, N, H)`` buffers in time order: forward, step t reads slot t and writes t+1
    (outputs = slots 1..T); backward (``reverse`` without lengths), step t reads t+1 and writes t
    (outputs = slots 0..T-1). With lengths, the reverse direction runs forwards over the sequence
    reversed within each sample's length (one gather of x before, of the outputs after), which is
    running each sample from its last valid step back to step 0.

    The passes come in phases, so that :mod:`.rnn_stack` can interleave the layers of a stack on host
    threads: forward :meth:`begin`, :meth:`project` (the input projection of a range of time steps),
    :meth:`run` (a range of processing steps), :meth:`results`; backward :meth:`begin_backward`,
    :meth:`run_back`, :meth:`input_grad` (a range of time steps) or :meth:`input_grad_all`,
    :meth:`state_grads`, :meth:`weight_grad` and :meth:`bias_grads` (or :meth:`param_grads`, all three),
    then :meth:`release_backward`. :meth:`forward` and :meth:`backward` run them over the whole
    sequence, as :func:`recurrence` does.

    ``x`` is the input array ``(T, N, C)``; a stack hands a layer the output buffer of the layer below
    (:meth:`output_buffer`) before that layer has filled it. ``states`` are arrays, ``weights`` Tensors
    (their gradients may go straight into the parameters' buffers).
    """

    def __init__(self, mode: str, x: Any, device: Any, states: list[Any], weights: tuple[Tensor | None, ...],
                 lengths: Any, reverse: bool, clip: tuple[float | None, float | None] | None) -> None:
        self.mode, self.lengths, self.device = mode, lengths, device
        self.xp = xp = device.xp
        self.x, self.states, self.weights = x, states, weights
        self.length, self.batch, self.features = x.shape
        self.hidden = weights[1].shape[1]
        self.gate_rows = weights[1].shape[0]  # G*H: the gates' rows in the weights
        self.dtype = x.dtype
        self.cells = _Cells(device, x.dtype)
        self.backwards = reverse and lengths is None
        self.flip = None  # with lengths and reverse: (time index, sample index) reversing each sample in its length
        if reverse and lengths is not None:
            with self.device.use():
                t = xp.arange(self.length, dtype=np.int32)[:, None]
                within = lengths[None, :]
                self.flip = (xp.where(t < within, within - 1 - t, t), xp.arange(self.batch)[None, :])
        self.clip = (0, -np.inf, np.inf) if clip is None or clip == (None, None) else (
            1, -np.inf if clip[0] is None else float(clip[0]), np.inf if clip[1] is None else float(clip[1]))
        self.native = self.native_back = None  # the time loops as native calls (_NativeSteps), once set up
        self.step_weight = self.back_weight = None  # W_h^T and W_h for the per-step products, once set up

    def _slots(self, s: int) -> tuple[int, int, int]:
        """(time index, state slot read, state slot written) of processing step s."""
        if self.backwards:
            t = self.length - 1 - s
            return t, t + 1, t
        return s, s, s + 1

    def _time_order(self, data: Any) -> Any:
        """``data`` (T, N, ...) in the processing order's time, or back (the flip is its own inverse)."""
        return data if self.flip is None else data[self.flip]

    # -- forward --------------------------------------------------------------------------------------------
    def forward(self, save: bool) -> tuple[Any, list[Any]]:
        """Run the sequence; returns (outputs, final states) as arrays. ``save``: keep what backward needs."""
        self.begin(save)
        with self.device.use():
            self.project(0, self.length)  # the whole input projection: one GEMM
            with _step_gemms(self.xp):
                self.run(0, self.length)
        return self.results()

    def begin(self, save: bool) -> None:
        """Allocate the forward's buffers and set the begin states (``save``: keep what backward needs)."""
        xp, T, N, H, gh = self.xp, self.length, self.batch, self.hidden, self.gate_rows
        _, h2h_weight, i2h_bias, h2h_bias = (None if w is None else w._data for w in self.weights)
        with self.device.use():
            self.x2 = self._time_order(self.x).reshape(T * N, self.features)
            self.proj = _SPARES.empty(xp, (T, N, gh), self.dtype)
            zeros = xp.zeros(gh, dtype=self.dtype)  # for a missing bias (the kernels add both biases)
            self.biases = tuple(zeros if b is None else xp.ascontiguousarray(b) for b in (i2h_bias, h2h_bias))
            lstm = self.mode == "lstm"
            first = T if self.backwards else 0
            self.hs = xp.empty((T + 1, N, H), dtype=self.dtype)
            self.hs[first] = self.states[0]
            self.cs = _SPARES.empty(xp, (T + 1, N, H), self.dtype) if lstm else None
            if lstm:
                self.cs[first] = self.states[1]
            self.y = xp.empty((T, N, H), dtype=self.dtype) if self.lengths is not None else None
            width = _SAVED[self.mode] * H
            self.saved = _SPARES.empty(xp, (T, N, width), self.dtype) if save and width else None
            self.hg = xp.empty((N, gh), dtype=self.dtype)
            if _packs_w_h(self):  # W_h^T laid out once for the T products of the pass
                self.step_weight = _PackedWeight(np.ascontiguousarray(h2h_weight), transposed=True)
                self.native = _native_steps(self, "forward", (self.proj, *self.biases, self.step_weight.panels,
                                                              self.hg, self.hs, self.cs, self.y, self.saved))
            else:  # W_h^T row-major once per call: OpenBLAS's small-M GEMM runs 1.5x faster on it than on the view
                self.step_weight = xp.ascontiguousarray(h2h_weight.T)

    def output_buffer(self) -> Any:
        """The array :meth:`run` writes the outputs into, ``(T, N, H)`` in time order (not for a flipped layer)."""
        if self.y is not None:
            return self.y
        return self.hs[:self.length] if self.backwards else self.hs[1:]

    def project(self, t0: int, t1: int) -> None:
        """The input projection of time steps ``t0 .. t1-1`` (processing order): one GEMM."""
        N, gh = self.batch, self.gate_rows
        blas.matmul(self.x2[t0 * N:t1 * N], self.weights[0]._data.T, out=self.proj[t0:t1].reshape((t1 - t0) * N, gh))

    def run(self, s0: int, s1: int) -> None:
        """Processing steps ``s0 .. s1-1``: per step one GEMM and one cell kernel (their inputs projected); on CPU
        devices one native call for them all (:class:`_NativeSteps`) where it applies."""
        if self.native is not None:
            self.native(s0, s1)
            return
        N, H = self.batch, self.hidden
        y, lstm = self.y, self.mode == "lstm"
        product = self._step_product(self.step_weight)
        for s in range(s0, s1):
            t, prev, nxt = self._slots(s)
            product(self.hs[prev], self.hg)
            y_t = None if y is None else y[t]
            saved_t = None if self.saved is None else self.saved[t]
            common = (self.proj[t], self.hg, *self.biases, self.hs[prev])
            if lstm:
                self.cells("lstm_forward", (*common, self.cs[prev], self.hs[nxt], self.cs[nxt], y_t, saved_t,
                                            self.lengths), (s, N, H, self.clip[0]), self.clip[1:])
            elif self.mode == "gru":
                self.cells("gru_forward", (*common, self.hs[nxt], y_t, saved_t, self.lengths), (s, N, H))
            else:
                self.cells("rnn_forward", (*common, self.hs[nxt], y_t, self.lengths),
                           (s, N, H, int(self.mode == "rnn_relu")))

    @staticmethod
    def _step_product(weight: Any) -> Any:
        """``f(a, out)``: ``out[...] = a @ B`` for a step, B packed (:class:`_PackedWeight`) or an array."""
        if isinstance(weight, _PackedWeight):
            return weight
        return lambda a, out: blas.matmul(a, weight, out=out)

    def results(self) -> tuple[Any, list[Any]]:
        """(outputs in time order, final states) once every step ran; hands the projection back."""
        T = self.length
        with self.device.use():
            outputs = self._time_order(self.y) if self.y is not None else self.output_buffer()
            last = 0 if self.backwards else T
            finals = [self.hs[last]] + ([self.cs[last].copy()] if self.cs is not None else [])  # cs stays here
        _SPARES.give(self.proj)
        if isinstance(self.step_weight, _PackedWeight):
            self.step_weight.release()
        self.proj = self.native = self.step_weight = None  # the native loop held their addresses
        # the saved gates and cell states go back when the graph lets go of this layer
        weakref.finalize(self, _SPARES.give, self.saved, self.cs)
        return outputs, finals

    # -- backward -------------------------------------------------------------------------------------------
    def backward(self, grads: dict[str, Any], x_needs_grad: bool, states_need_grad: Sequence[bool]) -> list[Any]:
        """The gradients of (x, states, weights present) from those of the outputs (``grads['out']``) and final
        states ('h', 'c'); None where not needed."""
        self.begin_backward(grads.get("out"), grads.get("h"), grads.get("c"))
        with self.device.use():
            with _step_gemms(self.xp):
                self.run_back(0, self.length)
            dx = self.input_grad_all() if x_needs_grad else None
            states = [g if needed else None for g, needed in zip(self.state_grads(), states_need_grad)]
            params = self.param_grads()
        self.release_backward()
        return [dx, *states, *params]

    def begin_backward(self, d_out: Any, d_h: Any, d_c: Any) -> None:
        """Allocate the backward's buffers from the gradients of the outputs and the final states (each may be
        None). A C-contiguous ``d_out`` of the layer's dtype is used in place, not copied (a stack fills it
        range by range before :meth:`run_back` reaches it). Call on the thread that runs the backward pass."""
        xp, T, N, H, gh = self.xp, self.length, self.batch, self.hidden, self.gate_rows
        lstm, gru = self.mode == "lstm", self.mode == "gru"
        with self.device.use():
            if d_out is None:
                self.dy = xp.zeros((T, N, H), dtype=self.dtype)
            else:
                self.dy = xp.ascontiguousarray(self._time_order(d_out.astype(self.dtype, copy=False)))
            self.rec = xp.zeros((N, H), dtype=self.dtype)  # dh' through W_h; first the final state's gradient
            if d_h is not None:
                self.rec[...] = d_h
            self.carry = xp.zeros((N, H), dtype=self.dtype)
            self.dc = xp.zeros((N, H), dtype=self.dtype) if lstm else None
            if lstm and d_c is not None:
                self.dc[...] = d_c
            self.d_gates = _SPARES.empty(xp, (T, N, gh), self.dtype)
            self.dh_gates = _SPARES.empty(xp, (T, N, gh), self.dtype) if gru else self.d_gates
        # where the weights' gradients may be written directly (a per-thread lookup: resolved here)
        self.targets = [None if w is None else grad_out(w, self.dtype) for w in self.weights]
        w_h = self.weights[1]._data
        if _packs_w_h(self):  # W_h laid out once for the T products of the pass
            self.back_weight = _PackedWeight(np.ascontiguousarray(w_h), transposed=False)
            self.native_back = _native_steps(self, "backward", (self.saved, self.cs, self.hs, self.dy,
                                                                self.back_weight.panels, self.rec, self.carry,
                                                                self.dc, self.d_gates, self.dh_gates))
        else:
            self.back_weight = w_h

    def run_back(self, s0: int, s1: int) -> None:
        """Processing steps ``s1-1`` down to ``s0``: per step one cell kernel and one GEMM; on CPU devices one
        native call for them all (:class:`_NativeSteps`) where it applies."""
        if self.native_back is not None:
            self.native_back(s0, s1)
            return
        N, H = self.batch, self.hidden
        lstm, gru = self.mode == "lstm", self.mode == "gru"
        product, rec, carry, dc, dy = self._step_product(self.back_weight), self.rec, self.carry, self.dc, self.dy
        for s in range(s1 - 1, s0 - 1, -1):
            t, prev, nxt = self._slots(s)
            if lstm:
                self.cells("lstm_backward", (self.saved[t], self.cs[prev], dy[t], rec, carry, dc, self.d_gates[t],
                                             self.lengths), (s, N, H, self.clip[0]), self.clip[1:])
            elif gru:
                self.cells("gru_backward", (self.saved[t], self.hs[prev], dy[t], rec, carry, self.d_gates[t],
                                            self.dh_gates[t], self.lengths), (s, N, H))
            else:
                self.cells("rnn_backward", (self.hs[nxt], dy[t], rec, carry, self.d_gates[t], self.lengths),
                           (s, N, H, int(self.mode == "rnn_relu")))
            product(self.dh_gates[t], rec)

    def input_grad(self, t0: int, t1: int, out: Any) -> None:
        """``out`` (``(t1-t0, N, C)``, C-contiguous) = the input's gradient at time steps ``t0 .. t1-1`` (not for
        a flipped layer), once :meth:`run_back` has covered them."""
        rows, gh = (t1 - t0) * self.batch, self.gate_rows
        blas.matmul(self.d_gates[t0:t1].reshape(rows, gh), self.weights[0]._data,
                    out=out.reshape(rows, self.features))

    def input_grad_all(self) -> Any:
        """The input's gradient ``(T, N, C)`` in time order (any layer), once :meth:`run_back` has run every step."""
        T, N, gh = self.length, self.batch, self.gate_rows
        with self.device.use():
            d2 = self.d_gates.reshape(T * N, gh)
            return self._time_order(blas.matmul(d2, self.weights[0]._data).reshape(T, N, self.features))

    def state_grads(self) -> list[Any]:
        """The begin states' gradients, once :meth:`run_back` has run every step."""
        return [self.rec + self.carry] + ([self.dc] if self.dc is not None else [])

    def param_grads(self) -> list[Any]:
        """The gradients of i2h_weight, h2h_weight and the biases present (None where not needed), once
        :meth:`run_back` has run every step."""
        return [self.weight_grad(0), self.weight_grad(1), *self.bias_grads()]

    def weight_grad(self, k: int) -> Any:
        """The gradient of i2h_weight (``k`` = 0) or h2h_weight (1): one whole-sequence GEMM; None if not needed."""
        weight = self.weights[k]
        if not weight._requires_grad():
            return None
        T, N, H, gh = self.length, self.batch, self.hidden, self.gate_rows
        if k == 0:
            rows, cols = self.d_gates.reshape(T * N, gh), self.x2
        else:
            rows = self.dh_gates.reshape(T * N, gh)
            cols = (self.hs[1:] if self.backwards else self.hs[:T]).reshape(T * N, H)
        with self.device.use():
            return blas.matmul(rows.T, cols, out=self.targets[k])

    def bias_grads(self) -> list[Any]:
        """The gradients of the biases present, in order (None where not needed)."""
        T, N, gh = self.length, self.batch, self.gate_rows
        gru = self.mode == "gru"
        d2 = self.d_gates.reshape(T * N, gh)
        dh2 = self.dh_gates.reshape(T * N, gh)
        out: list[Any] = []
        summed: Any = None  # LSTM and RNN: both biases get the same gate gradients, summed once
        with self.device.use():
            for k, (bias, rows) in enumerate(((self.weights[2], d2), (self.weights[3], dh2)), start=2):
                if bias is None:
                    continue
                if not bias._requires_grad():
                    out.append(None)
                elif summed is not None and not gru:
                    target = self.targets[k]
                    if target is None:
                        out.append(summed.copy())
                    else:
                        target[...] = summed
                        out.append(target)
                else:
                    summed = rows.sum(axis=0, out=self.targets[k])
                    out.append(summed)
        return out

    def release_backward(self) -> None:
        """Hand the gate gradients back for reuse, once nothing reads them any more (nothing returned is a view)."""
        _SPARES.give(self.d_gates, *((self.dh_gates,) if self.dh_gates is not self.d_gates else ()))
        if isinstance(self.back_weight, _PackedWeight):
            self.back_weight.release()
        self.d_gates = self.dh_gates = self.native_back = self.back_weight = None  # the native loop held them
