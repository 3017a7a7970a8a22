"""Layer-level primitives, each with its backward beside its forward.

Softmax, convolution, pooling, dropout, embedding/take/pick, batch and layer normalisation
and the fully connected product. Like ``ops.py`` every function takes and returns
:class:`Tensor` objects, computes through the device's ``xp`` (NumPy on CPU devices, CuPy on
GPUs), and inside ``autograd.record()`` records one closure returning its inputs' gradients
as raw arrays. Each op validates its shapes up front and says what it expected and what it
got; any error raised inside names the op and its inputs (the ``_op`` decorator).

Layouts and semantics follow Apache MXNet's operators (``Convolution``, ``Pooling``,
``Dropout``, ``Embedding``, ``take``, ``pick``, ``BatchNorm``, ``LayerNorm``,
``FullyConnected``); where mxlite differs the function's docstring says so.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import random as _random
from .. import sparse as _sparse
from . import _state
from .ops import _op, _scatter_add, mean
from .ops import max as _max
from .tensor import Tensor, _result

__all__ = [
    "softmax", "log_softmax", "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
    "global_max_pool2d", "dropout", "embedding", "take", "pick", "batch_norm", "layer_norm",
    "fully_connected",
]

IntPair = int | Sequence[int]


# -- helpers -------------------------------------------------------------------------------------
def _pair(name: str, value: IntPair, minimum: int) -> tuple[int, int]:
    """``value`` as an ``(h, w)`` pair of ints, each at least ``minimum``."""
    pair = (int(value), int(value)) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    if len(pair) != 2 or any(v < minimum for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints >= {minimum}, got {value!r}")
    return pair  # type: ignore[return-value]


def _check_float(name: str, x: Tensor) -> None:
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} needs a floating-point input, got {x.dtype}; cast it with .astype('float32')")


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _window(a: Any, i: int, j: int, dilation: tuple[int, int], stride: tuple[int, int],
            out_hw: tuple[int, int]) -> Any:
    """View of the padded NCHW array ``a`` seen by kernel tap ``(i, j)`` at every output position.

    Element ``[n, c, oh, ow]`` of the view is ``a[n, c, oh*sh + i*dh, ow*sw + j*dw]``.
    """
    (dh, dw), (sh, sw), (ho, wo) = dilation, stride, out_hw
    return a[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]


def _as_strided(xp: Any) -> Any:
    """NumPy's or CuPy's ``lib.stride_tricks.as_strided`` (strides in bytes in both)."""
    if xp is np:
        return np.lib.stride_tricks.as_strided
    return importlib.import_module("cupy.lib.stride_tricks").as_strided


# -- softmax -------------------------------------------------------------------------------------
@_op("softmax")
def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, computed on ``x - max(x)`` so it never overflows.

    Args:
        x: floating-point tensor of any shape.
        axis: the axis normalised to sum to 1.

    Returns:
        A tensor of ``x``'s shape and dtype.

    Raises:
        TypeError: ``x`` is not floating point. ValueError: ``axis`` out of range.
    """
    _check_float("softmax", x)
    xp = x._device.xp
    axis = _axis(axis, x.ndim)
    d = x._data
    e = xp.exp(d - d.max(axis=axis, keepdims=True))
    out = e / e.sum(axis=axis, keepdims=True)

    def backward(g: Any) -> tuple[Any]:
        # d softmax: y * (g - sum(g * y))
        return (out * (g - (g * out).sum(axis=axis, keepdims=True)),)

    return _result("softmax", out, x._device, (x,), backward)


@_op("log_softmax")
def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - log(sum(exp(x)))`` along ``axis`` (log-sum-exp taken around the maximum).

    Args:
        x: floating-point tensor of any shape.
        axis: the axis over which the log-probabilities are normalised.

    Returns:
        A tensor of ``x``'s shape and dtype.

    Raises:
        TypeError: ``x`` is not floating point. ValueError: ``axis`` out of range.
    """
    _check_float("log_softmax", x)
    xp = x._device.xp
    axis = _axis(axis, x.ndim)
    d = x._data
    shifted = d - d.max(axis=axis, keepdims=True)
    out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))

    def backward(g: Any) -> tuple[Any]:
        # d log_softmax: g - softmax * sum(g)
        return (g - xp.exp(out) * g.sum(axis=axis, keepdims=True),)

    return _result("log_softmax", out, x._device, (x,), backward)


# -- convolution ---------------------------------------------------------------------------------
@_op("conv2d")
def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntPair = (1, 1),
           padding: IntPair = (0, 0), dilation: IntPair = (1, 1), groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation, as every framework computes it) of an NCHW batch.

    Computed as im2col + one GEMM per group: the padded input is viewed (``as_strided``, no
    copy) as ``(N, C, kH, kW, H_out, W_out)`` patches, laid out once as a
    ``(groups, C/groups*kH*kW, N*H_out*W_out)`` column matrix and multiplied by the
    ``(groups, C_out/groups, C/groups*kH*kW)`` weight matrix. The backward pass reuses the
    columns for ``dweight`` and scatters ``dcolumns`` back with one strided add per kernel
    tap (col2im), which accumulates where windows overlap.

    Args:
        x: input ``(N, C_in, H, W)``.
        weight: filters ``(C_out, C_in/groups, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride, padding, dilation: ints or ``(h, w)`` pairs, in pixels; padding is zeros on
            both sides.
        groups: split channels into this many independent convolutions; ``C_in`` and
            ``C_out`` must both be divisible by it.

    Returns:
        ``(N, C_out, H_out, W_out)`` with ``H_out = (H + 2*pad_h - dil_h*(kH-1) - 1) // stride_h + 1``
        (likewise ``W_out``).

    Raises:
        ValueError: wrong ranks, channel counts that do not match ``groups`` and ``weight``,
            a bias of the wrong shape, or a kernel larger than the padded input.
    """
    xp = x._device.xp
    sh, sw = _pair("stride", stride, 1)
    ph, pw = _pair("padding", padding, 0)
    dh, dw = _pair("dilation", dilation, 1)
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"expected x (N, C, H, W) and weight (C_out, C_in/groups, kH, kW), "
                         f"got {x.ndim}-D x and {weight.ndim}-D weight")
    n, c, h, w = x.shape
    c_out, c_g, kh, kw = weight.shape
    if groups < 1 or c % groups or c_out % groups:
        raise ValueError(f"groups={groups} must be >= 1 and divide both C_in={c} and C_out={c_out}")
    if c_g * groups != c:
        raise ValueError(f"weight expects {c_g * groups} input channels ({c_g} per group x {groups} groups), "
                         f"but x has {c}")
    if bias is not None and bias.shape != (c_out,):
        raise ValueError(f"bias must have shape ({c_out},), got {bias.shape}")
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"kernel {kh}x{kw} (dilation {dh}x{dw}) is larger than the padded input "
                         f"{h + 2 * ph}x{w + 2 * pw}")

    data, wdata = x._data, weight._data
    xpad = xp.pad(data, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else data
    s_n, s_c, s_h, s_w = xpad.strides
    patches = _as_strided(xp)(
        xpad, shape=(n, c, kh, kw, ho, wo), strides=(s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw))
    k = c_g * kh * kw
    # (C, kH, kW, N, H_out, W_out) -> (groups, K, N*L): the one copy of the forward pass.
    cols = patches.transpose(1, 2, 3, 0, 4, 5).reshape(groups, k, n * ho * wo)
    w_mat = wdata.reshape(groups, c_out // groups, k)
    out = xp.matmul(w_mat, cols).reshape(c_out, n, ho, wo).transpose(1, 0, 2, 3)
    if bias is not None:
        out = out + bias._data.reshape(1, c_out, 1, 1)
    out = xp.ascontiguousarray(out)

    def backward(g: Any) -> tuple[Any, ...]:
        g_mat = g.transpose(1, 0, 2, 3).reshape(groups, c_out // groups, n * ho * wo)
        gw = gx = gb = None
        if weight._requires_grad():
            gw = xp.matmul(g_mat, cols.transpose(0, 2, 1)).reshape(weight.shape)
        if x._requires_grad():
            dcols = xp.matmul(w_mat.transpose(0, 2, 1), g_mat).reshape(c, kh, kw, n, ho, wo)
            gpad = xp.zeros(xpad.shape, dtype=dcols.dtype)
            for i in range(kh):  # col2im: one strided add per kernel tap
                for j in range(kw):
                    _window(gpad, i, j, (dh, dw), (sh, sw), (ho, wo))[...] += dcols[:, i, j].transpose(1, 0, 2, 3)
            gx = gpad[:, :, ph: ph + h, pw: pw + w]
        if bias is not None and bias._requires_grad():
            gb = g.sum(axis=(0, 2, 3))
        return (gx, gw) if bias is None else (gx, gw, gb)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return _result("conv2d", out, x._device, parents, backward)


# -- pooling -------------------------------------------------------------------------------------
def _pool_geometry(name: str, x: Tensor, pool_size: IntPair, strides: IntPair | None, padding: IntPair,
                   ceil_mode: bool) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Validate pooling arguments; return kernel, stride, padding and output ``(H_out, W_out)``."""
    if x.ndim != 4:
        raise ValueError(f"{name} expects an (N, C, H, W) input, got shape {x.shape}")
    kernel = _pair("pool_size", pool_size, 1)
    stride = _pair("strides", kernel if strides is None else strides, 1)
    pad = _pair("padding", padding, 0)
    out = []
    for size, k, s, p in zip(x.shape[2:], kernel, stride, pad):
        span = size + 2 * p - k
        if span < 0:
            raise ValueError(f"pool_size {kernel} is larger than the padded input {tuple(x.shape[2:])} "
                             f"+ 2*{pad}")
        # MXNet's 'valid' (floor) and 'full' (ceil) pooling conventions.
        out.append(1 + (math.ceil(span / s) if ceil_mode else span // s))
    return kernel, stride, pad, (out[0], out[1])


def _pad_for_pool(xp: Any, data: Any, pad: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                  out_hw: tuple[int, int], value: Any) -> Any:
    """Pad by ``pad`` on both sides, and further at the bottom/right for ceil-mode windows."""
    h, w = data.shape[2:]
    extra_h = max(0, (out_hw[0] - 1) * stride[0] + kernel[0] - (h + 2 * pad[0]))
    extra_w = max(0, (out_hw[1] - 1) * stride[1] + kernel[1] - (w + 2 * pad[1]))
    if not (pad[0] or pad[1] or extra_h or extra_w):
        return data
    widths = ((0, 0), (0, 0), (pad[0], pad[0] + extra_h), (pad[1], pad[1] + extra_w))
    return xp.pad(data, widths, constant_values=value)


@_op("max_pool2d")
def max_pool2d(x: Tensor, pool_size: IntPair = (2, 2), strides: IntPair | None = None,
               padding: IntPair = (0, 0), ceil_mode: bool = False) -> Tensor:
    """Maximum over each ``pool_size`` window of an NCHW batch.

    Padding never wins the maximum (it is ``-inf``, or the dtype's minimum for integers).
    The gradient of a window goes to its maximum element (the first in row-major order when
    tied, as MXNet); an element that is the maximum of several overlapping windows receives
    the sum of their gradients.

    Args:
        x: input ``(N, C, H, W)``.
        pool_size: window ``(kH, kW)`` or an int.
        strides: step between windows; ``None`` means ``pool_size`` (Gluon's default).
        padding: implicit padding on both sides, in pixels.
        ceil_mode: round the output size up (MXNet's ``pooling_convention='full'``), so
            windows may hang over the bottom/right edge.

    Returns:
        ``(N, C, H_out, W_out)`` with ``H_out = 1 + floor_or_ceil((H + 2*pad - kH) / stride)``.

    Raises:
        ValueError: ``x`` is not 4-D, or a window is larger than the padded input.
    """
    xp = x._device.xp
    kernel, stride, pad, out_hw = _pool_geometry("max_pool2d", x, pool_size, strides, padding, ceil_mode)
    data = x._data
    low = -np.inf if np.issubdtype(data.dtype, np.floating) else np.iinfo(data.dtype).min
    xpad = _pad_for_pool(xp, data, pad, kernel, stride, out_hw, low)
    kh, kw = kernel
    out = arg = None
    for i in range(kh):  # running max over the kernel taps; strict '>' keeps the first maximum
        for j in range(kw):
            v = _window(xpad, i, j, (1, 1), stride, out_hw)
            if out is None:
                out = v.copy()
                arg = xp.zeros(v.shape, dtype=np.int32)
            else:
                better = v > out
                out = xp.where(better, v, out)
                arg = xp.where(better, np.int32(i * kw + j), arg)
    h, w = data.shape[2:]

    def backward(g: Any) -> tuple[Any]:
        gpad = xp.zeros(xpad.shape, dtype=g.dtype)
        zero = xp.zeros((), dtype=g.dtype)
        for i in range(kh):
            for j in range(kw):
                _window(gpad, i, j, (1, 1), stride, out_hw)[...] += xp.where(arg == i * kw + j, g, zero)
        return (gpad[:, :, pad[0]: pad[0] + h, pad[1]: pad[1] + w],)

    return _result("max_pool2d", out, x._device, (x,), backward)


@_op("avg_pool2d")
def avg_pool2d(x: Tensor, pool_size: IntPair = (2, 2), strides: IntPair | None = None,
               padding: IntPair = (0, 0), ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over each ``pool_size`` window of an NCHW batch (MXNet's divisor rules).

    With ``count_include_pad`` (the default) a window is divided by the number of its taps
    inside the *padded* input (``H + 2*pad``), so zero padding counts but the extra margin a
    ceil-mode window hangs over does not; otherwise by the number of taps inside the
    unpadded input.

    Args:
        x: floating-point input ``(N, C, H, W)``.
        pool_size, strides, padding, ceil_mode: as in :func:`max_pool2d`.
        count_include_pad: whether padding counts in the divisor.

    Returns:
        ``(N, C, H_out, W_out)``, sizes as in :func:`max_pool2d`.

    Raises:
        TypeError: integer input. ValueError: as :func:`max_pool2d`.
    """
    _check_float("avg_pool2d", x)
    xp = x._device.xp
    kernel, stride, pad, out_hw = _pool_geometry("avg_pool2d", x, pool_size, strides, padding, ceil_mode)
    data = x._data
    h, w = data.shape[2:]
    xpad = _pad_for_pool(xp, data, pad, kernel, stride, out_hw, 0)
    kh, kw = kernel

    # Divisor per output position (host-side, tiny): taps inside [0, size+pad) or [0, size).
    def counts(size: int, k: int, s: int, p: int, n_out: int) -> np.ndarray:
        start = np.arange(n_out) * s - p
        end = np.minimum(start + k, size + p)
        if count_include_pad:
            return end - start
        return np.minimum(end, size) - np.maximum(start, 0)

    divisor = np.outer(counts(h, kh, stride[0], pad[0], out_hw[0]), counts(w, kw, stride[1], pad[1], out_hw[1]))
    inv = xp.asarray(1.0 / np.maximum(divisor, 1), dtype=data.dtype)
    total = xp.zeros((data.shape[0], data.shape[1]) + out_hw, dtype=data.dtype)
    for i in range(kh):
        for j in range(kw):
            total += _window(xpad, i, j, (1, 1), stride, out_hw)
    out = total * inv

    def backward(g: Any) -> tuple[Any]:
        gs = g * inv
        gpad = xp.zeros(xpad.shape, dtype=g.dtype)
        for i in range(kh):
            for j in range(kw):
                _window(gpad, i, j, (1, 1), stride, out_hw)[...] += gs
        return (gpad[:, :, pad[0]: pad[0] + h, pad[1]: pad[1] + w],)

    return _result("avg_pool2d", out, x._device, (x,), backward)


def global_avg_pool2d(x: Tensor) -> Tensor:
    """Mean over ``H`` and ``W``: ``(N, C, H, W) -> (N, C, 1, 1)``.

    Raises:
        ValueError: ``x`` is not 4-D.
    """
    if x.ndim != 4:
        raise ValueError(f"global_avg_pool2d expects an (N, C, H, W) input, got shape {x.shape}")
    return mean(x, axis=(2, 3), keepdims=True)


def global_max_pool2d(x: Tensor) -> Tensor:
    """Maximum over ``H`` and ``W``: ``(N, C, H, W) -> (N, C, 1, 1)``; tied maxima share the gradient.

    Raises:
        ValueError: ``x`` is not 4-D.
    """
    if x.ndim != 4:
        raise ValueError(f"global_max_pool2d expects an (N, C, H, W) input, got shape {x.shape}")
    return _max(x, axis=(2, 3), keepdims=True)


# -- dropout -------------------------------------------------------------------------------------
@_op("dropout")
def dropout(x: Tensor, rate: float = 0.5, axes: Sequence[int] = (), training: bool | None = None) -> Tensor:
    """Inverted dropout: zero each element with probability ``rate``, scale survivors by ``1/(1-rate)``.

    The mask is drawn from the device's stream (:mod:`mxlite.random`), so ``mx.random.seed``
    makes it reproducible. Outside training, or with ``rate == 0``, ``x`` itself is returned.

    Args:
        x: floating-point tensor of any shape.
        rate: drop probability in ``[0, 1]`` (``1`` drops everything).
        axes: axes along which one mask value is shared (MXNet's variational dropout): the
            mask has length 1 on these axes and is broadcast over them.
        training: apply dropout; ``None`` follows ``autograd.is_training()`` (true inside
            ``record()``), as MXNet's ``Dropout(mode='training')``.

    Returns:
        A tensor of ``x``'s shape and dtype; the gradient is ``mask * 1/(1-rate)``.

    Raises:
        ValueError: ``rate`` outside ``[0, 1]`` or an axis out of range. TypeError: integer input.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    _check_float("dropout", x)
    if training is None:
        training = _state.is_training()
    if not training or rate == 0.0:
        return x
    xp = x._device.xp
    shared = {_axis(a, x.ndim) for a in axes}
    shape = tuple(1 if i in shared else n for i, n in enumerate(x.shape))
    gen = _random._generator(x._device)
    # float32 uniforms: half the memory and time of float64, ample resolution for a Bernoulli draw.
    u = gen.random(shape, dtype=np.float32) if xp is np else gen.random_sample(shape, dtype=np.float32)
    scale = 0.0 if rate == 1.0 else 1.0 / (1.0 - rate)
    mask = ((u >= rate) * scale).astype(x.dtype)
    out = x._data * mask
    return _result("dropout", out, x._device, (x,), lambda g: (g * mask,))


# -- embedding, take, pick -----------------------------------------------------------------------
def _clip_indices(xp: Any, indices: Any, n: int, mode: str) -> Any:
    """Integer copy of ``indices`` mapped into ``[0, n)`` by MXNet's ``'clip'`` or ``'wrap'``, or checked.

    ``indices`` is a Tensor (already on the op's device) or a list / NumPy array (moved there).
    """
    idx = indices._data if isinstance(indices, Tensor) else xp.asarray(np.asarray(indices))
    if np.issubdtype(idx.dtype, np.floating):
        idx = xp.rint(idx)  # MXNet accepts float ids (labels, token ids stored as float32)
    idx = idx.astype(np.int64)
    if mode == "clip":
        return xp.clip(idx, 0, n - 1)
    if mode == "wrap":
        return idx % n
    if mode == "raise":
        if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise IndexError(f"indices must lie in [-{n}, {n}), got range [{int(idx.min())}, {int(idx.max())}]")
        return idx % n
    raise ValueError(f"mode must be 'clip', 'wrap' or 'raise', got {mode!r}")


@_op("embedding")
def embedding(indices: Tensor | Any, weight: Tensor, sparse_grad: bool = False) -> Tensor:
    """Look up rows of ``weight``: ``out[..., :] = weight[indices[...], :]``.

    Ids outside ``[0, input_dim)`` are clipped into range (MXNet's behaviour; no device sync
    is spent checking them). ``indices`` gets no gradient.

    Args:
        indices: integer or float ids, any shape (a Tensor on ``weight``'s device, or a list /
            NumPy array).
        weight: ``(input_dim, output_dim)`` table (any trailing shape is allowed).
        sparse_grad: return the weight gradient as a
            :class:`~mxlite.sparse.RowSparseTensor` holding only the looked-up rows (when
            ``weight`` is a leaf), instead of a dense ``weight``-shaped array.

    Returns:
        ``indices.shape + weight.shape[1:]``.

    Raises:
        ValueError: ``weight`` is 0-D or empty along its first axis.
    """
    xp = weight._device.xp
    if weight.ndim < 1 or weight.shape[0] == 0:
        raise ValueError(f"weight must have at least one row, got shape {weight.shape}")
    idx = _clip_indices(xp, indices, weight.shape[0], "clip")
    out = weight._data[idx]
    row_shape = weight.shape[1:]

    def backward(g: Any) -> tuple[Any]:
        rows = g.reshape((-1,) + row_shape)
        # A RowSparseTensor can only go to a leaf: the engine hands raw arrays to inner nodes.
        if sparse_grad and weight._node is None:
            return (_sparse.from_rows(rows, idx.reshape(-1), weight.shape, weight._device),)
        gw = xp.zeros(weight.shape, dtype=g.dtype)
        _scatter_add(xp, gw, idx.reshape(-1), rows)
        return (gw,)

    return _result("embedding", out, weight._device, (weight,), backward)


@_op("take")
def take(a: Tensor, indices: Tensor | Any, axis: int = 0, mode: str = "clip") -> Tensor:
    """Entries of ``a`` at ``indices`` along ``axis`` (MXNet's ``take``); differentiable in ``a``.

    Args:
        a: source tensor.
        indices: integer or float ids, any shape (a Tensor, list or NumPy array).
        axis: the axis of ``a`` indexed.
        mode: out-of-range ids are ``'clip'``-ped (MXNet's default), ``'wrap'``-ped around, or
            ``'raise'`` an IndexError (negative ids then count from the end).

    Returns:
        ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``. Repeated ids accumulate in
        ``a``'s gradient; ``indices`` gets none.

    Raises:
        ValueError: ``axis`` out of range, ``a`` empty along it, or an unknown ``mode``.
        IndexError: ``mode='raise'`` and an id is out of range.
    """
    xp = a._device.xp
    axis = _axis(axis, a.ndim)
    if a.shape[axis] == 0:
        raise ValueError(f"cannot take from an empty axis {axis} of shape {a.shape}")
    idx = _clip_indices(xp, indices, a.shape[axis], mode)
    out = xp.take(a._data, idx, axis=axis)
    key = (slice(None),) * axis + (idx,)

    def backward(g: Any) -> tuple[Any]:
        ga = xp.zeros(a.shape, dtype=g.dtype)
        _scatter_add(xp, ga, key, g)
        return (ga,)

    return _result("take", out, a._device, (a,), backward)


@_op("pick")
def pick(data: Tensor, index: Tensor | Any, axis: int = -1, keepdims: bool = False) -> Tensor:
    """One entry of ``data`` per position along ``axis``: ``out[i] = data[i, index[i]]`` for ``axis=1``.

    Ids are clipped into range, as MXNet's default ``mode='clip'``.

    Args:
        data: source tensor.
        index: integer or float ids of shape ``data.shape`` without ``axis`` (or with it as 1,
            or any shape with that many elements, e.g. a ``(N, 1)`` label column).
        axis: the axis picked from.
        keepdims: keep ``axis`` as length 1 in the result.

    Returns:
        ``data.shape`` without ``axis`` (or with it as 1 when ``keepdims``); ``index`` gets no
        gradient.

    Raises:
        ValueError: ``index`` has the wrong number of elements.
    """
    xp = data._device.xp
    axis = _axis(axis, data.ndim)
    kept = data.shape[:axis] + (1,) + data.shape[axis + 1:]
    index_shape = np.shape(index)
    if int(np.prod(index_shape)) != int(np.prod(kept)):
        expected = data.shape[:axis] + data.shape[axis + 1:]
        raise ValueError(f"index must have shape {expected} (data's without axis {axis}), got {index_shape}")
    n = data.shape[axis]
    idx = _clip_indices(xp, index, n, "clip").reshape(kept)
    picked = xp.take_along_axis(data._data, idx, axis=axis)
    out = picked if keepdims else picked.reshape(data.shape[:axis] + data.shape[axis + 1:])

    def backward(g: Any) -> tuple[Any]:
        positions = xp.arange(n).reshape((n,) + (1,) * (data.ndim - axis - 1))
        hit = idx == positions  # one-hot along axis, broadcast to data's shape
        return (xp.where(hit, g.reshape(kept), xp.zeros((), dtype=g.dtype)),)

    return _result("pick", out, data._device, (data,), backward)


# -- normalisation -------------------------------------------------------------------------------
def _normalize_backward(g: Any, xhat: Any, inv_std: Any, scale: Any, axes: tuple[int, ...]) -> Any:
    """Gradient of ``scale * (x - mean(x)) * inv_std`` w.r.t. ``x``, statistics taken over ``axes``."""
    dxhat = g * scale
    return inv_std * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                      - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))


@_op("batch_norm")
def batch_norm(x: Tensor, gamma: Tensor, beta: Tensor, running_mean: Tensor, running_var: Tensor,
               axis: int = 1, eps: float = 1e-5, momentum: float = 0.9, training: bool | None = True,
               use_global_stats: bool = False, fix_gamma: bool = False) -> Tensor:
    """Batch normalisation: ``gamma * (x - mean) / sqrt(var + eps) + beta`` per channel.

    In training (and without ``use_global_stats``) the mean and the biased variance are taken
    over every axis but ``axis`` of this batch, and the running statistics are updated in
    place, outside the graph: ``running = momentum * running + (1 - momentum) * batch``
    (MXNet uses the biased batch variance here too; PyTorch the unbiased one). Otherwise the
    running statistics normalise and stay unchanged. Statistics are accumulated in at least
    float32 (float16 inputs); the output has ``x``'s dtype.

    Args:
        x: floating-point input, channels on ``axis`` (``(N, C, ...)`` by default).
        gamma, beta: scale and shift, shape ``(C,)``.
        running_mean, running_var: moving statistics, shape ``(C,)``; get no gradient.
        axis: the channel axis.
        eps: added to the variance, in the units of ``x`` squared.
        momentum: weight of the old running value.
        training: use batch statistics; ``None`` follows ``autograd.is_training()``.
        use_global_stats: normalise with the running statistics even when training.
        fix_gamma: use 1 for ``gamma`` (which then gets a zero gradient), as MXNet.

    Returns:
        A tensor of ``x``'s shape and dtype; gradients flow to ``x``, ``gamma`` and ``beta``.

    Raises:
        ValueError: a parameter's shape is not ``(C,)``. TypeError: integer input.
    """
    _check_float("batch_norm", x)
    xp = x._device.xp
    axis = _axis(axis, x.ndim)
    c = x.shape[axis]
    for name, t in (("gamma", gamma), ("beta", beta), ("running_mean", running_mean), ("running_var", running_var)):
        if t.shape != (c,):
            raise ValueError(f"{name} must have shape ({c},) for {c} channels on axis {axis}, got {t.shape}")
    if training is None:
        training = _state.is_training()
    acc = np.promote_types(x.dtype, np.float32)
    red = tuple(i for i in range(x.ndim) if i != axis)
    bshape = tuple(c if i == axis else 1 for i in range(x.ndim))
    data = x._data.astype(acc, copy=False)
    batch_stats = training and not use_global_stats
    if batch_stats:
        mu = data.mean(axis=red, keepdims=True)
        var = ((data - mu) ** 2).mean(axis=red, keepdims=True)
        for t, new in ((running_mean, mu), (running_var, var)):
            t._data[...] = (momentum * t._data + (1.0 - momentum) * new.reshape(c)).astype(t.dtype)
    else:
        mu = running_mean._data.astype(acc).reshape(bshape)
        var = running_var._data.astype(acc).reshape(bshape)
    inv_std = 1.0 / xp.sqrt(var + eps)
    xhat = (data - mu) * inv_std
    scale = xp.ones(bshape, dtype=acc) if fix_gamma else gamma._data.astype(acc).reshape(bshape)
    out = (xhat * scale + beta._data.astype(acc).reshape(bshape)).astype(x.dtype, copy=False)

    def backward(g: Any) -> tuple[Any, ...]:
        g = g.astype(acc, copy=False)
        if batch_stats:
            gx = _normalize_backward(g, xhat, inv_std, scale, red)
        else:
            gx = g * scale * inv_std
        ggamma = xp.zeros((c,), dtype=acc) if fix_gamma else (g * xhat).sum(axis=red)
        gbeta = g.sum(axis=red)
        return (gx.astype(x.dtype, copy=False), ggamma.astype(gamma.dtype, copy=False),
                gbeta.astype(beta.dtype, copy=False), None, None)

    return _result("batch_norm", out, x._device, (x, gamma, beta, running_mean, running_var), backward)


@_op("layer_norm")
def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, axis: int = -1, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over ``axis``: ``gamma * (x - mean) / sqrt(var + eps) + beta``.

    Mean and biased variance are taken per position over ``axis`` alone (MXNet's
    ``LayerNorm``), in at least float32; the output has ``x``'s dtype.

    Args:
        x: floating-point input of any shape.
        gamma, beta: scale and shift of shape ``(x.shape[axis],)``.
        axis: the normalised axis.
        eps: added to the variance, in the units of ``x`` squared.

    Returns:
        A tensor of ``x``'s shape and dtype; gradients flow to ``x``, ``gamma`` and ``beta``.

    Raises:
        ValueError: ``gamma``/``beta`` have the wrong shape. TypeError: integer input.
    """
    _check_float("layer_norm", x)
    xp = x._device.xp
    axis = _axis(axis, x.ndim)
    c = x.shape[axis]
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t.shape != (c,):
            raise ValueError(f"{name} must have shape ({c},) to match axis {axis} of x, got {t.shape}")
    acc = np.promote_types(x.dtype, np.float32)
    bshape = tuple(c if i == axis else 1 for i in range(x.ndim))
    others = tuple(i for i in range(x.ndim) if i != axis)
    data = x._data.astype(acc, copy=False)
    mu = data.mean(axis=axis, keepdims=True)
    inv_std = 1.0 / xp.sqrt(((data - mu) ** 2).mean(axis=axis, keepdims=True) + eps)
    xhat = (data - mu) * inv_std
    scale = gamma._data.astype(acc).reshape(bshape)
    out = (xhat * scale + beta._data.astype(acc).reshape(bshape)).astype(x.dtype, copy=False)

    def backward(g: Any) -> tuple[Any, Any, Any]:
        g = g.astype(acc, copy=False)
        gx = _normalize_backward(g, xhat, inv_std, scale, (axis,))
        return (gx.astype(x.dtype, copy=False), (g * xhat).sum(axis=others).astype(gamma.dtype, copy=False),
                g.sum(axis=others).astype(beta.dtype, copy=False))

    return _result("layer_norm", out, x._device, (x, gamma, beta), backward)


# -- dense ---------------------------------------------------------------------------------------
@_op("fully_connected")
def fully_connected(x: Tensor, weight: Tensor, bias: Tensor | None = None, flatten: bool = True) -> Tensor:
    """``y = x @ weight.T + bias`` (MXNet's ``FullyConnected``), as one GEMM over all rows.

    Args:
        x: input. With ``flatten`` every axis but the first is collapsed,
            ``(N, d1, ..., dk) -> (N, d1*...*dk)``; without it the product applies to the last
            axis and the leading axes are kept.
        weight: ``(units, in_units)``.
        bias: optional ``(units,)``.
        flatten: see ``x``.

    Returns:
        ``(N, units)`` with ``flatten``, else ``x.shape[:-1] + (units,)``.

    Raises:
        ValueError: ``weight`` is not 2-D, ``in_units`` disagrees with ``x``, or the bias shape
            is wrong.
    """
    if weight.ndim != 2:
        raise ValueError(f"weight must be (units, in_units), got shape {weight.shape}")
    units, in_units = weight.shape
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension")
    if flatten:
        lead = x.shape[:1]
        features = int(np.prod(x.shape[1:]))
    else:
        lead = x.shape[:-1]
        features = x.shape[-1]
    if features != in_units:
        what = "x flattened to (N, {})" if flatten else "x's last axis has {}"
        raise ValueError(f"weight expects {in_units} input features, but {what.format(features)} "
                         f"(x shape {x.shape})")
    if bias is not None and bias.shape != (units,):
        raise ValueError(f"bias must have shape ({units},), got {bias.shape}")
    x2 = x._data.reshape(-1, in_units)
    wdata = weight._data
    out2 = x2 @ wdata.T
    if bias is not None:
        out2 = out2 + bias._data
    out = out2.reshape(lead + (units,))
    in_shape = x.shape

    def backward(g: Any) -> tuple[Any, ...]:
        g2 = g.reshape(-1, units)
        gx = (g2 @ wdata).reshape(in_shape) if x._requires_grad() else None
        gw = g2.T @ x2 if weight._requires_grad() else None
        if bias is None:
            return gx, gw
        return gx, gw, g2.sum(axis=0)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return _result("fully_connected", out, x._device, parents, backward)
