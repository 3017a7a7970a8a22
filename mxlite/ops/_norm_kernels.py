"""Batch normalisation's arithmetic, and ``kernels/norm.cu``, which runs it in one launch per direction.

Purpose: :func:`mxlite.ops.nn_ops.batch_norm` composed of array operations is about 30 CuPy
calls forward and 27 backward per layer on a GPU, each a launch and, on the host, the cost of a call
into CuPy: in a small CNN the host's dispatch, not the GPU, sets the pace. On GPUs
(:func:`enabled`) one kernel launch per direction does the same arithmetic (:func:`forward_kernel`,
:func:`backward_kernel`). CPU devices run the same kernels through the serial host build (two reads of
the input and one write forward, where the composed form makes about seven passes, each writing a
temporary; the channels spread over :func:`mxlite.set_num_threads` threads), and compose the arithmetic
(:func:`forward`, :func:`backward` with :func:`per_channel`, NumPy's own sums) where it cannot be built
(``MXLITE_CPU_KERNELS=numpy``) or the parameters are not the kernels' dtype.

Twin: :func:`forward` and :func:`backward` with ``sums=blocked_sums(threads)`` do the kernels'
operations in the kernels' order, per-channel sums included, so they give the kernels' bits (on the
emulated GPUs, and on CPU devices through the serial host build with one thread per block;
tests/test_norm_kernels.py). The same two functions with :func:`per_channel` are the composed path,
so one text holds the arithmetic.

Layout: the input is viewed as (outer, channels, inner) (the channel axis in the middle), as C-contiguous.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..device import device_of
from ..device.host_buffers import host_empty
from ..device.kernels import KernelFile
from . import _cudnn_ops
from ._loss_kernels import lane_reduce

__all__ = ["KERNELS", "KERNEL_FILE", "backward", "backward_kernel", "blocked_sums", "enabled", "forward",
           "forward_kernel", "per_channel", "threads_for"]

KERNEL_FILE = "norm.cu"
# The kernels take <T, A>: the arithmetic A is float32 for float16 data, as in the composed path.
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float64", "float16"), ("batch_norm_forward", "batch_norm_backward"),
                     accumulator=True)
_MAX_THREADS = KERNELS.block_threads  # kernels/norm.cu: kMaxThreads
_MAX_BLOCKS = 65535  # blocks loop over channels past it

Sums = Callable[[Any], Any]  # (outer, channels, inner) -> (channels,)


def enabled(xp: Any, dtype: Any, params: tuple[Any, ...]) -> bool:
    """Whether the kernels run batch normalisation of ``dtype`` data with these (C,) parameter arrays:
    for float16/32/64 data whose parameters are C-contiguous arrays of the arithmetic's dtype (float32
    for float16 data), on a GPU, and on a CPU device through the serial host build where
    :func:`mxlite.device.kernels.cpu_kernels_enabled` allows it. Anything else composes array operations."""
    if not KERNELS.supports(dtype):
        return False
    if xp is np and not KERNELS.cpu_enabled():
        return False
    acc = np.promote_types(dtype, np.float32)
    return all(p.dtype == acc and p.flags.c_contiguous for p in params)


def threads_for(count: int) -> int:
    """Threads per block on a GPU for channels of ``count`` values: a power of two, 32 to 256."""
    return min(_MAX_THREADS, max(32, 1 << max(0, count - 1).bit_length()))


# -- the arithmetic (the composed path, and with blocked_sums the kernels' twin) -----------------------
def per_channel(a: Any) -> Any:
    """(outer, C, inner) -> (C,) sums as NumPy/CuPy add them: over the contiguous last axis, then the first."""
    return a.sum(axis=2).sum(axis=0)


def blocked_sums(threads: int) -> Sums:
    """(outer, C, inner) -> (C,) sums in the kernels' order (kernels/norm.cu: channel_sum) for ``threads``
    threads per block: a channel's values counted row-major, value i to thread i % threads, lane
    (i // threads) % 8, each lane adding in order from 0; then lanes, then threads, added pairwise."""
    if threads < 1 or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two, got {threads}")

    def sums(a: Any) -> Any:
        outer, c, inner = a.shape
        flat = np.ascontiguousarray(a.transpose(1, 0, 2)).reshape(c, outer * inner)
        return lane_reduce(flat, np.add, 0.0, threads)

    return sums


def forward(xp: Any, data: Any, gamma: Any, beta: Any, running_mean: Any, running_var: Any, eps: float,
            momentum: float, batch_stats: bool, fix_gamma: bool, sums: Sums) -> tuple[Any, Any, Any, Any]:
    """Batch normalisation of ``data`` (outer, C, inner), already in the arithmetic's dtype ``A``.

    With ``batch_stats`` the mean and biased variance of each channel's values, and the running
    arrays (``A``) updated in place: ``momentum * running + (1 - momentum) * batch``; else the running
    statistics. ``gamma`` is not read with ``fix_gamma``. Returns ``(out, diff, inv_std, k)``: out
    (outer, C, inner) in ``A``, and what :func:`backward` needs: ``diff = data - mean``, and per
    channel ``inv_std = 1 / sqrt(var + eps)`` and ``k = gamma * inv_std``.
    """
    c = data.shape[1]
    count = data.shape[0] * data.shape[2]

    def col(v: Any) -> Any:  # (C,) -> (1, C, 1) for broadcasting
        return v.reshape(1, c, 1)

    if batch_stats:
        mean = sums(data) / count
        diff = data - col(mean)
        var = sums(xp.square(diff)) / count
        for running, new in ((running_mean, mean), (running_var, var)):
            running[...] = (momentum * running + (1.0 - momentum) * new).astype(running.dtype)
    else:
        mean, var = running_mean.astype(data.dtype), running_var.astype(data.dtype)
        diff = data - col(mean)
    inv_std = 1.0 / xp.sqrt(var + eps)
    scale = xp.ones((c,), dtype=data.dtype) if fix_gamma else gamma.astype(data.dtype)
    k = scale * inv_std
    out = diff * col(k)
    out += col(beta.astype(data.dtype))
    return out, diff, inv_std, k


def backward(xp: Any, g: Any, diff: Any, inv_std: Any, k: Any, batch_stats: bool, fix_gamma: bool,
             sums: Sums) -> tuple[Any, Any, Any]:
    """The gradients of :func:`forward` for ``g`` (outer, C, inner) in ``A``: ``(gx, ggamma, gbeta)`` in ``A``."""
    c = g.shape[1]
    count = g.shape[0] * g.shape[2]

    def col(v: Any) -> Any:
        return v.reshape(1, c, 1)

    sum_g = sums(g)
    sum_gd = sums(g * diff)  # sum of g * (x - mean)
    gx = g * col(k)
    if batch_stats:  # d/dx of gamma*(x - mean)*inv_std + beta with batch mean and variance
        gx += diff * col(-k * inv_std * inv_std * sum_gd / count)
        gx += col(-k * sum_g / count)
    ggamma = xp.zeros((c,), dtype=g.dtype) if fix_gamma else sum_gd * inv_std
    return gx, ggamma, sum_g


# -- the kernels ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _scalars(acc: str, count: int, eps: float, momentum: float) -> tuple[np.generic, ...]:
    """count, eps, momentum and 1 - momentum as the kernels' ``A`` (rounded from float64 as the twin's are)."""
    t = np.dtype(acc).type
    return t(count), t(eps), t(momentum), t(1.0 - momentum)


def _launch(name: str, args: tuple[Any, ...], channels: int, count: int, threads: int | None) -> None:
    data = args[0]
    device = device_of(data)
    function = KERNELS.function(f"{name}<{KERNELS.template_arguments(data.dtype)}>", device)
    if threads is None:
        threads = threads_for(count) if device.is_gpu else 1
    with device.use():
        function((max(1, min(channels, _MAX_BLOCKS)),), (threads,), args)


def forward_kernel(xp: Any, x: Any, shape3: tuple[int, int, int], gamma: Any, beta: Any, running_mean: Any,
                   running_var: Any, eps: float, momentum: float, batch_stats: bool, fix_gamma: bool,
                   threads: int | None = None) -> tuple[Any, Any]:
    """Kernel ``batch_norm_forward``: :func:`forward` of ``x`` (any shape holding ``shape3``, C-contiguous).

    Returns ``(out, saved)``: out in ``x``'s shape and dtype; saved (3, C) in ``A``, the mean,
    inv_std and k :func:`backward_kernel` needs. ``threads``: block size (tests; default 1 on a CPU device,
    :func:`threads_for` on a GPU). The running arrays are updated in place when ``batch_stats``.
    """
    if threads is None:  # GPUs: cuDNN first, where the device has it (mxlite/device/cudnn.py)
        routed = _cudnn_ops.batch_norm_forward(xp, x, shape3, gamma, beta, running_mean, running_var, eps, momentum,
                                               batch_stats, fix_gamma)
        if routed is not None:
            return routed
    outer, c, inner = shape3
    acc = np.promote_types(x.dtype, np.float32)
    with device_of(x).use():
        out = host_empty(x.shape, x.dtype) if xp is np else xp.empty(x.shape, dtype=x.dtype)
        saved = xp.empty((3, c), dtype=acc)
    count, eps_a, mom, keep = _scalars(acc.name, outer * inner, float(eps), float(momentum))
    args = (x, beta if fix_gamma else gamma, beta, running_mean, running_var, out, saved, outer, c, inner, count,
            eps_a, mom, keep, np.int32(bool(batch_stats)), np.int32(bool(fix_gamma)))
    _launch("batch_norm_forward", args, c, outer * inner, threads)
    return out, saved


def backward_kernel(xp: Any, g: Any, x: Any, shape3: tuple[int, int, int], saved: Any, batch_stats: bool,
                    fix_gamma: bool, ggamma: Any = None, gbeta: Any = None,
                    threads: int | None = None) -> tuple[Any, Any, Any]:
    """Kernel ``batch_norm_backward``: :func:`backward` for ``g`` (``x``'s shape and dtype, C-contiguous).

    ``ggamma``, ``gbeta``: (C,) arrays in ``A`` to write those gradients into (new ones when None).
    Returns ``(gx, ggamma, gbeta)``.
    """
    if threads is None:  # GPUs: cuDNN first, where the device has it (mxlite/device/cudnn.py)
        routed = _cudnn_ops.batch_norm_backward(xp, g, x, shape3, saved, batch_stats, fix_gamma, ggamma, gbeta)
        if routed is not None:
            return routed
    outer, c, inner = shape3
    acc = np.promote_types(x.dtype, np.float32)
    with device_of(x).use():
        gx = host_empty(x.shape, x.dtype) if xp is np else xp.empty(x.shape, dtype=x.dtype)
        ggamma = xp.empty((c,), dtype=acc) if ggamma is None else ggamma
        gbeta = xp.empty((c,), dtype=acc) if gbeta is None else gbeta
    count = _scalars(acc.name, outer * inner, 0.0, 0.0)[0]
    args = (g, x, saved, gx, ggamma, gbeta, outer, c, inner, count,
            np.int32(bool(batch_stats)), np.int32(bool(fix_gamma)))
    _launch("batch_norm_backward", args, c, outer * inner, threads)
    return gx, ggamma, gbeta
