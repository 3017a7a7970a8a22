"""Softmax cross-entropy in one pass per row and direction: ``kernels/softmax_ce.cu`` and its NumPy twin.

Purpose: the composed loss (``-pick(log_softmax(x), label)``) makes about ten passes over the
``(rows, classes)`` logits forward and as many backward (max, subtract, exp, sum, log, subtract, pick;
a one-hot ``where``, exp, multiply, subtract), each a NumPy call writing a full temporary. The kernels
read the logits twice forward (max, then the sum of exponentials; the pick reads one entry) and once
backward, and write the gradient once. On GPUs they run through CuPy; on CPU devices through the
serial host build when :func:`mxlite.device.kernels.cpu_kernels_enabled` allows, else the twin.

Twin: :func:`forward_twin` and :func:`backward_twin` perform the kernels' operations in the kernels'
order (per-row sums and maxima in :func:`lane_reduce`'s order, exp and log from IEEE arithmetic), so
the host build, the emulated GPUs and the twin agree bit for bit (tests/test_softmax_ce.py).

Layout: ``x`` is ``(rows, classes)``, C-contiguous, float32 or float64; sparse labels are int64 class
ids already clipped into ``[0, classes)``; dense labels are ``x``'s shape and dtype. ``saved`` is
``(rows, 3)``: the row's maximum ``m``, ``lse = log(sum(exp(x - m)))`` and the sum of its dense label
(0 for sparse labels).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..device import device_of
from ..device.host_buffers import host_empty
from ..device.kernels import KernelFile
from .rnn_ops import _EXP, _exp_parts

__all__ = ["KERNELS", "KERNEL_FILE", "LANES", "backward", "backward_twin", "forward", "forward_twin", "lane_reduce",
           "log_ge1", "supported"]

KERNEL_FILE = "softmax_ce.cu"
LANES = 8  # kernels/softmax_ce.cu: kLanes
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float64"), ("softmax_ce_forward", "softmax_ce_backward"))
_MAX_THREADS = KERNELS.block_threads  # kernels/softmax_ce.cu: kMaxThreads
_MAX_BLOCKS = 65535  # blocks loop over rows past it
_NULL = np.uint64(0)  # an 8-byte zero is a null pointer argument
# (atanh(u)/u - 1)/u^2 to u^6/9 (float) or u^18/21 (double): 1/(2n+1) rounded to double, then to the dtype
_LOG_POLY = {np.dtype(np.float32): tuple(np.float32(1 / n) for n in range(3, 10, 2)),
             np.dtype(np.float64): tuple(np.float64(1 / n) for n in range(3, 22, 2))}
_SQRT2 = {np.dtype(np.float32): np.float32(1.4142135623730951), np.dtype(np.float64): np.float64(1.4142135623730951)}


def supported(dtype: Any) -> bool:
    """Whether the kernels take logits of ``dtype`` (float32, float64)."""
    return KERNELS.supports(dtype)


def threads_for(classes: int) -> int:
    """Threads per block on a GPU for rows of ``classes`` entries: a power of two, 32 to 256."""
    return min(_MAX_THREADS, max(32, 1 << max(0, -(-classes // LANES) - 1).bit_length()))


# -- the twin --------------------------------------------------------------------------------------------
def log_ge1(s: np.ndarray) -> np.ndarray:
    """log(s) for s >= 1 as kernels/ieee_math.cuh's ``log_ge1`` computes it (+inf and NaN unchanged)."""
    c = _EXP[s.dtype]
    t = s.dtype.type
    b = s.view(c.bits)
    mask = (c.bits(1) << c.mantissa) - c.bits(1)
    f = ((b & mask) | (c.bias << c.mantissa)).view(s.dtype)      # significand in [1, 2)
    big = f > _SQRT2[s.dtype]
    f = np.where(big, f * t(0.5), f)
    kf = ((b >> c.mantissa).astype(np.int64) - int(c.bias) + big).astype(s.dtype)
    u = (f - t(1)) / (f + t(1))
    u2 = u * u
    poly = np.full_like(u, _LOG_POLY[s.dtype][-1])
    for coefficient in _LOG_POLY[s.dtype][-2::-1]:                # Horner, innermost coefficient last
        poly *= u2
        poly += coefficient
    log_f = (u + u * (u2 * poly)) * t(2)
    r = kf * c.ln2_hi + (log_f + kf * c.ln2_lo)
    with np.errstate(invalid="ignore"):  # inf - inf
        return np.where(s - s == t(0), r, s)


def _exp_le0(y: np.ndarray) -> np.ndarray:
    s, q = _exp_parts(y)
    return s + s * q


def lane_reduce(values: np.ndarray, op: Callable[[Any, Any], Any], init: float, threads: int = 1) -> np.ndarray:
    """(rows, n) -> (rows,) combined with ``op`` in kernels/softmax_ce.cu's ``row_reduce`` order for
    ``threads`` threads per block: entry j goes to thread j % threads, lane (j // threads) % 8; each lane
    combines its entries in order from ``init``; then lanes, then threads, pairwise halving."""
    rows, n = values.shape
    width = LANES * threads
    groups = -(-n // width)
    padded = np.full((rows, groups * width), init, dtype=values.dtype)  # init changes no lane it meets
    padded[:, :n] = values
    parts = padded.reshape(rows, groups, LANES, threads)
    acc = np.full((rows, LANES, threads), init, dtype=values.dtype)
    for g in range(groups):
        acc = op(acc, parts[:, g])
    s = LANES // 2
    while s:
        acc[:, :s] = op(acc[:, :s], acc[:, s:2 * s])
        s //= 2
    acc = acc[:, 0]
    s = threads // 2
    while s:
        acc[:, :s] = op(acc[:, :s], acc[:, s:2 * s])
        s //= 2
    return acc[:, 0].copy()


def _max_keep_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((b > a) | (b != b), b, a)


def forward_twin(x: np.ndarray, label: np.ndarray | None, dense: np.ndarray | None,
                 threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``softmax_ce_forward``: ``(loss (rows,), saved (rows, 3))`` of ``x`` (rows, classes)."""
    t = x.dtype.type
    rows = x.shape[0]
    with np.errstate(all="ignore"):  # NaN and inf flow through as in the kernels, silently
        m = lane_reduce(x, _max_keep_nan, -np.inf, threads)
        shifted = x - m[:, None]
        lse = log_ge1(lane_reduce(_exp_le0(shifted), np.add, 0.0, threads))
        saved = np.zeros((rows, 3), dtype=x.dtype)
        saved[:, 0], saved[:, 1] = m, lse
        if label is not None:
            loss = -((x[np.arange(rows), label] - m) - lse)
        else:
            loss = -lane_reduce(dense * (shifted - lse[:, None]), np.add, 0.0, threads)
            saved[:, 2] = lane_reduce(dense, np.add, 0.0, threads)
    return loss.astype(t, copy=False), saved


def backward_twin(g: np.ndarray, x: np.ndarray, label: np.ndarray | None, dense: np.ndarray | None,
                  saved: np.ndarray) -> np.ndarray:
    """``softmax_ce_backward``: the gradient (rows, classes) of ``sum(g * loss)`` with respect to ``x``."""
    t = x.dtype.type
    m, lse, lsum = (saved[:, i:i + 1] for i in range(3))
    with np.errstate(all="ignore"):
        p = _exp_le0((x - m) - lse)
        if label is not None:
            hit = np.arange(x.shape[1]) == label[:, None]
            return g[:, None] * (p - np.where(hit, t(1), t(0)))
        return g[:, None] * (p * lsum - dense)


# -- the kernels (or, on a CPU device without the host build, the twin) ----------------------------------
def _compiled(device: Any) -> bool:
    return KERNELS.compiled_on(device)


def _launch(name: str, x: Any, args: tuple[Any, ...], threads: int | None) -> None:
    device = device_of(x)
    rows, classes = x.shape
    if rows == 0:
        return  # a grid of 0 blocks is a CUDA error
    function = KERNELS.function(f"{name}<{KERNELS.type_name(x.dtype)}>", device)
    if threads is None:
        threads = threads_for(classes) if device.is_gpu else 1
    with device.use():
        function((min(rows, _MAX_BLOCKS),), (threads,), (*args, np.int64(rows), np.int64(classes)))


def forward(xp: Any, x: Any, label: Any | None, dense: Any | None, threads: int | None = None) -> tuple[Any, Any]:
    """Kernel ``softmax_ce_forward`` (the twin on a CPU device without the host build):
    ``(loss (rows,), saved (rows, 3))`` for logits ``x`` (rows, classes) and either ``label`` (int64 ids
    in range) or ``dense`` (x's shape and dtype). ``threads``: block size (tests; default 1 on a CPU
    device, :func:`threads_for` on a GPU)."""
    device = device_of(x)
    if not _compiled(device):
        return forward_twin(x, label, dense)
    with device.use():
        loss = xp.empty((x.shape[0],), dtype=x.dtype)
        saved = xp.empty((x.shape[0], 3), dtype=x.dtype)
    args = (x, _NULL if label is None else label, _NULL if dense is None else dense, loss, saved)
    _launch("softmax_ce_forward", x, args, threads)
    return loss, saved


def backward(xp: Any, g: Any, x: Any, label: Any | None, dense: Any | None, saved: Any,
             threads: int | None = None) -> Any:
    """Kernel ``softmax_ce_backward`` (or the twin): the gradient of ``sum(g * loss)`` w.r.t. ``x``;
    ``g`` is (rows,) in x's dtype, C-contiguous."""
    device = device_of(x)
    if not _compiled(device):
        return backward_twin(g, x, label, dense, saved)
    with device.use():
        gx = host_empty(x.shape, x.dtype) if xp is np else xp.empty(x.shape, dtype=x.dtype)
    args = (g, x, _NULL if label is None else label, _NULL if dense is None else dense, saved, gx)
    _launch("softmax_ce_backward", x, args, threads)
    return gx
