"""Convolution and pooling, each with its backward beside its forward (MXNet's ``Convolution``,
``Deconvolution`` and ``Pooling``).

Like every op of the tensor floor, these take and return :class:`Tensor` objects, compute through the
device's ``xp`` and record one closure returning their inputs' gradients. The data movement (im2col,
col2im, the max-pool backward) runs as ``kernels/conv.cu`` where :mod:`._conv_kernels` allows it, and as
the NumPy code below otherwise, which is those kernels' twin. On CPU devices the batch is cut into
cache-sized blocks (``_PER_SAMPLE_MIN``, ``_WGRAD_BLOCK``, ``_DCOLS_BLOCK``); on GPUs it goes through one
GEMM per direction, whole, unless its columns exceed ``_GPU_COLS_BYTES``.
"""

from __future__ import annotations

import copy
import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor, grad_out, op_result
from ..device import blas
from ..device.host_buffers import host_empty
from ..device.parallel import parallel_for
from ..device.threads import usable_threads
from . import _conv_kernels as _ck
from . import _conv_native, _cudnn_ops
from . import activations as _activations
from .core import _check_float, _named_error, _op, mean
from .core import max as _max

__all__ = ["avg_pool", "avg_pool2d", "conv", "conv2d", "conv_relu", "conv_transpose", "global_avg_pool",
           "global_avg_pool2d", "global_max_pool", "global_max_pool2d", "max_pool", "max_pool2d"]

IntPair = int | Sequence[int]
IntTuple = int | Sequence[int]  # an int, or one per spatial axis


def _as_strided(xp: Any) -> Any:
    """NumPy's or CuPy's ``lib.stride_tricks.as_strided`` (strides in bytes in both)."""
    if xp is np:
        return np.lib.stride_tricks.as_strided
    return importlib.import_module("cupy.lib.stride_tricks").as_strided


# -- convolution ---------------------------------------------------------------------------------
# Layout: (N, C, *spatial) with 1, 2 or 3 (any number of) spatial axes; weights (C_out, C_in/groups, *kernel).
#
# Algorithm, chosen per shape (see _ConvGeom):
# * 1x1 kernels with stride 1 and no padding are a plain product over channels: the input itself,
#   viewed as (N, groups, C/groups, L), is the column matrix (no im2col copy at all).
# * Otherwise im2col: the padded input is viewed (as_strided, no copy) as (N, C, *K, *O) patches and
#   laid out once, then multiplied by the (groups, C_out/groups, C/groups*prod(K)) weight matrix.
#   - "per-sample" layout (N, groups, K, L) when each sample has many output positions (L >=
#     _PER_SAMPLE_MIN): the patch view is copied in its own order, the batched GEMM (one BLAS call
#     per sample and group, each large) writes (N, C_out, *O) directly, and backward needs no
#     transposed copies of the output gradient either.
#   - "merged" layout (groups, K, N*L) when L is small (late layers, 1-D signals with few
#     positions): per-sample GEMMs would be too thin to run BLAS well, so one GEMM per group over the
#     whole batch pays for a transposed copy of the output instead.
#   Measured on the 32->64 3x3 layer of benchmarks/bench_train.py's CNN (batch 128, 16x16, one
#   OpenBLAS thread): per-sample forward 15 ms vs merged 20 (with its output transpose), input
#   gradient GEMM 17 vs 20, weight gradient 22 vs 18; per-sample wins overall for L >= 64.
# * col2im (the input gradient, and the forward pass of the transposed convolution) writes the
#   column gradient back through the same strided window view: in one assignment when windows
#   do not overlap (stride >= dilated kernel extent), else with one strided add per kernel tap,
#   each over the whole batch. Overlapping windows alias in a single view, so they cannot be
#   written in one ufunc call, and np.add.at (the only one-call form) is an order of magnitude
#   slower than prod(kernel) vectorised adds. In the per-sample layout the column gradient (prod(K)
#   times the input's size) is made and scattered a few samples at a time, so col2im reads it from
#   cache (17% off the backward of the CNN layer above).
# * The data movement (im2col, col2im, and max pooling's window copy and backward scatter) runs the
#   kernels of kernels/conv.cu where they apply (mxlite/ops/_conv_kernels.py: up to 3 spatial
#   axes, float16/32/64): on GPUs always, on CPU devices as the serial host build unless
#   MXLITE_CPU_KERNELS=numpy or it cannot be built. The NumPy code here is their twin and gives the
#   same bits (tests/test_conv_kernels.py). On one CPU thread, the kernels walk one (sample, channel)
#   plane at a time, tap by tap, so the plane stays in cache: col2im of the CNN layer above runs
#   about 4x faster than the strided adds, max pooling's backward 2x, im2col 1.5x. The kernels apply the
#   zero padding themselves (the twin pads a copy and crops), and on CPU devices max pooling reads its
#   windows straight from the image (max_pool_forward, max_pool_scatter; no copy of the windows).
# * CPU devices: the large per-step arrays (columns, GEMM outputs, pooling taps and gradients) come from
#   host_empty (device/host_buffers.py), reused once nothing holds them, so that no step pays the page
#   faults of fresh memory;
#   Conv2D(activation='relu') adds the bias and applies the ReLU in one pass (conv_relu).
#
# On GPUs none of that blocking applies: a cache-sized block is a launch and, on the host, a dozen
# Python calls into CuPy, and the host's dispatch, not the GEMMs, bounds a small network's step. There
# the whole batch goes through one GEMM per direction in the merged layout (forward, weight gradient
# and column gradient each one cuBLAS call, K = Kg or N*L), one im2col and one col2im launch
# (_ConvGeom.gpu_forward, gpu_backward): the number of calls per layer does not depend on the batch.
# Only a layer whose columns would exceed _GPU_COLS_BYTES is cut, into as few equal pieces of the
# batch as fit; then the forward keeps no columns and the backward makes them again per piece.
_PER_SAMPLE_MIN = 64  # output positions per sample from which per-sample GEMMs beat one merged GEMM
_WGRAD_BLOCK = 1 << 22  # elements of the per-sample weight-gradient products summed at a time
# Column-gradient elements made and scattered at a time: 4 MiB of float32, read back from cache. The input
# gradient of the CNN's 32->64 layer (batch 128, one thread): 15.1 ms at 1 << 20, 16.6 at 1 << 18 (43
# GEMM + col2im launches a step instead of 11), 20.3 at 1 << 17, no better above.
_DCOLS_BLOCK = 1 << 20
# Largest column matrix (and column gradient) a GPU makes at once, in bytes. A piece's three GEMMs do
# 6 * C_out * E FLOPs for E column elements: at C_out = 64 and 256 MiB of float32 columns, 26 GFLOP,
# about 0.55 ms at the 47 TFLOP/s an H100/H200 reaches in float32, while the host issues a further
# piece's ~22 CuPy calls in about 0.45 ms (about 20 us a call on the H200's host, benchmarks/roofline.py):
# from C_out = 64 up the GPU, not the host, sets the pace; much smaller pieces would leave the GPU
# waiting. In memory, the columns a forward keeps for its backward plus the column gradient are at most
# 512 MiB per layer in flight, under 1% of an 80 GB GPU. ResNet-50's 3x3 layers at 56x56 and batch 256
# (1.7 GiB of columns) are cut into 7 pieces; the CNNs of benchmarks/bench_train.py (32x32 images,
# 75 MB of columns at batch 256) stay whole up to a batch of 910.
_GPU_COLS_BYTES = 256 << 20


# CPU devices: the per-sample GEMMs of a convolution (forward, weight gradient, input gradient with its
# col2im) run a piece of the batch per host thread, each GEMM on one BLAS thread: as one native call per
# direction where _conv_native.applies (one group, float32/64: no interpreter between the pieces, the same
# bits), else as pieces from Python (mxlite/device/parallel.py). Why pieces: OpenBLAS splits one sample's
# GEMM over two threads poorly (the CNN's 32->64 layer of benchmarks/bench_train.py: 13.1 -> 9.2 ms for its
# forward GEMMs at batch 128), and the thin GEMMs of a first layer (27 rows of columns) not at all. A batch is
# cut into at most _CPU_PIECES pieces from Python (the native calls take a sample at a time).
_CPU_PIECES = 8


def _pieces(n: int, most: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into pieces of equal size, at most ``most`` (one at least) and at least ``n / _CPU_PIECES``
    samples each, as (start, stop) pairs. Depends on neither the machine nor its thread count."""
    size = max(1, min(most, -(-n // _CPU_PIECES)))
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def _ntuple(name: str, value: IntTuple, nd: int, minimum: int) -> tuple[int, ...]:
    """``value`` as a tuple of ``nd`` ints, each at least ``minimum`` (an int is repeated)."""
    if isinstance(value, (int, np.integer)):
        tup = (int(value),) * nd
    else:
        tup = tuple(int(v) for v in value)
    if len(tup) != nd or any(v < minimum for v in tup):
        what = "a pair of ints" if nd == 2 else f"a tuple of {nd} ints"
        raise ValueError(f"{name} must be an int or {what} >= {minimum}, got {value!r}")
    return tup


def _pair(name: str, value: IntTuple, minimum: int) -> tuple[int, int]:
    """``value`` as an ``(h, w)`` pair of ints, each at least ``minimum``."""
    return _ntuple(name, value, 2, minimum)  # type: ignore[return-value]


def _windows(xp: Any, a: Any, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
             out_sp: tuple[int, ...], taps_first: bool = False) -> Any:
    """Strided view of ``a`` (N, C, *P): element ``[n, c, *k, *o]`` is ``a[n, c, *(o*stride + k*dilation)]``.

    With ``taps_first`` the axes are ordered ``(*k, n, c, *o)``. No copy; writable (never write through it
    where windows overlap).
    """
    s_n, s_c, *s_sp = a.strides
    k_strides = tuple(s * d for s, d in zip(s_sp, dilation))
    o_strides = tuple(s * t for s, t in zip(s_sp, stride))
    n, c = a.shape[:2]
    if taps_first:
        shape, strides = (*kernel, n, c, *out_sp), (*k_strides, s_n, s_c, *o_strides)
    else:
        shape, strides = (n, c, *kernel, *out_sp), (s_n, s_c, *k_strides, *o_strides)
    return _as_strided(xp)(a, shape=shape, strides=strides)


def _overlapping(kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                 out_sp: tuple[int, ...]) -> bool:
    """Whether two (window, tap) pairs may reach the same input element (conservative: True when unsure)."""
    return any(k > 1 and o > 1 and s < d * (k - 1) + 1 for k, s, d, o in zip(kernel, stride, dilation, out_sp))


def _scatter_taps(xp: Any, d: Any, shape: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                  dilation: tuple[int, ...], out_sp: tuple[int, ...], out: Any = None) -> Any:
    """col2im: a zero array of ``shape`` (N, C, *P) with the taps-first values ``d`` (*K, N, C, *O) summed in.

    ``out``: a zeroed array of ``shape`` to sum into instead of a new one. The twin of kernel
    ``col2im`` (kernels/conv.cu), which adds the same values in the same (tap) order.
    """
    out = xp.zeros(shape, dtype=d.dtype) if out is None else out
    if not _overlapping(kernel, stride, dilation, out_sp):
        _windows(xp, out, kernel, stride, dilation, out_sp, taps_first=True)[...] = d
        return out
    for tap in np.ndindex(*kernel):  # overlapping windows: one strided add per tap (see above)
        out[_tap_slices(tap, stride, dilation, out_sp)] += d[tap]
    return out


def _tap_slices(tap: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                out_sp: tuple[int, ...]) -> tuple[slice, ...]:
    """Index of the padded input seen by kernel tap ``tap`` at every output position."""
    return (slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s) for k, s, d, o in zip(tap, stride, dilation, out_sp))


class _ConvGeom:
    """Shapes of one convolution ``(N, C, *S) * (C_out, C/groups, *K) -> (N, C_out, *O)``."""

    def __init__(self, n: int, c: int, spatial: tuple[int, ...], c_out: int, kernel: tuple[int, ...],
                 stride: tuple[int, ...], pad: tuple[int, ...], dilation: tuple[int, ...], groups: int,
                 out_sp: tuple[int, ...], padded: tuple[int, ...] | None = None, whole_batch: bool = False) -> None:
        self.n, self.c, self.spatial, self.c_out, self.kernel = n, c, spatial, c_out, kernel
        self.stride, self.pad, self.dilation, self.groups, self.out_sp = stride, pad, dilation, groups, out_sp
        self.nd = len(spatial)
        self.kg = c // groups * math.prod(kernel)  # rows of a group's column matrix
        # the padded extent the windows read within (a transposed convolution's may exceed S + 2*pad)
        self.padded = padded or tuple(s + 2 * p for s, p in zip(spatial, pad))
        self.pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(pad)
        # whole_batch (GPUs): the gpu_* methods, merged layout, no cache blocking (see _GPU_COLS_BYTES)
        self.whole_batch = whole_batch
        self.merged = not self.pointwise and (whole_batch or math.prod(out_sp) < _PER_SAMPLE_MIN)
        self.l = math.prod(out_sp)

    def pad_input(self, xp: Any, data: Any) -> Any:
        """``data`` (N, C, *S) zero-padded to (N, C, *padded) (the input itself without padding)."""
        widths = [(0, 0), (0, 0)] + [(p, tot - s - p) for p, tot, s in zip(self.pad, self.padded, self.spatial)]
        if not any(a or b for a, b in widths):
            return data
        return xp.pad(data, widths)

    def kernel_geometry(self, n: int) -> tuple[int, ...]:
        """The geometry arguments of kernels/conv.cu for ``n`` samples of this convolution's input, the
        padding applied by the kernels."""
        return _ck.geometry(n, self.c, self.spatial, self.kernel, self.stride, self.dilation, self.out_sp, self.pad)

    def im2col(self, xp: Any, x: Any) -> Any:
        """Column matrices of the input ``x`` (N, C, *S): (N, groups, Kg, L) per-sample, (groups, Kg, N*L)
        merged, or the input viewed.

        Kernel ``im2col`` of kernels/conv.cu where :func:`_conv_kernels.enabled`, which reads the padding
        as zeros; else (the twin) a copy of the strided window view of the zero-padded input.
        """
        g, n = self.groups, self.n
        if self.pointwise:
            return x.reshape(n, g, self.kg, self.l)
        if _ck.enabled(xp, x.dtype, self.nd):
            shape = (g, self.kg, n * self.l) if self.merged else (n, g, self.kg, self.l)
            out = host_empty(shape, x.dtype) if xp is np else None  # see device/host_buffers.py
            return _ck.im2col(xp, x, self.kernel_geometry(n), "merged" if self.merged else "per_sample",
                              shape=shape, out=out)
        xpad = self.pad_input(xp, x)
        view = _windows(xp, xpad, self.kernel, self.stride, self.dilation, self.out_sp, taps_first=self.merged)
        if self.merged:  # (*K, N, C, *O) -> (C, *K, N, *O): the one copy of the forward pass
            order = (self.nd + 1, *range(self.nd), self.nd, *range(self.nd + 2, 2 * self.nd + 2))
            return xp.ascontiguousarray(view.transpose(order)).reshape(g, self.kg, n * self.l)
        return xp.ascontiguousarray(view).reshape(n, g, self.kg, self.l)

    def forward(self, xp: Any, w_mat: Any, cols: Any, relu_bias: Any = None) -> Any:
        """``w_mat`` (groups, C_out/groups, Kg) times the columns: (N, C_out, *O), C-contiguous; with
        ``relu_bias`` (C_out,), of the output's dtype, ``relu(product + bias)`` (:func:`_conv_kernels.bias_relu`,
        fused into the native call where :func:`_conv_native.applies`)."""
        if xp is np and _conv_native.applies(self, w_mat, cols, relu_bias):
            out = host_empty((self.n, 1, self.c_out, self.l), cols.dtype)  # a sample at a time, one native call
            _conv_native.forward(self, w_mat, cols, out, relu_bias)
            return out.reshape((self.n, self.c_out) + self.out_sp)
        if relu_bias is not None:
            return _ck.bias_relu(xp, self.forward(xp, w_mat, cols), relu_bias)
        if xp is np and not self.merged and w_mat.dtype == cols.dtype:  # into a reused buffer (device/host_buffers.py)
            out = host_empty((self.n, self.groups, self.c_out // self.groups, self.l), cols.dtype)
            # one call on one thread (NumPy loops over the samples itself: 0.8 ms less for a first layer's
            # 128 thin GEMMs than 8 calls), pieces otherwise
            spans = _pieces(self.n, self.n) if usable_threads() > 1 else [(0, self.n)]

            def piece(i: int) -> None:  # per-sample GEMMs: the same bits however the batch is cut
                start, stop = spans[i]
                blas.matmul(w_mat, cols[start:stop], out=out[start:stop])

            parallel_for(len(spans), piece)
            return out.reshape((self.n, self.c_out) + self.out_sp)
        if xp is np and self.merged and w_mat.dtype == cols.dtype:  # both products into reused buffers
            res = blas.matmul(w_mat, cols, out=host_empty(w_mat.shape[:2] + cols.shape[2:], cols.dtype))
            out = host_empty((self.n, self.c_out) + self.out_sp, cols.dtype)
            res = res.reshape(self.c_out, self.n, self.l).transpose(1, 0, 2)
            np.copyto(out.reshape(self.n, self.c_out, self.l), res)
            return out
        out = blas.matmul(w_mat, cols)
        if self.merged:  # (groups, C_out/g, N*L) -> (N, C_out, *O)
            out = out.reshape(self.c_out, self.n, self.l).transpose(1, 0, 2)
            return xp.ascontiguousarray(out).reshape((self.n, self.c_out) + self.out_sp)
        return out.reshape((self.n, self.c_out) + self.out_sp)

    def g_matrix(self, xp: Any, g: Any) -> Any:
        """The output gradient (N, C_out, *O) in the layout of the columns."""
        if self.merged:
            gm = g.reshape(self.n, self.c_out, self.l).transpose(1, 0, 2)
            shape = (self.groups, self.c_out // self.groups, self.n * self.l)
            if xp is np:  # into a reused buffer (device/host_buffers.py)
                buf = host_empty(shape, g.dtype)
                np.copyto(buf.reshape(gm.shape), gm)
                return buf
            return xp.ascontiguousarray(gm).reshape(shape)
        return g.reshape(self.n, self.groups, self.c_out // self.groups, self.l)

    def weight_grad(self, xp: Any, g_mat: Any, cols: Any, out: Any = None) -> Any:
        """``sum_n g_n @ cols_n^T``: (groups, C_out/groups, Kg), written into ``out`` when given."""
        if self.merged:
            return blas.matmul(g_mat, cols.transpose(0, 2, 1), out=out)
        shape = (self.groups, self.c_out // self.groups, self.kg)
        acc = out if out is not None else xp.empty(shape, dtype=xp.result_type(g_mat, cols))
        # Per-sample products summed over the batch, a block of samples at a time (bounded memory), each
        # as cols_n @ g_n^T (Kg x C_out/groups): OpenBLAS runs that orientation faster than g_n @ cols_n^T
        # on one thread (15.0 against 17.1 ms for the CNN's 32->64 layer at batch 128; never slower in
        # the shapes measured), and the sum is transposed once at the end (Kg * C_out elements). The
        # blocks run side by side on the host threads (parallel_for); each block's sum is kept and the
        # blocks' sums are added in block order afterwards, so the bits do not depend on the thread count.
        spans = _pieces(self.n, _WGRAD_BLOCK // max(1, math.prod(shape)))
        dtype = np.result_type(g_mat.dtype, cols.dtype)
        sums = host_empty((len(spans),) + shape[:1] + shape[:0:-1], dtype)
        if xp is np and _conv_native.applies(self, g_mat, cols):  # the blocks in one native call, same bits
            _conv_native.weight_grad_sums(self, g_mat, cols, spans[0][1] - spans[0][0], sums)
        else:
            products = host_empty((self.n,) + shape[:1] + shape[:0:-1], dtype)  # every sample's, side by side

            def block(i: int) -> None:
                start, stop = spans[i]
                part = blas.matmul(cols[start:stop], g_mat[start:stop].transpose(0, 1, 3, 2),
                                   out=products[start:stop])
                np.sum(part, axis=0, out=sums[i])

            parallel_for(len(spans), block)
        total = sums[0]
        for part in sums[1:]:
            total += part
        acc[...] = total.transpose(0, 2, 1)
        return acc

    def col_grad(self, xp: Any, w_mat: Any, g_mat: Any) -> Any:
        """``w^T @ g``: the gradient of the columns, in the layout of :meth:`im2col`."""
        if xp is np and self.merged and w_mat.dtype == g_mat.dtype:  # into a reused buffer (device/host_buffers.py)
            out = host_empty((self.groups, self.kg, g_mat.shape[-1]), g_mat.dtype)
            return blas.matmul(w_mat.transpose(0, 2, 1), g_mat, out=out)
        if xp is np and w_mat.dtype == g_mat.dtype:  # per-sample blocks: reused memory (device/host_buffers.py)
            out = host_empty((g_mat.shape[0], self.groups, self.kg, g_mat.shape[-1]), g_mat.dtype)
            return blas.matmul(w_mat.transpose(0, 2, 1), g_mat, out=out)
        return blas.matmul(w_mat.transpose(0, 2, 1), g_mat)

    def input_grad(self, xp: Any, w_mat: Any, g_mat: Any) -> Any:
        """The input's gradient (N, C, *S): :meth:`col_grad` then :meth:`col2im`, a block of samples at a time.

        Per sample the column gradient is prod(K) times the input's size; made and scattered a few
        samples at a time it is read back from cache instead of memory. The merged layout (small
        outputs) does it in one go.
        """
        if self.merged or self.pointwise:
            return self.col2im(xp, self.col_grad(xp, w_mat, g_mat))
        if xp is np and _conv_native.applies(self, w_mat, g_mat):  # a sample at a time in one native call, same bits
            gx = host_empty((self.n, self.c) + self.spatial, g_mat.dtype)
            overlap = _overlapping(self.kernel, self.stride, self.dilation, self.out_sp)
            return _conv_native.input_grad(self, w_mat, g_mat, gx, overlap)
        block = max(1, _DCOLS_BLOCK // max(1, self.c * math.prod(self.kernel) * self.l))
        if block >= self.n:
            return self.col2im(xp, self.col_grad(xp, w_mat, g_mat))
        shape, dtype = (self.n, self.c) + self.spatial, xp.result_type(w_mat, g_mat)
        gx = host_empty(shape, dtype) if xp is np else xp.empty(shape, dtype=dtype)  # col2im writes it all
        spans = _pieces(self.n, block) if xp is np else [(a, min(a + block, self.n)) for a in range(0, self.n, block)]

        def piece(i: int) -> None:  # blocks of samples side by side on CPU devices (parallel_for)
            start, stop = spans[i]
            self.col2im(xp, self.col_grad(xp, w_mat, g_mat[start:stop]), out=gx[start:stop])

        if xp is np:
            parallel_for(len(spans), piece)
        else:
            for i in range(len(spans)):
                piece(i)
        return gx

    def col2im(self, xp: Any, dcols: Any, out: Any = None) -> Any:
        """Sum column gradients back onto the input: (N, C, *S) (the inverse of im2col; what falls in the
        padding is dropped).

        ``dcols`` may hold a block of samples (per-sample layout); ``out``, a C-contiguous (block, C, *S)
        array, receives them (every element written). Kernel ``col2im`` of kernels/conv.cu where
        :func:`_conv_kernels.enabled`, straight into the unpadded image; else (the twin)
        :func:`_scatter_taps` into a zero-padded image, cropped.
        """
        c, nd = self.c, self.nd
        n = self.n if self.merged else dcols.shape[0]
        shape = (n, c) + self.spatial
        if self.pointwise:
            return dcols.reshape(shape)
        if _ck.enabled(xp, dcols.dtype, nd):
            accumulate = _overlapping(self.kernel, self.stride, self.dilation, self.out_sp)
            gx = _ck.col2im(xp, dcols, self.kernel_geometry(n), "merged" if self.merged else "per_sample",
                            accumulate, out, shape=shape)
            return gx if gx.shape == shape else gx.reshape(shape)
        if self.merged:  # (C, *K, N, *O) -> taps-first (*K, N, C, *O) view
            d = dcols.reshape((c, *self.kernel, n, *self.out_sp))
            d = d.transpose((*range(1, nd + 1), nd + 1, 0, *range(nd + 2, 2 * nd + 2)))
        else:  # (N, C, *K, *O) -> (*K, N, C, *O) view
            d = dcols.reshape((n, c, *self.kernel, *self.out_sp))
            d = d.transpose((*range(2, nd + 2), 0, 1, *range(nd + 2, 2 * nd + 2)))
        gpad = _scatter_taps(xp, d, (n, c) + self.padded, self.kernel, self.stride, self.dilation, self.out_sp)
        gx = _crop(gpad, self.pad, self.spatial)
        if out is None:
            return gx
        out.reshape(shape)[...] = gx
        return out

    # -- GPUs: whole-batch GEMMs (see _GPU_COLS_BYTES) ---------------------------------------------------
    def pieces(self, itemsize: int) -> list[tuple[int, int]]:
        """The sample ranges a GPU makes columns for at a time: the whole batch, or as few equal pieces as
        keep each piece's columns within :data:`_GPU_COLS_BYTES` (one sample at least)."""
        per_sample = self.c * math.prod(self.kernel) * self.l * itemsize
        count = min(self.n, max(1, -(-self.n * per_sample // _GPU_COLS_BYTES)))
        size = -(-self.n // count)
        return [(a, min(a + size, self.n)) for a in range(0, self.n, size)]

    def piece(self, n: int) -> _ConvGeom:
        """This geometry for ``n`` samples."""
        geo = copy.copy(self)
        geo.n = n
        return geo

    def rows(self, xp: Any, a: Any, channels: int) -> Any:
        """``a`` (N, channels, *) as (groups, channels/groups, N*prod(*)): a transposed copy (merged layout)."""
        t = xp.ascontiguousarray(a.transpose((1, 0, *range(2, a.ndim))))
        return t.reshape(self.groups, channels // self.groups, a.shape[0] * math.prod(a.shape[2:]))

    def gpu_forward(self, xp: Any, xpad: Any, w_mat: Any, bias: Any) -> tuple[Any, Any]:
        """The convolution of ``xpad`` (N, C, *S; padded by im2col) on a GPU, ``bias`` (C_out,) or None added.

        Returns ``(out, cols)``: out (N, C_out, *O), C-contiguous, from one GEMM per piece (:meth:`pieces`);
        cols the columns for :meth:`gpu_backward` when the batch was one piece, else None.
        """
        n, co, nd = self.n, self.c_out, self.nd
        if self.pointwise:  # the input is the column matrix: one batched GEMM, the output in place
            out = blas.matmul(w_mat, xpad.reshape(n, self.groups, self.kg, self.l)).reshape((n, co) + self.out_sp)
            if bias is not None:
                out += bias.reshape((1, co) + (1,) * nd)
            return out, None
        spans = self.pieces(xpad.dtype.itemsize)
        whole = len(spans) == 1
        out = xp.empty((n, co) + self.out_sp, dtype=np.result_type(w_mat.dtype, xpad.dtype))
        b = None if bias is None else bias.reshape((1, co) + (1,) * nd)
        cols = None
        for start, stop in spans:
            geo = self if whole else self.piece(stop - start)
            cols = geo.im2col(xp, xpad if whole else xpad[start:stop])
            res = blas.matmul(w_mat, cols).reshape((co, stop - start) + self.out_sp)  # (C_out, n, *O)
            res = res.transpose((1, 0, *range(2, nd + 2)))
            dst = out if whole else out[start:stop]
            if b is None:
                dst[...] = res
            else:
                xp.add(res, b, out=dst)
        return out, cols if whole else None

    def gpu_backward(self, xp: Any, g: Any, xpad: Any, cols: Any, w_mat: Any, need_x: bool,
                     gw_out: Any = None, need_w: bool = True) -> tuple[Any, Any]:
        """The gradients of :meth:`gpu_forward` on a GPU for the output gradient ``g`` (N, C_out, *O).

        ``cols``: the forward's columns, or None (made again from ``xpad``, a piece at a time). Returns
        ``(gpad, gw)``: the input's gradient (N, C, *S) when ``need_x``, and the weight gradient
        (groups, C_out/groups, Kg), written into ``gw_out`` when given, when ``need_w``; None for what is not
        needed.
        """
        n, co, gr = self.n, self.c_out, self.groups
        gw = gpad = None
        if self.pointwise:
            if need_x:
                gpad = blas.matmul(w_mat.transpose(0, 2, 1), g.reshape(n, gr, co // gr, self.l))
                gpad = gpad.reshape((n, self.c) + self.spatial)
            if need_w:
                x_rows = self.rows(xp, xpad, self.c)
                gw = blas.matmul(self.rows(xp, g, co), x_rows.transpose(0, 2, 1), out=gw_out)
            return gpad, gw
        spans = self.pieces(g.dtype.itemsize)
        whole = len(spans) == 1
        if need_x:
            # col2im writes every element of each piece
            gpad = xp.empty((n, self.c) + self.spatial, dtype=np.result_type(w_mat.dtype, g.dtype))
            w_t = w_mat.transpose(0, 2, 1)
        for i, (start, stop) in enumerate(spans):
            geo = self if whole else self.piece(stop - start)
            g_rows = geo.rows(xp, g if whole else g[start:stop], co)
            if need_w:
                part = cols if whole and cols is not None else geo.im2col(xp, xpad if whole else xpad[start:stop])
                if i == 0:
                    gw = blas.matmul(g_rows, part.transpose(0, 2, 1), out=gw_out)
                else:
                    gw += blas.matmul(g_rows, part.transpose(0, 2, 1))
                del part
            if need_x:
                geo.col2im(xp, blas.matmul(w_t, g_rows), out=gpad if whole else gpad[start:stop])
        return gpad, gw


def _conv_check(name: str, x: Tensor, weight: Tensor, bias: Tensor | None, nd: int | None, transposed: bool,
                groups: int) -> int:
    """Validate ranks, channels and bias of a (transposed) convolution; return the number of spatial axes."""
    if nd is None:
        nd = x.ndim - 2
        if nd < 1 or weight.ndim != x.ndim:
            raise ValueError(f"expected x (N, C, *spatial) and weight of the same rank with at least one spatial "
                             f"axis, got {x.ndim}-D x and {weight.ndim}-D weight")
    elif x.ndim != nd + 2 or weight.ndim != nd + 2:
        axes = {1: "W", 2: "H, W", 3: "D, H, W"}.get(nd, "*spatial")
        wdesc = "C_in, C_out/groups" if transposed else "C_out, C_in/groups"
        raise ValueError(f"expected x (N, C, {axes}) and weight ({wdesc}, k...), "
                         f"got {x.ndim}-D x and {weight.ndim}-D weight")
    c = x.shape[1]
    if transposed:
        if groups < 1 or c % groups:
            raise ValueError(f"groups={groups} must be >= 1 and divide C_in={c}")
        if weight.shape[0] != c:
            raise ValueError(f"weight expects {weight.shape[0]} input channels (weight shape {weight.shape}), "
                             f"but x has {c}")
        c_out = weight.shape[1] * groups
    else:
        c_out, c_g = weight.shape[:2]
        if groups < 1 or c % groups or c_out % groups:
            raise ValueError(f"groups={groups} must be >= 1 and divide both C_in={c} and C_out={c_out}")
        if c_g * groups != c:
            raise ValueError(f"weight expects {c_g * groups} input channels ({c_g} per group x {groups} groups), "
                             f"but x has {c}")
    if bias is not None and bias.shape != (c_out,):
        raise ValueError(f"bias must have shape ({c_out},), got {bias.shape}")
    return nd


def _bias_grad(xp: Any, g: Any, bias: Tensor) -> Any:
    """``g`` summed over every axis but the channels, into the bias's gradient buffer when allowed."""
    axes = (0,) + tuple(range(2, g.ndim))
    return g.sum(axis=axes, out=grad_out(bias, g.dtype))


def _conv_nd(name: str, x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntTuple, padding: IntTuple,
             dilation: IntTuple, groups: int, nd: int | None, relu: bool = False) -> Tensor:
    """The convolution ``name``; with ``relu`` (CPU devices, a bias of the output's dtype: see
    :func:`conv_relu`) its output data is ``relu(conv + bias)``, made in one pass (kernels/bias_act.cu)."""
    xp = x.device.xp
    nd = _conv_check(name, x, weight, bias, nd, False, groups)
    stride_t, pad_t = _ntuple("stride", stride, nd, 1), _ntuple("padding", padding, nd, 0)
    dil_t = _ntuple("dilation", dilation, nd, 1)
    n, c, *spatial = x.shape
    c_out, _, *kernel = weight.shape
    out_sp = tuple((s + 2 * p - d * (k - 1) - 1) // t + 1
                   for s, p, d, k, t in zip(spatial, pad_t, dil_t, kernel, stride_t))
    if any(o < 1 for o in out_sp):
        raise ValueError(f"kernel {'x'.join(map(str, kernel))} (dilation {'x'.join(map(str, dil_t))}) is larger "
                         f"than the padded input {'x'.join(str(s + 2 * p) for s, p in zip(spatial, pad_t))}")
    if xp is not np:  # GPUs: cuDNN first, where the device has it (mxlite/device/cudnn.py)
        routed = _cudnn_ops.conv(name, x, weight, bias, stride_t, pad_t, dil_t, out_sp)
        if routed is not None:
            return routed
    geo = _ConvGeom(n, c, tuple(spatial), c_out, tuple(kernel), stride_t, pad_t, dil_t, groups, out_sp,
                    whole_batch=xp is not np)
    wdata = weight._data
    w_mat = wdata.reshape(groups, c_out // groups, geo.kg)
    xpad = x._data  # im2col applies the padding
    if geo.whole_batch:
        out, cols = geo.gpu_forward(xp, xpad, w_mat, None if bias is None else bias._data)
        xpad = xpad if cols is None else None  # the backward makes the columns again from it
    else:
        cols = geo.im2col(xp, xpad)
        xpad = None
        out = geo.forward(xp, w_mat, cols, bias._data if relu else None)
        if bias is not None and not relu:
            out += bias._data.reshape((1, c_out) + (1,) * nd)

    def backward(g: Any) -> tuple[Any, ...]:
        gw = gx = gb = None
        need_w, need_x = weight._requires_grad(), x._requires_grad()
        buf = grad_out(weight, np.result_type(g.dtype, wdata.dtype)) if need_w else None
        w_out = None if buf is None else buf.reshape(w_mat.shape)
        if geo.whole_batch:
            gx, gw = geo.gpu_backward(xp, g, xpad, cols, w_mat, need_x, w_out, need_w)
        else:
            g_mat = geo.g_matrix(xp, g)
            if need_w:
                gw = geo.weight_grad(xp, g_mat, cols, w_out)
            if need_x:
                gx = geo.input_grad(xp, w_mat, g_mat)
        if need_w:
            gw = buf if buf is not None else gw.reshape(weight.shape)
        if bias is not None and bias._requires_grad():
            gb = _bias_grad(xp, g, bias)
        return (gx, gw) if bias is None else (gx, gw, gb)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return op_result(name, out, x.device, parents, backward)


def conv_relu(x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntTuple, padding: IntTuple,
               dilation: IntTuple, groups: int, nd: int | None) -> Tensor | None:
    """``relu(conv(x, weight, bias))`` (``conv2d`` when ``nd`` is 2) with the bias and the ReLU in one pass
    over the output, for convolution layers with ``activation='relu'``; None where that does not apply
    (GPUs, no bias, a bias of another dtype than the output: the caller composes the two ops).

    Recorded as the two ops it stands for: the convolution's node, whose output data is already the
    ReLU's (its backward reads only its inputs and the gradient it is given), and a ``relu`` node on it
    sharing that data, whose backward masks with it (y > 0 exactly where conv + bias > 0). Both nodes
    keep their calls as :func:`conv`/:func:`conv2d` and ``activations.relu``, so higher-order gradients
    see the plain ops. CPU devices only: one pass saves the ReLU's read and write of the whole output.

    Raises:
        ValueError: as :func:`conv`.
    """
    if x.device.xp is not np or bias is None or bias.dtype != np.result_type(x.dtype, weight.dtype):
        return None
    name = "conv2d" if nd == 2 else "conv"
    kwargs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    try:
        z = _conv_nd(name, x, weight, bias, stride, padding, dilation, groups, nd, relu=True)
    except (ValueError, TypeError) as exc:
        raise _named_error(name, exc, [x, weight, bias]) from exc
    if z._node is not None:
        z._node.call = (conv2d if nd == 2 else conv, (x, weight, bias), kwargs)
    data, xp = z._data, np

    def backward(g: Any) -> tuple[Any]:
        out = host_empty(data.shape, data.dtype) if g.dtype == data.dtype and g.flags.c_contiguous else None
        if out is None:
            return (xp.where(data > 0, g, g.dtype.type(0)),)
        return (_ck.relu_backward_into(xp, g, data, out),)

    y = op_result("relu", data, z.device, (z,), backward)
    if y._node is not None:
        y._node.call = (_activations.relu, (z,), {})
    return y


@_op("conv")
def conv(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntTuple = 1, padding: IntTuple = 0,
         dilation: IntTuple = 1, groups: int = 1) -> Tensor:
    """N-D convolution (cross-correlation, as every framework computes it) of an ``(N, C, *spatial)`` batch.

    1, 2 or 3 spatial axes (MXNet's ``Convolution`` with layouts NCW, NCHW, NCDHW); the number of
    spatial axes is ``x.ndim - 2``. Computed as a GEMM over im2col columns (see the comment above
    ``_PER_SAMPLE_MIN`` for how the layout is chosen per shape); backward is two more GEMMs and a
    col2im.

    Args:
        x: input ``(N, C_in, *S)``.
        weight: filters ``(C_out, C_in/groups, *K)``.
        bias: optional ``(C_out,)``.
        stride, padding, dilation: ints or one int per spatial axis, in elements; padding is zeros
            on both sides.
        groups: split channels into this many independent convolutions; ``C_in`` and ``C_out``
            must both be divisible by it.

    Returns:
        ``(N, C_out, *O)`` with ``O_i = (S_i + 2*pad_i - dil_i*(K_i-1) - 1) // stride_i + 1``.

    Raises:
        ValueError: ranks that differ or leave no spatial axis, channel counts that do not match
            ``groups`` and ``weight``, a bias of the wrong shape, or a kernel larger than the padded input.
    """
    return _conv_nd("conv", x, weight, bias, stride, padding, dilation, groups, None)


@_op("conv2d")
def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = (1, 1),
           padding: IntPair = (0, 0), dilation: IntPair = (1, 1), groups: int = 1) -> Tensor:
    """2-D convolution of an NCHW batch: :func:`conv` restricted to 4-D ``x`` and ``weight``.

    Args:
        x: input ``(N, C_in, H, W)``.
        weight: filters ``(C_out, C_in/groups, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride, padding, dilation: ints or ``(h, w)`` pairs, in pixels; padding is zeros on both sides.
        groups: grouped convolution.

    Returns:
        ``(N, C_out, H_out, W_out)`` with ``H_out = (H + 2*pad_h - dil_h*(kH-1) - 1) // stride_h + 1``
        (likewise ``W_out``).

    Raises:
        ValueError: as :func:`conv`, and for inputs that are not 4-D.
    """
    return _conv_nd("conv2d", x, weight, bias, stride, padding, dilation, groups, 2)


@_op("conv_transpose")
def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntTuple = 1,
                   padding: IntTuple = 0, output_padding: IntTuple = 0, dilation: IntTuple = 1,
                   groups: int = 1) -> Tensor:
    """Transposed N-D convolution (MXNet's ``Deconvolution``): the gradient of :func:`conv` w.r.t. its input.

    ``conv(conv_transpose(x, w), w)``'s shapes round-trip: a convolution with the same ``weight``,
    ``stride``, ``padding`` and ``dilation`` maps the result back to ``x``'s shape. Forward is one
    GEMM and a col2im; backward is an im2col of the output gradient and two GEMMs.

    Args:
        x: input ``(N, C_in, *S)`` (1, 2 or 3 spatial axes).
        weight: ``(C_in, C_out/groups, *K)`` (MXNet's and PyTorch's layout).
        bias: optional ``(C_out,)``.
        stride, padding, dilation: as in the convolution this one transposes.
        output_padding: extra elements added at the end of each spatial axis of the output
            (MXNet's ``adj``), to pick among the output sizes a strided convolution maps to ``S``;
            each must be smaller than its stride or its dilation.
        groups: grouped transposed convolution; ``C_in`` must be divisible by it.

    Returns:
        ``(N, C_out, *O)`` with ``O_i = (S_i - 1)*stride_i - 2*pad_i + dil_i*(K_i - 1) + 1 + output_padding_i``.

    Raises:
        ValueError: ranks, channel counts or bias shape that do not match, an ``output_padding`` not
            below the stride or dilation, or an output with a non-positive size.
    """
    xp = x.device.xp
    nd = _conv_check("conv_transpose", x, weight, bias, None, True, groups)
    stride_t, pad_t = _ntuple("stride", stride, nd, 1), _ntuple("padding", padding, nd, 0)
    dil_t, adj = _ntuple("dilation", dilation, nd, 1), _ntuple("output_padding", output_padding, nd, 0)
    if any(a >= max(s, d) for a, s, d in zip(adj, stride_t, dil_t)):
        raise ValueError(f"output_padding {adj} must be smaller than the stride {stride_t} or the dilation {dil_t}")
    n, c, *spatial = x.shape
    _, c_out_g, *kernel = weight.shape
    c_out = c_out_g * groups
    out_sp = tuple((s - 1) * t - 2 * p + d * (k - 1) + 1 + a
                   for s, t, p, d, k, a in zip(spatial, stride_t, pad_t, dil_t, kernel, adj))
    if any(o < 1 for o in out_sp):
        raise ValueError(f"the output would have size {out_sp}: padding {pad_t} is too large for input {spatial}")
    # The convolution this op transposes: input (N, C_out, *out_sp) -> output (N, C_in, *S).
    geo = _ConvGeom(n, c_out, out_sp, c, tuple(kernel), stride_t, pad_t, dil_t, groups, tuple(spatial),
                    padded=tuple(o + 2 * p for o, p in zip(out_sp, pad_t)), whole_batch=xp is not np)
    wdata = weight._data
    w_mat = wdata.reshape(groups, c // groups, geo.kg)
    if geo.whole_batch:
        x_mat = x._data
        out, _ = geo.gpu_backward(xp, x_mat, None, None, w_mat, True, need_w=False)
    else:
        x_mat = geo.g_matrix(xp, x._data)
        out = geo.input_grad(xp, w_mat, x_mat)
    out = out + bias._data.reshape((1, c_out) + (1,) * nd) if bias is not None else xp.ascontiguousarray(out)

    def backward(g: Any) -> tuple[Any, ...]:
        gx = gw = gb = None
        need_w, need_x = weight._requires_grad(), x._requires_grad()
        buf = grad_out(weight, np.result_type(g.dtype, wdata.dtype)) if need_w else None
        w_out = None if buf is None else buf.reshape(w_mat.shape)
        if geo.whole_batch:
            gpad = g if need_w or need_x else None  # im2col applies the padding
            cols = None
            if need_x:
                gx, cols = geo.gpu_forward(xp, gpad, w_mat, None)
            if need_w:
                _, gw = geo.gpu_backward(xp, x_mat, gpad, cols, w_mat, False, w_out)
        else:
            if need_w or need_x:
                cols = geo.im2col(xp, g)
            if need_x:
                gx = geo.forward(xp, w_mat, cols)
            if need_w:
                gw = geo.weight_grad(xp, x_mat, cols, w_out)
        if need_w:
            gw = buf if buf is not None else gw.reshape(weight.shape)
        if bias is not None and bias._requires_grad():
            gb = _bias_grad(xp, g, bias)
        return (gx, gw) if bias is None else (gx, gw, gb)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return op_result("conv_transpose", out, x.device, parents, backward)


# -- pooling -------------------------------------------------------------------------------------
# Max pooling lays the windows out once, taps first, as a contiguous (prod(K), N*C*prod(O)) array
# (one strided copy, the input's size when windows do not overlap): the maximum is then one
# contiguous reduction over the leading axis, and the backward's first-maximum search runs on
# contiguous slabs, where NumPy's loops vectorise; a reduction over small trailing window axes of
# a strided view, or a running maximum over strided taps, runs several times slower.
# Average pooling is separable: a box sum is a sum along each spatial axis in turn, so forward and
# backward cost sum(K) strided adds, not prod(K).
def _pool_geometry(name: str, x: Tensor, pool_size: IntTuple, strides: IntTuple | None, padding: IntTuple,
                   ceil_mode: bool, nd: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Validate pooling arguments; return kernel, stride, padding, output sizes and padded sizes."""
    if nd is None:
        nd = x.ndim - 2
        if nd < 1:
            raise ValueError(f"{name} expects an (N, C, *spatial) input with at least one spatial axis, "
                             f"got shape {x.shape}")
    elif x.ndim != nd + 2:
        axes = {1: "W", 2: "H, W", 3: "D, H, W"}.get(nd, "*spatial")
        raise ValueError(f"{name} expects an (N, C, {axes}) input, got shape {x.shape}")
    kernel = _ntuple("pool_size", pool_size, nd, 1)
    stride = _ntuple("strides", kernel if strides is None else strides, nd, 1)
    pad = _ntuple("padding", padding, nd, 0)
    out, padded = [], []
    for size, k, s, p in zip(x.shape[2:], kernel, stride, pad):
        span = size + 2 * p - k
        if span < 0:
            raise ValueError(f"pool_size {kernel} is larger than the padded input {tuple(x.shape[2:])} + 2*{pad}")
        # MXNet's 'valid' (floor) and 'full' (ceil) pooling conventions.
        o = 1 + (math.ceil(span / s) if ceil_mode else span // s)
        out.append(o)
        padded.append(max(size + 2 * p, (o - 1) * s + k))  # ceil-mode windows may hang over the end
    return kernel, stride, pad, tuple(out), tuple(padded)


def _pad_to(xp: Any, data: Any, pad: tuple[int, ...], padded: tuple[int, ...], value: Any) -> Any:
    """``data`` (N, C, *S) padded by ``pad`` before and up to ``padded`` after, with ``value``."""
    widths = [(0, 0), (0, 0)] + [(p, tot - s - p) for p, tot, s in zip(pad, padded, data.shape[2:])]
    if not any(b or a for b, a in widths):
        return data
    return xp.pad(data, widths, constant_values=value)


def _crop(a: Any, pad: tuple[int, ...], spatial: tuple[int, ...]) -> Any:
    """The (N, C, *spatial) interior of ``a`` after ``pad`` (``a`` itself when there is no margin)."""
    if tuple(a.shape[2:]) == tuple(spatial):
        return a
    return a[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(pad, spatial))]


def _max_pool_twin_forward(cols: Any) -> Any:
    """The maxima of the (taps, M) window values ``cols`` as kernel ``max_pool_forward`` finds them (its twin):
    the first tap's values, replaced tap by tap where a tap is strictly greater or the first NaN, so a
    maximum keeps the first maximum's own value (its sign, for +-0 ties) and any NaN makes it NaN."""
    best = cols[0].copy()
    for t in range(1, cols.shape[0]):
        tap = cols[t]
        take = (tap > best) | ((tap != tap) & (best == best))
        np.copyto(best, tap, where=take)
    return best


def _max_pool(name: str, x: Tensor, pool_size: IntTuple, strides: IntTuple | None, padding: IntTuple,
              ceil_mode: bool, nd: int | None) -> Tensor:
    xp = x.device.xp
    kernel, stride, pad, out_sp, padded = _pool_geometry(name, x, pool_size, strides, padding, ceil_mode, nd)
    data = x._data
    low = -np.inf if np.issubdtype(data.dtype, np.floating) else np.iinfo(data.dtype).min
    xpad = _pad_to(xp, data, pad, padded, low)
    ones = (1,) * len(kernel)
    taps = math.prod(kernel)
    n, c = data.shape[:2]
    # CPU devices: kernel max_pool_forward of kernels/conv.cu (maxima and first maxima straight from the
    # image, no copy of the windows; its twin: the window copy, then _max_pool_twin_forward). GPUs: kernel
    # im2col (taps first), then CuPy's maximum over the taps. Elsewhere the window copy and NumPy's.
    kernels = _ck.enabled(xp, data.dtype, len(kernel))
    geom = _ck.geometry(n, c, padded, kernel, stride, ones, out_sp) if kernels else ()
    host = xp is np  # CPU devices: buffers from host_empty (device/host_buffers.py)
    first = cols = None
    if kernels and host:
        flat, first = _ck.max_pool_forward(xp, xpad, geom, allocate=host_empty)
    else:
        if kernels:  # (taps, N*C*prod(O))
            cols = _ck.im2col(xp, xpad, geom, "taps_first", shape=(taps, n * c * math.prod(out_sp)))
        else:
            cols = xp.ascontiguousarray(_windows(xp, xpad, kernel, stride, ones, out_sp, taps_first=True))
            cols = cols.reshape(taps, -1)
        if host:
            flat = _max_pool_twin_forward(cols)
        else:
            flat = cols.max(axis=0) if taps > 1 else cols[0].copy()
    out = flat.reshape((n, c) + out_sp)
    spatial = data.shape[2:]

    def backward(g: Any) -> tuple[Any]:
        # The gradient of a window goes to its first maximum in row-major tap order (MXNet's rule).
        nonlocal cols
        overlap = _overlapping(kernel, stride, ones, out_sp)
        if first is not None and g.dtype == flat.dtype:  # kernel max_pool_scatter of kernels/conv.cu
            gpad = _ck.max_pool_scatter(xp, first, g, geom, overlap, shape=xpad.shape, allocate=host_empty)
            return (_crop(gpad, pad, spatial),)
        if cols is None:  # the kernel's forward with a gradient of another dtype: the twin's windows
            cols = xp.ascontiguousarray(_windows(xp, xpad, kernel, stride, ones, out_sp, taps_first=True))
            cols = cols.reshape(taps, -1)
        if kernels and g.dtype == cols.dtype:  # kernel max_pool_backward of kernels/conv.cu; below, its twin
            gpad = _ck.max_pool_backward(xp, cols, flat, g, geom, overlap, shape=xpad.shape,
                                         allocate=host_empty if host else None)
            return (_crop(gpad, pad, spatial),)
        g_flat = g.reshape(-1)
        free = xp.ones(flat.shape, dtype=bool)  # windows whose maximum is not yet found
        hit = xp.empty(flat.shape, dtype=bool)
        gpad = xp.zeros(xpad.shape, dtype=g.dtype)
        dst = None if overlap else _windows(xp, gpad, kernel, stride, ones, out_sp, taps_first=True)
        tmp = xp.empty(flat.shape, dtype=g.dtype) if overlap else None
        for t, tap in enumerate(np.ndindex(*kernel)):
            xp.equal(cols[t], flat, out=hit)
            hit &= free
            free ^= hit
            if overlap:
                xp.multiply(g_flat, hit, out=tmp)
                gpad[_tap_slices(tap, stride, ones, out_sp)] += tmp.reshape(out.shape)
            else:
                xp.multiply(g, hit.reshape(out.shape), out=dst[tap])
        return (_crop(gpad, pad, spatial),)

    return op_result(name, out, x.device, (x,), backward)


def _avg_pool(name: str, x: Tensor, pool_size: IntTuple, strides: IntTuple | None, padding: IntTuple,
              ceil_mode: bool, count_include_pad: bool, nd: int | None) -> Tensor:
    _check_float(name, x)
    xp = x.device.xp
    kernel, stride, pad, out_sp, padded = _pool_geometry(name, x, pool_size, strides, padding, ceil_mode, nd)
    data = x._data
    spatial = data.shape[2:]
    nsp = len(kernel)

    # Divisor per output position (host-side, tiny, a product over the axes): taps inside
    # [0, size + pad) with count_include_pad, else inside [0, size). Where every window has the same
    # divisor (no padding outside the count, no ceil-mode overhang) it is a scalar of the data's dtype,
    # the value each element of the table would hold: no host-to-device copy on a GPU.
    divisor = np.ones((), dtype=np.int64)
    for size, k, s, p, o in zip(spatial, kernel, stride, pad, out_sp):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, size + p)
        count = end - start if count_include_pad else np.minimum(end, size) - np.maximum(start, 0)
        divisor = np.multiply.outer(divisor, count)
    table = (1.0 / np.maximum(divisor, 1)).astype(data.dtype)
    inv = table.flat[0] if (table == table.flat[0]).all() else xp.asarray(table)

    def axis_slice(a: int, t: int, s: int, o: int) -> tuple[slice, ...]:
        return (slice(None),) * (2 + a) + (slice(t, t + s * (o - 1) + 1, s),)

    total = _pad_to(xp, data, pad, padded, 0)
    for a, (k, s, o) in enumerate(zip(kernel, stride, out_sp)):  # box sum, one axis at a time
        acc = total[axis_slice(a, 0, s, o)].copy()
        for t in range(1, k):
            acc += total[axis_slice(a, t, s, o)]
        total = acc
    out = total * inv

    def backward(g: Any) -> tuple[Any]:
        cur = g * inv
        for a in reversed(range(nsp)):  # spread back, one axis at a time
            k, s, o = kernel[a], stride[a], out_sp[a]
            shape = cur.shape[:2 + a] + (padded[a],) + cur.shape[3 + a:]
            nxt = xp.zeros(shape, dtype=cur.dtype)
            if s == k:  # windows tile the axis: one broadcast copy into a (..., o, k, ...) view
                view = nxt[axis_slice(a, 0, 1, k * o)].reshape(cur.shape[:2 + a] + (o, k) + cur.shape[3 + a:])
                view[...] = xp.expand_dims(cur, 3 + a)
            elif not _overlapping((k,), (s,), (1,), (o,)):
                for t in range(k):
                    nxt[axis_slice(a, t, s, o)] = cur
            else:
                for t in range(k):
                    nxt[axis_slice(a, t, s, o)] += cur
            cur = nxt
        return (_crop(cur, pad, spatial),)

    return op_result(name, out, x.device, (x,), backward)


@_op("max_pool")
def max_pool(x: Tensor, pool_size: IntTuple = 2, strides: IntTuple | None = None, padding: IntTuple = 0,
             ceil_mode: bool = False) -> Tensor:
    """Maximum over each ``pool_size`` window of an ``(N, C, *spatial)`` batch (1, 2 or 3 spatial axes).

    Padding never wins the maximum (it is ``-inf``, or the dtype's minimum for integers). The
    gradient of a window goes to its maximum element (the first in row-major order when tied, as
    MXNet); an element that is the maximum of several overlapping windows receives the sum of
    their gradients.

    Args:
        x: input ``(N, C, *S)``.
        pool_size: window, an int or one int per spatial axis.
        strides: step between windows; ``None`` means ``pool_size`` (Gluon's default).
        padding: implicit padding on both sides, in elements.
        ceil_mode: round the output size up (MXNet's ``pooling_convention='full'``), so windows
            may hang over the far edge.

    Returns:
        ``(N, C, *O)`` with ``O_i = 1 + floor_or_ceil((S_i + 2*pad_i - K_i) / stride_i)``.

    Raises:
        ValueError: no spatial axis, arguments of the wrong length, or a window larger than the padded input.
    """
    return _max_pool("max_pool", x, pool_size, strides, padding, ceil_mode, None)


@_op("avg_pool")
def avg_pool(x: Tensor, pool_size: IntTuple = 2, strides: IntTuple | None = None, padding: IntTuple = 0,
             ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over each ``pool_size`` window of an ``(N, C, *spatial)`` batch (MXNet's divisor rules).

    With ``count_include_pad`` (the default) a window is divided by the number of its taps inside
    the *padded* input (``S + 2*pad``), so zero padding counts but the extra margin a ceil-mode
    window hangs over does not; otherwise by the number of its taps inside the unpadded input.

    Args:
        x: floating-point input ``(N, C, *S)``.
        pool_size, strides, padding, ceil_mode: as in :func:`max_pool`.
        count_include_pad: whether padding counts in the divisor.

    Returns:
        ``(N, C, *O)``, sizes as in :func:`max_pool`.

    Raises:
        TypeError: integer input. ValueError: as :func:`max_pool`.
    """
    return _avg_pool("avg_pool", x, pool_size, strides, padding, ceil_mode, count_include_pad, None)


@_op("max_pool2d")
def max_pool2d(x: Tensor, pool_size: IntPair = (2, 2), strides: IntPair | None = None,
               padding: IntPair = (0, 0), ceil_mode: bool = False) -> Tensor:
    """:func:`max_pool` of an NCHW batch (``x`` must be 4-D).

    Raises:
        ValueError: ``x`` is not 4-D, or as :func:`max_pool`.
    """
    return _max_pool("max_pool2d", x, pool_size, strides, padding, ceil_mode, 2)


@_op("avg_pool2d")
def avg_pool2d(x: Tensor, pool_size: IntPair = (2, 2), strides: IntPair | None = None,
               padding: IntPair = (0, 0), ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """:func:`avg_pool` of an NCHW batch (``x`` must be 4-D).

    Raises:
        TypeError: integer input. ValueError: ``x`` is not 4-D, or as :func:`max_pool`.
    """
    return _avg_pool("avg_pool2d", x, pool_size, strides, padding, ceil_mode, count_include_pad, 2)


def _check_global(name: str, x: Tensor, nd: int | None) -> tuple[int, ...]:
    if nd is None:
        if x.ndim < 3:
            raise ValueError(f"{name} expects an (N, C, *spatial) input with at least one spatial axis, "
                             f"got shape {x.shape}")
    elif x.ndim != nd + 2:
        raise ValueError(f"{name} expects an (N, C, H, W) input, got shape {x.shape}")
    return tuple(range(2, x.ndim))


def global_avg_pool(x: Tensor) -> Tensor:
    """Mean over every spatial axis: ``(N, C, *S) -> (N, C, 1, ...)`` (Gluon's ``GlobalAvgPool1D/2D/3D``).

    Raises:
        ValueError: ``x`` has no spatial axis.
    """
    return mean(x, axis=_check_global("global_avg_pool", x, None), keepdims=True)


def global_max_pool(x: Tensor) -> Tensor:
    """Maximum over every spatial axis: ``(N, C, *S) -> (N, C, 1, ...)``; tied maxima share the gradient.

    Raises:
        ValueError: ``x`` has no spatial axis.
    """
    return _max(x, axis=_check_global("global_max_pool", x, None), keepdims=True)


def global_avg_pool2d(x: Tensor) -> Tensor:
    """Mean over ``H`` and ``W``: ``(N, C, H, W) -> (N, C, 1, 1)``.

    Raises:
        ValueError: ``x`` is not 4-D.
    """
    return mean(x, axis=_check_global("global_avg_pool2d", x, 2), keepdims=True)


def global_max_pool2d(x: Tensor) -> Tensor:
    """Maximum over ``H`` and ``W``: ``(N, C, H, W) -> (N, C, 1, 1)``; tied maxima share the gradient.

    Raises:
        ValueError: ``x`` is not 4-D.
    """
    return _max(x, axis=_check_global("global_max_pool2d", x, 2), keepdims=True)
