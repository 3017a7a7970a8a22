"""Layer-level primitives, each with its backward beside its forward.

Softmax, dropout, embedding/take/pick, batch and layer normalisation and the fully connected
product; convolution and pooling live in :mod:`.conv` and are re-exported here.

Like ``core.py`` every function takes and returns
:class:`Tensor` objects, computes through the device's ``xp`` (NumPy on CPU devices, CuPy on
GPUs), and inside ``autograd.record()`` records one closure returning its inputs' gradients
as raw arrays. Each op validates its shapes up front and says what it expected and what it
got; any error raised inside names the op and its inputs (the ``_op`` decorator).

Layouts and semantics follow Apache MXNet's operators (``Convolution``, ``Deconvolution``, ``Pooling``,
``Dropout``, ``Embedding``, ``take``, ``pick``, ``BatchNorm``, ``LayerNorm``,
``FullyConnected``); where mxlite differs the function's docstring says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograd import is_training
from ..autograd.tensor import Tensor, grad_out, op_result
from ..device import Device, blas, device_of
from ..device.copy import copy_between
from . import _loss_kernels as _lk
from . import _norm_kernels as _nk
from . import _philox
from . import random as _random
from . import sparse as _sparse
from .conv import (  # noqa: F401 - re-exported: mx.nn_ops holds every layer primitive
    avg_pool,
    avg_pool2d,
    conv,
    conv2d,
    conv_transpose,
    global_avg_pool,
    global_avg_pool2d,
    global_max_pool,
    global_max_pool2d,
    max_pool,
    max_pool2d,
)
from .core import _check_float, _op, _scatter_add

__all__ = [
    "softmax", "log_softmax", "softmax_cross_entropy", "conv", "conv2d", "conv_transpose", "max_pool", "avg_pool",
    "max_pool2d",
    "avg_pool2d", "global_avg_pool", "global_max_pool", "global_avg_pool2d", "global_max_pool2d",
    "dropout", "embedding", "take", "pick", "batch_norm", "layer_norm",
    "fully_connected",
]



# -- helpers -------------------------------------------------------------------------------------
def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


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
    xp = x.device.xp
    axis = _axis(axis, x.ndim)
    d = x._data
    e = xp.exp(d - d.max(axis=axis, keepdims=True))
    out = e / e.sum(axis=axis, keepdims=True)

    def backward(g: Any) -> tuple[Any]:
        # d softmax: y * (g - sum(g * y))
        return (out * (g - (g * out).sum(axis=axis, keepdims=True)),)

    return op_result("softmax", out, x.device, (x,), backward)


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
    xp = x.device.xp
    axis = _axis(axis, x.ndim)
    d = x._data
    shifted = d - d.max(axis=axis, keepdims=True)
    out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))

    def backward(g: Any) -> tuple[Any]:
        # d log_softmax: g - softmax * sum(g)
        return (g - xp.exp(out) * g.sum(axis=axis, keepdims=True),)

    return op_result("log_softmax", out, x.device, (x,), backward)


@_op("softmax_cross_entropy")
def softmax_cross_entropy(pred: Tensor, label: Tensor | Any, sparse_label: bool = True) -> Tensor:
    """Cross-entropy of a softmax over the last axis, per row: ``-log_softmax(pred)[label]``, or with
    dense labels ``-sum(label * log_softmax(pred))``, computed in one pass per row and direction
    (``kernels/softmax_ce.cu``; :mod:`._loss_kernels`).

    Args:
        pred: float32 or float64 logits, classes on the last axis.
        label: with ``sparse_label`` one class id per row (integer or float, any shape with
            ``pred.size // classes`` elements; ids out of range are clipped, as :func:`pick`);
            otherwise a distribution per row, ``pred``'s shape and dtype.
        sparse_label: see ``label``.

    Returns:
        ``pred.shape[:-1] + (1,)`` in ``pred``'s dtype; the gradient flows to ``pred``:
        ``g * (softmax(pred) - one_hot(label))`` (dense: ``g * (softmax(pred) * sum(label) - label)``),
        and to a dense ``label`` tensor: ``-g * log_softmax(pred)``; class ids get none.

    Raises:
        TypeError: ``pred`` is not float32 or float64. ValueError: ``label`` has the wrong size.
    """
    xp = pred.device.xp
    if not _lk.supported(pred.dtype):
        raise TypeError(f"softmax_cross_entropy takes float32 or float64 logits, got {pred.dtype}; "
                        "use -pick(log_softmax(pred), label) for other dtypes")
    if pred.ndim == 0:
        raise ValueError("pred must have a class axis, got a 0-D tensor")
    classes = pred.shape[-1]
    if classes == 0:
        raise ValueError(f"pred must have at least one class on its last axis, got shape {pred.shape}")
    rows = pred.size // classes
    out_shape = pred.shape[:-1] + (1,)
    x = xp.ascontiguousarray(pred._data).reshape(rows, classes)
    if sparse_label:
        if int(np.prod(np.shape(label))) != rows:
            raise ValueError(f"label must have one class id per row of pred {pred.shape}: {rows} ids, "
                             f"got shape {np.shape(label)}")
        ids = xp.ascontiguousarray(_clip_indices(xp, label, classes, "clip", pred.device).reshape(rows))
        dense = None
    else:
        label = label if isinstance(label, Tensor) else Tensor(_device_array(label, pred.device), pred.device)
        if label.size != pred.size or label.dtype != pred.dtype:
            raise ValueError(f"a dense label must have pred's {pred.size} elements ({pred.shape}) and dtype "
                             f"{pred.dtype}, got shape {label.shape} and dtype {label.dtype}")
        ids, dense = None, xp.ascontiguousarray(label._data).reshape(rows, classes)
    loss, saved = _lk.forward(xp, x, ids, dense)

    def backward(g: Any) -> tuple[Any, ...]:
        g1 = xp.ascontiguousarray(g.reshape(rows).astype(pred.dtype, copy=False))
        gx = _lk.backward(xp, g1, x, ids, dense, saved).reshape(pred.shape)
        if sparse_label:
            return (gx,)
        glabel = None
        if label._requires_grad():  # -g * log_softmax(pred), rarely wanted: composed
            glabel = (-g1[:, None] * ((x - saved[:, :1]) - saved[:, 1:2])).reshape(pred.shape)
        return gx, glabel

    parents = (pred,) if sparse_label else (pred, label)
    return op_result("softmax_cross_entropy", loss.reshape(out_shape), pred.device, parents, backward)


# -- dropout -------------------------------------------------------------------------------------
@_op("dropout")
def dropout(x: Tensor, rate: float = 0.5, axes: Sequence[int] = (), training: bool | None = None) -> Tensor:
    """Inverted dropout: zero each element with probability ``rate``, scale survivors by ``1/(1-rate)``.

    The mask is drawn from the device's stream (:mod:`mxlite.ops.random` on CPU devices; on GPUs
    a counter-based generator with its position on the device, :mod:`mxlite.ops._philox`, which
    CUDA graphs can replay), so ``mx.random.seed`` makes it reproducible. Outside training, or with
    ``rate == 0``, ``x`` itself is returned.

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
        training = is_training()
    if not training or rate == 0.0:
        return x
    shared = {_axis(a, x.ndim) for a in axes}
    shape = tuple(1 if i in shared else n for i, n in enumerate(x.shape))
    mask = _dropout_mask(x.device, shape, rate, x.dtype)
    out = x._data * mask
    # The mask rides along as a constant parent, so the differentiable backward (higher_order) finds it.
    return op_result("dropout", out, x.device, (x, Tensor(mask, x.device)), lambda g: (g * mask, None))


def _dropout_mask(device: Any, shape: tuple[int, ...], rate: float, dtype: Any) -> Any:
    """:func:`dropout`'s mask, an array on ``device``: 0 with probability ``rate``, else ``1/(1-rate)``.

    Drawn from the device's stream, as :func:`dropout` draws it (the same draws in the same order give
    the same masks: the recurrent stack draws its layers' masks with it).
    """
    if device.xp is np:
        # float32 uniforms: half the memory and time of float64, ample resolution for a Bernoulli draw.
        u = _random._generator(device).random(shape, dtype=np.float32)
        scale = 0.0 if rate == 1.0 else 1.0 / (1.0 - rate)
        return ((u >= rate) * scale).astype(dtype)
    # GPUs: Philox with its offset on the device, which a CUDA graph can replay (ops/_philox.py)
    return _philox.dropout_mask(device, shape, rate, dtype)


# -- embedding, take, pick -----------------------------------------------------------------------
def _device_array(values: Any, device: Device) -> Any:
    """``values`` (a Tensor, a NumPy or CuPy array of any device, a list) as an array on ``device``, no copy when
    already there: index arrays given raw (``mx.nd.take(a, ids.array)``) may live anywhere."""
    if isinstance(values, Tensor):
        return copy_between(values._data, values.device, device, copy=False)
    if hasattr(values, "__cuda_array_interface__"):
        return copy_between(values, device_of(values), device, copy=False)
    return copy_between(np.asarray(values), Device("cpu", 0), device, copy=False)


def _clip_indices(xp: Any, indices: Any, n: int, mode: str, device: Device) -> Any:
    """Integer copy of ``indices`` mapped into ``[0, n)`` by MXNet's ``'clip'`` or ``'wrap'``, or checked.

    ``indices`` is a Tensor, a list or a NumPy or CuPy array; it is moved onto ``device`` (the op's) first.
    """
    idx = _device_array(indices, device)
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
            :class:`~mxlite.ops.sparse.RowSparseTensor` holding only the looked-up rows (when
            ``weight`` is a leaf), instead of a dense ``weight``-shaped array.

    Returns:
        ``indices.shape + weight.shape[1:]``.

    Raises:
        ValueError: ``weight`` is 0-D or empty along its first axis.
    """
    xp = weight.device.xp
    if weight.ndim < 1 or weight.shape[0] == 0:
        raise ValueError(f"weight must have at least one row, got shape {weight.shape}")
    idx = _clip_indices(xp, indices, weight.shape[0], "clip", weight.device)
    out = weight._data[idx]
    row_shape = weight.shape[1:]

    def backward(g: Any) -> tuple[Any]:
        rows = g.reshape((-1,) + row_shape)
        # A RowSparseTensor can only go to a leaf: the engine hands raw arrays to inner nodes.
        if sparse_grad and weight._node is None:
            return (_sparse.from_rows(rows, idx.reshape(-1), weight.shape, weight.device),)
        gw = grad_out(weight, g.dtype)  # the arena's gradient view when the engine allows
        if gw is None:
            gw = xp.zeros(weight.shape, dtype=g.dtype)
        else:
            gw.fill(0)
        _scatter_add(xp, gw, idx.reshape(-1), rows)
        return (gw,)

    return op_result("embedding", out, weight.device, (weight,), backward)


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
    xp = a.device.xp
    axis = _axis(axis, a.ndim)
    if a.shape[axis] == 0:
        raise ValueError(f"cannot take from an empty axis {axis} of shape {a.shape}")
    idx = _clip_indices(xp, indices, a.shape[axis], mode, a.device)
    out = xp.take(a._data, idx, axis=axis)
    key = (slice(None),) * axis + (idx,)

    def backward(g: Any) -> tuple[Any]:
        ga = xp.zeros(a.shape, dtype=g.dtype)
        _scatter_add(xp, ga, key, g)
        return (ga,)

    return op_result("take", out, a.device, (a,), backward)


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
    xp = data.device.xp
    axis = _axis(axis, data.ndim)
    kept = data.shape[:axis] + (1,) + data.shape[axis + 1:]
    index_shape = np.shape(index)
    if int(np.prod(index_shape)) != int(np.prod(kept)):
        expected = data.shape[:axis] + data.shape[axis + 1:]
        raise ValueError(f"index must have shape {expected} (data's without axis {axis}), got {index_shape}")
    n = data.shape[axis]
    idx = _clip_indices(xp, index, n, "clip", data.device).reshape(kept)
    picked = xp.take_along_axis(data._data, idx, axis=axis)
    out = picked if keepdims else picked.reshape(data.shape[:axis] + data.shape[axis + 1:])

    def backward(g: Any) -> tuple[Any]:
        positions = xp.arange(n).reshape((n,) + (1,) * (data.ndim - axis - 1))
        hit = idx == positions  # one-hot along axis, broadcast to data's shape
        return (xp.where(hit, g.reshape(kept), xp.zeros((), dtype=g.dtype)),)

    return op_result("pick", out, data.device, (data,), backward)


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
    xp = x.device.xp
    axis = _axis(axis, x.ndim)
    c = x.shape[axis]
    for name, t in (("gamma", gamma), ("beta", beta), ("running_mean", running_mean), ("running_var", running_var)):
        if t.shape != (c,):
            raise ValueError(f"{name} must have shape ({c},) for {c} channels on axis {axis}, got {t.shape}")
    if training is None:
        training = is_training()
    acc = np.promote_types(x.dtype, np.float32)
    # Work on an (A, C, B) view, channels in the middle: per-channel sums are a reduction over the
    # contiguous last axis, then over the first (two fast NumPy reductions, not one over scattered axes).
    # x - mean is kept instead of x-hat: out, and the input gradient g*a + (x - mean)*b + c with
    # per-channel a, b, c, each take a few passes over the batch. The arithmetic is _norm_kernels'
    # forward/backward; kernels/norm.cu does it in one launch per direction on GPUs and, through the
    # serial host build, on CPU devices (_norm_kernels.enabled).
    shape3 = (math.prod(x.shape[:axis]), c, math.prod(x.shape[axis + 1:]))
    batch_stats = training and not use_global_stats
    params = (gamma._data, beta._data, running_mean._data, running_var._data)
    if _nk.enabled(xp, x.dtype, params):
        data = x._data if x._data.flags.c_contiguous else xp.ascontiguousarray(x._data)
        out, saved = _nk.forward_kernel(xp, data, shape3, *params, eps, momentum, batch_stats, fix_gamma)

        def backward(g: Any) -> tuple[Any, ...]:
            g = g if g.flags.c_contiguous else xp.ascontiguousarray(g)
            gg = grad_out(gamma, acc) if not fix_gamma else None
            gx, ggamma, gbeta = _nk.backward_kernel(xp, g, data, shape3, saved, batch_stats, fix_gamma, gg,
                                                    grad_out(beta, acc))
            return gx, ggamma, gbeta, None, None

        return op_result("batch_norm", out, x.device, (x, gamma, beta, running_mean, running_var), backward)

    data = xp.ascontiguousarray(x._data).reshape(shape3).astype(acc, copy=False)
    out3, diff, inv_std, k = _nk.forward(xp, data, *params, eps, momentum, batch_stats, fix_gamma,
                                         _nk.per_channel)
    out = out3.reshape(x.shape).astype(x.dtype, copy=False)

    def backward(g: Any) -> tuple[Any, ...]:
        g3 = xp.ascontiguousarray(g).reshape(shape3).astype(acc, copy=False)
        gx, ggamma, gbeta = _nk.backward(xp, g3, diff, inv_std, k, batch_stats, fix_gamma, _nk.per_channel)
        return (gx.reshape(x.shape).astype(x.dtype, copy=False), ggamma.astype(gamma.dtype, copy=False),
                gbeta.astype(beta.dtype, copy=False), None, None)

    return op_result("batch_norm", out, x.device, (x, gamma, beta, running_mean, running_var), backward)


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
    xp = x.device.xp
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

    return op_result("layer_norm", out, x.device, (x, gamma, beta), backward)


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
    xp = x.device.xp
    x2 = x._data.reshape(-1, in_units)
    wdata = weight._data
    out2 = blas.matmul(x2, wdata.T)
    if bias is not None:
        b = bias._data
        if xp is np and out2.dtype == np.result_type(out2, b):  # CPU devices: into the GEMM's own fresh output
            out2 += b
        else:
            out2 = out2 + b
    out = out2.reshape(lead + (units,))
    in_shape = x.shape

    def backward(g: Any) -> tuple[Any, ...]:
        g2 = g.reshape(-1, units)
        gx = blas.matmul(g2, wdata).reshape(in_shape) if x._requires_grad() else None
        gw = gb = None
        if weight._requires_grad():  # straight into the arena's gradient view when the engine allows
            gw = blas.matmul(g2.T, x2, out=grad_out(weight, xp.result_type(g2, x2)))
        if bias is None:
            return gx, gw
        if bias._requires_grad():
            gb = g2.sum(axis=0, out=grad_out(bias, g2.dtype))
        return gx, gw, gb

    parents = (x, weight) if bias is None else (x, weight, bias)
    return op_result("fully_connected", out, x.device, parents, backward)
