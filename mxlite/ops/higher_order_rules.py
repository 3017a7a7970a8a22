"""The differentiable backward of each op: the rules ``autograd.grad(..., create_graph=True)`` records.

Each rule gives an op's input gradients as Tensors built from differentiable ops, so that the gradient pass
records a graph of its own (second and higher derivatives: gradient penalties, Hessian-vector products).
The engine (:mod:`mxlite.autograd.higher_order`) keeps the registry and walks the graph; this module
registers every op's rule there at import (:func:`~mxlite.autograd.higher_order.register_rule`), keyed by
the op's name. A rule receives a :class:`~mxlite.autograd.higher_order.BackwardStep` (the node's parents,
its output, which parents need a gradient), the output gradient, and the op's arguments by name.

Ops with a differentiable backward (so with second and higher derivatives): every elementwise op of
``core.py`` (arithmetic, ``power``, ``maximum``/``minimum``, ``where``, ``clip``, the exponential,
logarithmic, trigonometric and hyperbolic functions, ``erf``, ``relu``, ``sigmoid``, ``abs``, ...),
``sum``, ``mean``, ``max``, ``min``, ``cumsum``, the shape ops (``reshape`` and what builds on it,
``transpose``, ``broadcast_to``, indexing and slicing, ``concat``, ``stack``, ``split``, ``tile``,
``repeat``, ``take_along_axis``/``sort``), ``matmul``/``dot``, ``astype``, copies between devices,
``softmax``, ``log_softmax``, ``softmax_cross_entropy``, ``fully_connected``, ``conv``/``conv2d``, ``conv_transpose``,
``layer_norm``, ``batch_norm`` (called with ``training`` given, as Gluon's ``BatchNorm`` does; the running
statistics are constants), ``avg_pool``/``avg_pool2d``, ``dropout`` (its mask a constant), ``embedding``,
``take``, ``pick``, and everything composed from these (the activations of ``activations.py``, ``norm``,
``var``, ``std``, ``logsumexp``, the global poolings).

Without one (``create_graph`` raises, naming the op): ``prod``, ``max_pool``/``max_pool2d`` (its windows'
maxima are not kept), the ``linalg`` ops, the sparse ops, and :class:`~mxlite.autograd.function.Function`
(its backward is the user's code on arrays outside the graph). Rounding, comparisons and index results have
zero gradient and record nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..autograd import is_training, pause
from ..autograd.higher_order import BackwardStep, Rule, register_rule
from ..autograd.tensor import Tensor, index_key, op_result
from . import core, nn_ops
from .core import _norm_axis, _op, _open_grid, _scatter_add
from .nn_ops import _axis, _clip_indices

__all__: list[str] = []


# -- helpers -------------------------------------------------------------------------------------
def _const(data: Any, like: Tensor) -> Tensor:
    """A constant (no gradient) on ``like``'s device."""
    return Tensor(data, like.device)


def _mask(cond: Any, like: Tensor) -> Tensor:
    """The bool array ``cond`` as a constant of ``like``'s dtype (1 where true)."""
    return Tensor(cond.astype(like.dtype), like.device)


def _sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``g`` summed down to ``shape``, undoing broadcasting (differentiable)."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1 and g.shape[extra + i] != 1)
    return core.reshape(core.sum(g, axis=axes, keepdims=True), shape)


def _kept(g: Tensor, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    """A reduction's gradient reshaped to keep the reduced axes as length 1."""
    return g if keepdims else core.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(shape)))


@_op("scatter")
def _scatter(values: Tensor, key: Any, shape: tuple[int, ...]) -> Tensor:
    """Zeros of ``shape`` with ``values`` added at ``key`` (repeats accumulate): the adjoint of ``x[key]``."""
    xp = values.device.xp
    key = index_key(key, values.device)
    data = xp.zeros(shape, dtype=values.dtype)
    _scatter_add(xp, data, key, values._data)
    return op_result("scatter", data, values.device, (values,), lambda g: (xp.asarray(g[key]),))


@register_rule("scatter")
def _scatter_rule(s: BackwardStep, g: Tensor, values: Tensor, key: Any, shape: tuple[int, ...]) -> tuple:
    return (core.getitem(g, key),)


# -- elementwise: (x, y, g) -> the input's gradient, y the output ----------------------------------
_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_UNARY: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "negative": lambda x, y, g: -g,
    "exp": lambda x, y, g: g * y,
    "log": lambda x, y, g: g / x,
    "sqrt": lambda x, y, g: g / (y * 2.0),
    "square": lambda x, y, g: g * x * 2.0,
    "tanh": lambda x, y, g: g * (1.0 - y * y),
    "sigmoid": lambda x, y, g: g * y * (1.0 - y),
    "relu": lambda x, y, g: g * _mask(x._data > 0, g),
    "abs": lambda x, y, g: g * _const(x.device.xp.sign(x._data).astype(g.dtype), g),
    "clip": lambda x, y, g: g * _mask(y._data == x._data, g),  # 1 where x lay inside [a_min, a_max]
    "sin": lambda x, y, g: g * core.cos(x),
    "cos": lambda x, y, g: -(g * core.sin(x)),
    "tan": lambda x, y, g: g * (1.0 + y * y),
    "arcsin": lambda x, y, g: g / core.sqrt(1.0 - x * x),
    "arccos": lambda x, y, g: -(g / core.sqrt(1.0 - x * x)),
    "arctan": lambda x, y, g: g / (1.0 + x * x),
    "sinh": lambda x, y, g: g * core.cosh(x),
    "cosh": lambda x, y, g: g * core.sinh(x),
    "arcsinh": lambda x, y, g: g / core.sqrt(x * x + 1.0),
    "arccosh": lambda x, y, g: g / core.sqrt(x * x - 1.0),
    "arctanh": lambda x, y, g: g / (1.0 - x * x),
    "log1p": lambda x, y, g: g / (x + 1.0),
    "expm1": lambda x, y, g: g * (y + 1.0),
    "log2": lambda x, y, g: g / (x * _LN2),
    "log10": lambda x, y, g: g / (x * _LN10),
    "reciprocal": lambda x, y, g: -(g * y * y),
    "rsqrt": lambda x, y, g: g * y * y * y * -0.5,
    "cbrt": lambda x, y, g: g / (y * y * 3.0),
    "erf": lambda x, y, g: g * core.exp(-(x * x)) * _TWO_OVER_SQRT_PI,
}


def _unary_rule(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Rule:
    def rule(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
        return (fn(s.parents[0], s.out, g),)

    return rule


for _name, _fn in _UNARY.items():
    register_rule(_name)(_unary_rule(_fn))


def _binary_rule(fn: Callable[[Tensor, Tensor, Tensor, Tensor, tuple[bool, bool]], tuple]) -> Rule:
    """A broadcasting binary op's rule from ``fn(a, b, y, g, need) -> (ga, gb)`` on the broadcast shape."""

    def rule(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
        a, b = s.parents
        ga, gb = fn(a, b, s.out, g, s.need)
        return (_sum_to(ga, a.shape) if s.need[0] and ga is not None else None,
                _sum_to(gb, b.shape) if s.need[1] and gb is not None else None)

    return rule


def _power(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
    ga = g * b * a ** (b - 1.0) if need[0] else None
    gb = g * y * core.log(core.where(_const(a._data > 0, a), a, 1.0)) if need[1] else None  # as the raw form
    return ga, gb


def _division(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
    ga = g / b
    return ga, -(ga * y) if need[1] else None


def _extremum(pick_a: Callable[[Any, Any], Any]) -> Callable:
    def fn(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
        to_a = _const(pick_a(a._data, b._data), g)
        return core.where(to_a, g, 0.0), core.where(to_a, 0.0, g)

    return fn


def _arctan2(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
    r2 = a * a + b * b
    return g * b / r2, -(g * a / r2)


_BINARY = {
    "add": lambda a, b, y, g, need: (g, g),
    "subtract": lambda a, b, y, g, need: (g, -g),
    "multiply": lambda a, b, y, g, need: (g * b if need[0] else None, g * a if need[1] else None),
    "divide": _division,
    "power": _power,
    "maximum": _extremum(lambda x, y: x >= y),
    "minimum": _extremum(lambda x, y: x <= y),
    "mod": lambda a, b, y, g, need: (g, -(g * _const(a.device.xp.floor(a._data / b._data), g))),
    "arctan2": _arctan2,
    "hypot": lambda a, b, y, g, need: (g * a / y, g * b / y),
}
for _name, _fn in _BINARY.items():
    register_rule(_name)(_binary_rule(_fn))


@register_rule("where")
def _where(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    cond, a, b = s.parents
    c = _const(cond._data.astype(bool), g)
    return (None, _sum_to(core.where(c, g, 0.0), a.shape) if s.need[1] else None,
            _sum_to(core.where(c, 0.0, g), b.shape) if s.need[2] else None)


@register_rule("dropout")
def _dropout(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    return g * s.parents[1], None  # the mask: a constant parent


# -- linear algebra, shape -------------------------------------------------------------------------
@register_rule("matmul")
def _matmul(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    a, b = s.parents
    ga = _sum_to(core.matmul(g, core.swapaxes(b, -1, -2)), a.shape) if s.need[0] else None
    gb = _sum_to(core.matmul(core.swapaxes(a, -1, -2), g), b.shape) if s.need[1] else None
    return ga, gb


@register_rule("reshape")
def _reshape(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    return (core.reshape(g, s.parents[0].shape),)


@register_rule("broadcast_to")
def _broadcast_to(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    return (_sum_to(g, s.parents[0].shape),)


@register_rule("transpose")
def _transpose(s: BackwardStep, g: Tensor, x: Tensor, axes: tuple) -> tuple:
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    perm = tuple(int(a) % x.ndim for a in axes) if axes else tuple(reversed(range(x.ndim)))
    return (core.transpose(g, tuple(int(i) for i in np.argsort(perm))),)


@register_rule("getitem")
def _getitem(s: BackwardStep, g: Tensor, x: Tensor, key: Any) -> tuple:
    return (_scatter(g, key, x.shape),)


@register_rule("concat")
def _concat(s: BackwardStep, g: Tensor, tensors: list[Tensor], axis: int) -> tuple:
    ax = axis % g.ndim
    bounds = np.cumsum([0] + [t.shape[ax] for t in tensors])
    lead = (slice(None),) * ax
    return tuple(core.getitem(g, lead + (slice(int(lo), int(hi)),)) if need else None
                 for lo, hi, need in zip(bounds[:-1], bounds[1:], s.need))


@register_rule("stack")
def _stack(s: BackwardStep, g: Tensor, tensors: list[Tensor], axis: int) -> tuple:
    lead = (slice(None),) * (axis % g.ndim)
    return tuple(core.getitem(g, lead + (i,)) if need else None for i, need in enumerate(s.need))


@register_rule("tile")
def _tile(s: BackwardStep, g: Tensor, x: Tensor, reps: Any) -> tuple:
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    nd = max(len(reps), x.ndim)
    split: list[int] = []
    for r, n in zip((1,) * (nd - len(reps)) + reps, (1,) * (nd - x.ndim) + x.shape):
        split += [r, n]
    return (core.reshape(core.sum(core.reshape(g, tuple(split)), axis=tuple(range(0, 2 * nd, 2))), x.shape),)


@register_rule("repeat")
def _repeat(s: BackwardStep, g: Tensor, x: Tensor, repeats: int, axis: int | None) -> tuple:
    length = x.size if axis is None else x.shape[axis % x.ndim]
    ax = 0 if axis is None else axis % x.ndim
    split = g.shape[:ax] + (length, int(repeats)) + g.shape[ax + 1:]
    return (core.reshape(core.sum(core.reshape(g, split), axis=ax + 1), x.shape),)


@register_rule("take_along_axis")
def _take_along_axis(s: BackwardStep, g: Tensor, x: Tensor, indices: Any, axis: int) -> tuple:
    xp = x.device.xp
    idx = (indices._data if isinstance(indices, Tensor) else xp.asarray(indices)).astype(np.int64)
    grids = _open_grid(xp, g.shape)
    grids[axis % x.ndim] = xp.broadcast_to(idx, g.shape)
    return (_scatter(g, tuple(grids), x.shape),)


@register_rule("to_device")
def _to_device(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    return (core.to_device(g, s.parents[0].device),)


@register_rule("astype")
def _astype(s: BackwardStep, g: Tensor, **_: Any) -> tuple:
    return (core.astype(g, s.parents[0].dtype),)


# -- reductions ------------------------------------------------------------------------------------
@register_rule("sum")
def _sum(s: BackwardStep, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    return (core.broadcast_to(_kept(g, x.shape, axes, keepdims), x.shape),)


@register_rule("mean")
def _mean(s: BackwardStep, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    return (core.broadcast_to(_kept(g, x.shape, axes, keepdims) / float(count), x.shape),)


@register_rule("max", "min")
def _extreme(s: BackwardStep, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    y = s.out._data if keepdims else s.out._data.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    hit = x._data == y
    share = hit / hit.sum(axis=axes, keepdims=True)  # tied extremes share the gradient, as the raw form
    return (_kept(g, x.shape, axes, keepdims) * _const(share.astype(g.dtype), g),)


@register_rule("cumsum")
def _cumsum(s: BackwardStep, g: Tensor, x: Tensor, axis: int | None) -> tuple:
    ax = 0 if axis is None else axis
    return (core.reshape(core.flip(core.cumsum(core.flip(g, ax), axis=ax), ax), x.shape),)


# -- layers ----------------------------------------------------------------------------------------
@register_rule("softmax")
def _softmax(s: BackwardStep, g: Tensor, x: Tensor, axis: int) -> tuple:
    y = s.out
    return (y * (g - core.sum(g * y, axis=axis, keepdims=True)),)


@register_rule("log_softmax")
def _log_softmax(s: BackwardStep, g: Tensor, x: Tensor, axis: int) -> tuple:
    return (g - core.exp(s.out) * core.sum(g, axis=axis, keepdims=True),)


@register_rule("softmax_cross_entropy")
def _softmax_cross_entropy(s: BackwardStep, g: Tensor, pred: Tensor, label: Any, sparse_label: bool) -> tuple:
    p = nn_ops.softmax(pred, -1)
    if not sparse_label:  # pred: g * (softmax * sum(label) - label); label: -g * log_softmax(pred)
        dense = core.reshape(s.parents[1], pred.shape)
        return (g * (p * core.sum(dense, axis=-1, keepdims=True) - dense),
                -g * nn_ops.log_softmax(pred, -1) if s.need[1] else None)
    n = pred.shape[-1]
    idx = _clip_indices(pred.device.xp, label, n, "clip", pred.device).reshape(pred.shape[:-1] + (1,))
    return (g * (p - _mask(idx == pred.device.xp.arange(n), pred)),)


@register_rule("embedding")
def _embedding(s: BackwardStep, g: Tensor, indices: Any, weight: Tensor, sparse_grad: bool) -> tuple:
    idx = _clip_indices(weight.device.xp, indices, weight.shape[0], "clip", weight.device)
    rows = core.reshape(g, (-1,) + weight.shape[1:])
    return (_scatter(rows, idx.reshape(-1), weight.shape),)


@register_rule("take")
def _take(s: BackwardStep, g: Tensor, a: Tensor, indices: Any, axis: int, mode: str) -> tuple:
    ax = _axis(axis, a.ndim)
    idx = _clip_indices(a.device.xp, indices, a.shape[ax], mode, a.device)
    return (_scatter(g, (slice(None),) * ax + (idx,), a.shape),)


@register_rule("pick")
def _pick(s: BackwardStep, g: Tensor, data: Tensor, index: Any, axis: int, keepdims: bool) -> tuple:
    xp = data.device.xp
    ax = _axis(axis, data.ndim)
    n = data.shape[ax]
    kept = data.shape[:ax] + (1,) + data.shape[ax + 1:]
    idx = _clip_indices(xp, index, n, "clip", data.device).reshape(kept)
    hit = idx == xp.arange(n).reshape((n,) + (1,) * (data.ndim - ax - 1))
    return (core.where(_const(hit, g), core.reshape(g, kept), 0.0),)


@register_rule("fully_connected")
def _fully_connected(s: BackwardStep, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None,
                     flatten: bool) -> tuple:
    units, in_units = weight.shape
    g2 = core.reshape(g, (-1, units))
    gx = core.reshape(core.matmul(g2, weight), x.shape) if s.need[0] else None
    gw = core.matmul(core.transpose(g2), core.reshape(x, (-1, in_units))) if s.need[1] else None
    if bias is None:
        return gx, gw
    return gx, gw, core.sum(g2, axis=0) if s.need[2] else None


@register_rule("layer_norm")
def _layer_norm(s: BackwardStep, g: Tensor, x: Tensor, gamma: Tensor, beta: Tensor, axis: int, eps: float) -> tuple:
    # The forward recomputed from differentiable ops (statistics in at least float32, as the op).
    acc = np.promote_types(x.dtype, np.float32)
    ax = _axis(axis, x.ndim)
    others = tuple(i for i in range(x.ndim) if i != ax)
    bshape = tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim))
    xa, ga = core.astype(x, acc, copy=False), core.astype(g, acc, copy=False)
    centred = xa - core.mean(xa, axis=ax, keepdims=True)
    inv_std = core.rsqrt(core.mean(centred * centred, axis=ax, keepdims=True) + float(eps))
    xhat = centred * inv_std
    dxhat = ga * core.reshape(core.astype(gamma, acc, copy=False), bshape)
    gx = inv_std * (dxhat - core.mean(dxhat, axis=ax, keepdims=True)
                    - xhat * core.mean(dxhat * xhat, axis=ax, keepdims=True))
    return (core.astype(gx, x.dtype, copy=False) if s.need[0] else None,
            core.astype(core.sum(ga * xhat, axis=others), gamma.dtype, copy=False) if s.need[1] else None,
            core.astype(core.sum(ga, axis=others), beta.dtype, copy=False) if s.need[2] else None)


# -- convolution: its input gradient is a transposed convolution, its weight gradient a convolution ----
def _per_axis(value: Any, nd: int) -> tuple[int, ...]:
    return (int(value),) * nd if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


def _conv_weight_grad(x: Tensor, g: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...],
                      padding: tuple[int, ...], dilation: tuple[int, ...], groups: int) -> Tensor:
    """The gradient of ``conv(x, w)`` w.r.t. ``w`` (C_out, C/groups, *kernel) for output gradient ``g``.

    ``gw[o, c, k] = sum_n sum_p g[n, o, p] * xpad[n, c, p*stride + k*dilation]``: a convolution over the
    spatial axes with the samples as channels, ``g`` as the filters, stride and dilation exchanged.
    Per group: x's channels (N, G, C/G) become (C/G, G*N) and g's (N, C_out) the filters (C_out, N).
    """
    n, c = x.shape[:2]
    nd = x.ndim - 2
    sp = tuple(range(3, 3 + nd))
    xs = core.reshape(core.transpose(core.reshape(x, (n, groups, c // groups) + x.shape[2:]), (2, 1, 0) + sp),
                      (c // groups, groups * n) + x.shape[2:])
    filters = core.transpose(g, (1, 0) + tuple(range(2, 2 + nd)))
    w = nn_ops.conv(xs, filters, None, stride=dilation, padding=padding, dilation=stride, groups=groups)
    if w.shape[2:] != kernel:  # positions the forward's stride never reached
        w = core.getitem(w, (slice(None), slice(None)) + tuple(slice(0, k) for k in kernel))
    return core.transpose(w, (1, 0) + tuple(range(2, 2 + nd)))


def _bias_grad(g: Tensor) -> Tensor:
    return core.sum(g, axis=(0,) + tuple(range(2, g.ndim)))


@register_rule("conv", "conv2d")
def _conv(s: BackwardStep, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
          dilation: Any, groups: int) -> tuple:
    nd = x.ndim - 2
    st, pad, dil = _per_axis(stride, nd), _per_axis(padding, nd), _per_axis(dilation, nd)
    kernel = weight.shape[2:]
    gx = gw = None
    if s.need[0]:
        # output_padding picks, among the input sizes a strided convolution maps to g's, x's own
        adj = tuple(si - ((o - 1) * t - 2 * p + d * (k - 1) + 1)
                    for si, o, t, p, d, k in zip(x.shape[2:], g.shape[2:], st, pad, dil, kernel))
        gx = nn_ops.conv_transpose(g, weight, None, stride=st, padding=pad, output_padding=adj, dilation=dil,
                                   groups=groups)
    if s.need[1]:
        gw = _conv_weight_grad(x, g, kernel, st, pad, dil, groups)
    if bias is None:
        return gx, gw
    return gx, gw, _bias_grad(g) if s.need[2] else None


@register_rule("conv_transpose")
def _conv_transpose(s: BackwardStep, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,
                    padding: Any, output_padding: Any, dilation: Any, groups: int) -> tuple:
    # conv_transpose(x, w) is the input gradient of conv(., w) at output gradient x: <y, g> = <x, conv(g, w)>.
    nd = x.ndim - 2
    st, pad, dil = _per_axis(stride, nd), _per_axis(padding, nd), _per_axis(dilation, nd)
    gx = nn_ops.conv(g, weight, None, stride=st, padding=pad, dilation=dil, groups=groups) if s.need[0] else None
    gw = _conv_weight_grad(g, x, weight.shape[2:], st, pad, dil, groups) if s.need[1] else None
    if bias is None:
        return gx, gw
    return gx, gw, _bias_grad(g) if s.need[2] else None


# -- batch normalisation, average pooling ------------------------------------------------------------
@register_rule("batch_norm")
def _batch_norm(s: BackwardStep, g: Tensor, x: Tensor, gamma: Tensor, beta: Tensor, running_mean: Tensor,
                running_var: Tensor, axis: int, eps: float, momentum: float, training: bool | None,
                use_global_stats: bool, fix_gamma: bool) -> tuple:
    if training is None:
        raise NotImplementedError("autograd.grad(create_graph=True): batch_norm was called with training=None, so "
                                  "whether it used the batch's statistics is not known here; pass training=True or "
                                  "False explicitly (Gluon's BatchNorm does)")
    # The forward recomputed from differentiable ops, statistics in at least float32 as the op. The running
    # statistics are constants (the op changes them only when it uses the batch's, and not through the graph).
    acc = np.promote_types(x.dtype, np.float32)
    ax = _axis(axis, x.ndim)
    others = tuple(i for i in range(x.ndim) if i != ax)
    bshape = tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim))
    xa, ga = core.astype(x, acc, copy=False), core.astype(g, acc, copy=False)
    batch_stats = training and not use_global_stats
    if batch_stats:
        centred = xa - core.mean(xa, axis=others, keepdims=True)
        inv_std = core.rsqrt(core.mean(centred * centred, axis=others, keepdims=True) + float(eps))
    else:
        xp = x.device.xp
        centred = xa - _const(running_mean._data.astype(acc).reshape(bshape), ga)
        inv_std = _const((1.0 / xp.sqrt(running_var._data.astype(acc) + eps)).reshape(bshape), ga)
    xhat = centred * inv_std
    dxhat = ga if fix_gamma else ga * core.reshape(core.astype(gamma, acc, copy=False), bshape)
    if batch_stats:
        gx = inv_std * (dxhat - core.mean(dxhat, axis=others, keepdims=True)
                        - xhat * core.mean(dxhat * xhat, axis=others, keepdims=True))
    else:
        gx = dxhat * inv_std
    if fix_gamma:
        ggamma = _const(x.device.xp.zeros(gamma.shape, dtype=gamma.dtype), gamma)
    else:
        ggamma = core.astype(core.sum(ga * xhat, axis=others), gamma.dtype, copy=False)
    return (core.astype(gx, x.dtype, copy=False) if s.need[0] else None, ggamma if s.need[1] else None,
            core.astype(core.sum(ga, axis=others), beta.dtype, copy=False) if s.need[2] else None, None, None)


def _linear_rule(op: Callable) -> Rule:
    """The rule of a linear op ``A x`` (average pooling): its backward ``A^T g`` is the same whatever ``x``
    is, and the derivative of ``A^T g`` w.r.t. ``g`` is ``A`` itself, the op again."""

    def rule(s: BackwardStep, g: Tensor, x: Tensor, **options: Any) -> tuple:
        return (_linear_transpose(g, s.backward, op, options),)

    return rule


register_rule("avg_pool")(_linear_rule(nn_ops.avg_pool))
register_rule("avg_pool2d")(_linear_rule(nn_ops.avg_pool2d))


@_op("linear_transpose")
def _linear_transpose(values: Tensor, transpose: Callable, op: Callable, options: dict[str, Any]) -> Tensor:
    """``A^T values`` for the linear op ``A = op(., **options)``, given its raw backward ``transpose``.

    Recorded with ``A`` as its own backward (the gradient of ``<A^T g, v>`` w.r.t. ``g`` is ``A v``)."""
    device = values.device

    def backward(g: Any) -> tuple[Any]:
        with pause(train_mode=is_training()):
            return (op(Tensor(g, device), **options)._data,)

    return op_result("linear_transpose", transpose(values._data)[0], device, (values,), backward)


@register_rule("linear_transpose")
def _linear_transpose_rule(s: BackwardStep, g: Tensor, values: Tensor, transpose: Callable, op: Callable,
                           options: dict[str, Any]) -> tuple:
    return (op(g, **options),)
