"""``autograd.grad``: gradients returned instead of stored, and higher-order gradients.

Purpose: ``grad(heads, variables)`` returns the gradients of ``heads`` w.r.t. ``variables`` as new
tensors, leaving every ``.grad`` buffer alone (MXNet's ``autograd.grad``). With ``create_graph=True``
the backward pass is itself recorded, so its result can be differentiated again: gradient penalties
(WGAN-GP), Hessian-vector products, second derivatives.

How: every recorded node keeps its op's name, its parents and a backward closure on raw arrays,
the fast form :func:`~.tensor.backward` runs. ``create_graph`` needs the backward as a function of
Tensors instead, built from differentiable ops, so that it records nodes of its own. Those functions
live here, in one registry keyed by the op's name (:data:`_RULES`): a rule receives the node's parents,
its output and the output gradient (Tensors), and the op's arguments by name (from the call the
``_op`` decorator keeps on the node). Plain ``backward`` never looks at the registry, so a training step
costs what it did. An op without a rule raises under ``create_graph``, naming the op: a second
derivative is never silently wrong.

Ops with a differentiable backward (so with second and higher derivatives): every elementwise op of
``ops.py`` (arithmetic, ``power``, ``maximum``/``minimum``, ``where``, ``clip``, the exponential,
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
maxima are not kept), the ``linalg`` ops, the sparse ops, and :class:`~.function.Function` (its backward is
the user's code on arrays outside the graph). Rounding, comparisons and index results have zero gradient and
record nothing.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _state, nn_ops, ops
from .nn_ops import _axis, _clip_indices
from .ops import _index_key, _norm_axis, _op, _open_grid, _scatter_add
from .tensor import Tensor, _accumulate, _check_heads, _describe, _head_grad, _is_sparse, _Node, _pass, _result

__all__ = ["grad"]

Rule = Callable[..., Sequence[Tensor | None]]
_RULES: dict[str, Rule] = {}


def grad(heads: Tensor | Sequence[Tensor], variables: Tensor | Sequence[Tensor],
         head_grads: Tensor | Sequence[Tensor | None] | None = None, retain_graph: bool | None = None,
         create_graph: bool = False, train_mode: bool = True) -> list[Tensor]:
    """Gradients of ``heads`` w.r.t. ``variables``, returned as new tensors (MXNet's ``autograd.grad``).

    No ``.grad`` buffer is read or written and no ready-hook runs. With ``create_graph=True`` the
    gradients are themselves recorded results: a loss built from them (a gradient penalty) back-propagates
    into the parameters with ``backward``, or ``grad`` differentiates them again.

    Example::

        x = mx.nd.array([1.0]); x.attach_grad()
        with mx.autograd.record():
            y = x ** 3
        dy, = mx.autograd.grad(y, [x], create_graph=True)   # 3 x^2 = 3
        dy.backward()                                        # x.grad = 6 x = 6

    Behaviour: a variable the heads do not depend on gets zeros. Gradients reaching a head from several
    heads add up. Only the part of the graph between the heads and the variables is walked, so the
    gradients of other leaves (a network's weights, when ``variables`` is its input) are not computed.
    The gradient pass records even outside ``record()`` when ``create_graph`` is set, as MXNet does.

    Warning: under ``create_graph`` every op between the heads and the variables needs a differentiable
    backward (listed in this module's docstring); one without raises NotImplementedError naming it.

    Warning: with ``create_graph`` the forward graph is always kept (``retain_graph=False`` included): the
    recorded gradients refer to the forward tensors, and freeing their history would silently drop terms
    of the next derivative. ``backward`` through the new graph frees both.

    Args:
        heads: the output tensor(s) to differentiate (recorded results).
        variables: the tensor(s) to differentiate w.r.t.: leaves with ``attach_grad()``, or recorded
            results (their total gradient is returned); a single Tensor counts as a list of one.
        head_grads: the gradient(s) of some scalar w.r.t. ``heads`` (default: ones); a Tensor, or a list
            with one entry per head (``None`` for ones).
        retain_graph: keep the graph for another backward pass; default ``create_graph``.
        create_graph: record the gradient computation, for higher-order gradients.
        train_mode: the training flag while the backward pass runs.

    Returns:
        A list with one Tensor per variable, of its shape and dtype (a list even for one variable, as
        MXNet: ``dx, = grad(y, x)``); a variable whose gradient arrives row-sparse
        (``Embedding(sparse_grad=True)`` without ``create_graph``) gets a RowSparseTensor.

    Raises:
        ValueError: ``variables`` is empty, a variable needs no gradient, a head was not recorded, or heads
            and head_grads disagree in number or shape.
        TypeError: a head or variable is not a Tensor.
        NotImplementedError: ``create_graph`` through an op without a differentiable backward.
    """
    variables = [variables] if isinstance(variables, Tensor) else list(variables)
    if not variables:
        raise ValueError("grad: variables cannot be empty; pass the tensor(s) to differentiate with respect to")
    for i, v in enumerate(variables):
        if not isinstance(v, Tensor):
            raise TypeError(f"grad: variable {i} is a {type(v).__name__}, not a Tensor")
        if not v._requires_grad():
            raise ValueError(f"grad: variable {i} ({_describe(v)}) does not require a gradient; call attach_grad() "
                             "on it before recording")
    heads, head_grads = _check_heads("grad", heads, head_grads)
    retain = create_graph if retain_graph is None else retain_graph
    # A face view made while recording (x.as_nd_ndarray()) is the same variable as its source, as MXNet's
    # shallow copy shares the autograd entry: its gradient is the source's.
    sources = [_face_source(v) for v in variables]
    results, taken = _grad_pass(heads, head_grads, sources, retain or create_graph, create_graph,
                                      train_mode)
    out: list[Tensor] = []
    for v, source in zip(variables, sources):
        g = results.get(id(source))
        if g is None:
            with v._device.use():
                g = Tensor(v._device.xp.zeros_like(v._data), v._device)
        elif isinstance(g, Tensor):
            g = g if g.dtype == v.dtype else ops.astype(g, v.dtype)
        elif not _is_sparse(g):
            # Each result gets its own memory: copied where the array may be a head gradient, a view, or
            # the array another result got (add's backward hands one array to both inputs).
            with v._device.use():
                copy = g.base is not None or id(g) in taken
                taken.add(id(g))
                g = Tensor(g.astype(v.dtype, copy=copy), v._device)
        if create_graph and isinstance(g, Tensor) and g._node is None:
            g = _zero_derivative(g, v)
        out.append(g)
    return out


def _face_source(v: Tensor) -> Tensor:
    """The tensor a recorded face view (``as_nd_ndarray``/``as_np_ndarray``) was made from; else ``v``."""
    while v._node is not None and v._node.op in ("as_nd_ndarray", "as_np_ndarray"):
        v = v._node.parents[0]
    return v


def _zero_derivative(g: Tensor, v: Tensor) -> Tensor:
    """``g`` (a gradient that depends on no recorded value: ``relu``'s, a constant's) as a recorded result of
    ``v`` whose own derivative is zero, as MXNet records every gradient computed under ``create_graph``: a
    second ``grad`` of it gives zeros instead of refusing a head that is not in a graph. A new tensor (the
    head gradient passed in may be ``g`` itself)."""
    with v._device.use():
        out = Tensor(g._data.copy(), g._device)
    out._node = _Node("_zero_derivative", (v,), lambda og: [None])
    return out

def _grad_pass(heads: list[Tensor], head_grads: list[Any], variables: list[Tensor], retain: bool,
               create_graph: bool, train_mode: bool) -> tuple[dict[int, Any], set[int]]:
    """Kahn's algorithm over the part of the graph leading from ``heads`` to ``variables``.

    Returns {id(variable): its gradient (raw array, RowSparseTensor, or Tensor under ``create_graph``)}
    and the ids of the raw head-gradient arrays (which a result must not alias).
    """
    wanted = {id(v) for v in variables}
    reaches = _reaching(heads, wanted)
    pending: dict[int, int] = {}
    for t in reaches.values():
        if t is not None and t._node is not None:
            for p in t._node.parents:
                if id(p) in reaches and reaches[id(p)] is not None:
                    pending[id(p)] = pending.get(id(p), 0) + 1

    grads: dict[int, Any] = {}
    head_ids = set()
    for h, hg in zip(heads, head_grads):
        if reaches.get(id(h)) is None:
            continue  # this head does not depend on any variable
        if create_graph:
            g = hg if isinstance(hg, Tensor) else Tensor(_head_grad(h, hg), h._device)
            grads[id(h)] = g if id(h) not in grads else ops.add(grads[id(h)], g)
        else:
            g = _head_grad(h, hg)
            head_ids.add(id(g))
            _accumulate(grads, h, g)
    results: dict[int, Any] = {}
    ready = [h for h in dict.fromkeys(heads) if reaches.get(id(h)) is not None and pending.get(id(h), 0) == 0]
    outer, _pass.direct = getattr(_pass, "direct", None), set()  # no op may write into a .grad buffer
    try:
        with _state._scope(create_graph, train_mode):
            while ready:
                t = ready.pop()
                g = grads.pop(id(t), None)
                if id(t) in wanted:
                    results[id(t)] = g
                node = t._node
                if node is None:
                    continue
                need = tuple(id(p) in reaches and reaches[id(p)] is not None for p in node.parents)
                if g is None or not any(need):
                    parent_grads: Sequence[Any] = [None] * len(node.parents)
                else:
                    with t._device.use():  # the rules' and closures' temporaries go on t's device
                        parent_grads = (_differentiable_backward(node, t, g, need) if create_graph
                                        else node.backward(g))
                if not retain:
                    t._node = None
                for p, pg, needed in zip(node.parents, parent_grads, need):
                    if not needed:
                        continue
                    if pg is not None:
                        with p._device.use():
                            if create_graph:
                                grads[id(p)] = ops.add(grads[id(p)], pg) if id(p) in grads else pg
                            else:
                                _accumulate(grads, p, pg)
                    pending[id(p)] -= 1
                    if pending[id(p)] == 0:
                        ready.append(p)
    finally:
        _pass.direct = outer
    return results, head_ids


def _reaching(heads: list[Tensor], wanted: set[int]) -> dict[int, Tensor | None]:
    """The tensors reachable from ``heads`` through recorded nodes: {id: the tensor if a wanted one can be
    reached from it (itself included), else None}. An iterative depth-first walk (graphs can be deep)."""
    reach: dict[int, Tensor | None] = {}
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(h, False) for h in heads]
    while stack:
        t, expanded = stack.pop()
        key = id(t)
        node = t._node
        if expanded:
            hit = key in wanted or any(reach.get(id(p)) is not None for p in node.parents)
            reach[key] = t if hit else None
            continue
        if key in seen:
            continue
        seen.add(key)
        if node is None:
            reach[key] = t if key in wanted else None
            continue
        stack.append((t, True))
        stack.extend((p, False) for p in node.parents if p._requires_grad() and id(p) not in seen)
    return reach


class _Step:
    """What a rule gets besides the output gradient: the node's parents, its output, which parents need one,
    and the node's raw backward closure (for a linear op, whose raw backward is its transpose)."""

    __slots__ = ("parents", "out", "need", "backward")

    def __init__(self, node: _Node, out: Tensor, need: tuple[bool, ...]) -> None:
        self.parents, self.out, self.need, self.backward = node.parents, out, need, node.backward


def _differentiable_backward(node: _Node, out: Tensor, g: Tensor, need: tuple[bool, ...]) -> Sequence[Tensor | None]:
    """The parents' gradients as recorded Tensors, from the op's rule."""
    rule = _RULES.get(node.op)
    if rule is None:
        raise NotImplementedError(
            f"autograd.grad(create_graph=True): the op {node.op!r} (output {_describe(out)}) has no differentiable "
            "backward in mxlite, so its second derivative is not available; ops that have one are listed in "
            "mxlite/autograd/higher_order.py (compute the gradient with create_graph=False, or avoid this op)")
    with out._device.use():
        grads = rule(_Step(node, out, need), g, **_arguments(node))
    if len(grads) != len(node.parents):
        raise RuntimeError(f"the differentiable backward of {node.op!r} gave {len(grads)} gradients for "
                           f"{len(node.parents)} inputs")
    return grads


def _arguments(node: _Node) -> dict[str, Any]:
    """The op's arguments by name, defaults filled in ({} for an op whose call is not kept)."""
    if node.call is None:
        return {}
    fn, args, kwargs = node.call
    bound = _signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


@functools.cache
def _signature(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def _rule(*names: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the differentiable backward of the ops ``names``."""

    def register(fn: Rule) -> Rule:
        for name in names:
            _RULES[name] = fn
        return fn

    return register


# -- helpers -------------------------------------------------------------------------------------
def _const(data: Any, like: Tensor) -> Tensor:
    """A constant (no gradient) on ``like``'s device."""
    return Tensor(data, like._device)


def _mask(cond: Any, like: Tensor) -> Tensor:
    """The bool array ``cond`` as a constant of ``like``'s dtype (1 where true)."""
    return Tensor(cond.astype(like.dtype), like._device)


def _sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``g`` summed down to ``shape``, undoing broadcasting (differentiable)."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1 and g.shape[extra + i] != 1)
    return ops.reshape(ops.sum(g, axis=axes, keepdims=True), shape)


def _kept(g: Tensor, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Tensor:
    """A reduction's gradient reshaped to keep the reduced axes as length 1."""
    return g if keepdims else ops.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(shape)))


@_op("scatter")
def _scatter(values: Tensor, key: Any, shape: tuple[int, ...]) -> Tensor:
    """Zeros of ``shape`` with ``values`` added at ``key`` (repeats accumulate): the adjoint of ``x[key]``."""
    xp = values._device.xp
    key = _index_key(key, values._device)
    data = xp.zeros(shape, dtype=values.dtype)
    _scatter_add(xp, data, key, values._data)
    return _result("scatter", data, values._device, (values,), lambda g: (xp.asarray(g[key]),))


@_rule("scatter")
def _scatter_rule(s: _Step, g: Tensor, values: Tensor, key: Any, shape: tuple[int, ...]) -> tuple:
    return (ops.getitem(g, key),)


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
    "abs": lambda x, y, g: g * _const(x._device.xp.sign(x._data).astype(g.dtype), g),
    "clip": lambda x, y, g: g * _mask(y._data == x._data, g),  # 1 where x lay inside [a_min, a_max]
    "sin": lambda x, y, g: g * ops.cos(x),
    "cos": lambda x, y, g: -(g * ops.sin(x)),
    "tan": lambda x, y, g: g * (1.0 + y * y),
    "arcsin": lambda x, y, g: g / ops.sqrt(1.0 - x * x),
    "arccos": lambda x, y, g: -(g / ops.sqrt(1.0 - x * x)),
    "arctan": lambda x, y, g: g / (1.0 + x * x),
    "sinh": lambda x, y, g: g * ops.cosh(x),
    "cosh": lambda x, y, g: g * ops.sinh(x),
    "arcsinh": lambda x, y, g: g / ops.sqrt(x * x + 1.0),
    "arccosh": lambda x, y, g: g / ops.sqrt(x * x - 1.0),
    "arctanh": lambda x, y, g: g / (1.0 - x * x),
    "log1p": lambda x, y, g: g / (x + 1.0),
    "expm1": lambda x, y, g: g * (y + 1.0),
    "log2": lambda x, y, g: g / (x * _LN2),
    "log10": lambda x, y, g: g / (x * _LN10),
    "reciprocal": lambda x, y, g: -(g * y * y),
    "rsqrt": lambda x, y, g: g * y * y * y * -0.5,
    "cbrt": lambda x, y, g: g / (y * y * 3.0),
    "erf": lambda x, y, g: g * ops.exp(-(x * x)) * _TWO_OVER_SQRT_PI,
}


def _unary_rule(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Rule:
    def rule(s: _Step, g: Tensor, **_: Any) -> tuple:
        return (fn(s.parents[0], s.out, g),)

    return rule


for _name, _fn in _UNARY.items():
    _RULES[_name] = _unary_rule(_fn)


def _binary_rule(fn: Callable[[Tensor, Tensor, Tensor, Tensor, tuple[bool, bool]], tuple]) -> Rule:
    """A broadcasting binary op's rule from ``fn(a, b, y, g, need) -> (ga, gb)`` on the broadcast shape."""

    def rule(s: _Step, g: Tensor, **_: Any) -> tuple:
        a, b = s.parents
        ga, gb = fn(a, b, s.out, g, s.need)
        return (_sum_to(ga, a.shape) if s.need[0] and ga is not None else None,
                _sum_to(gb, b.shape) if s.need[1] and gb is not None else None)

    return rule


def _power(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
    ga = g * b * a ** (b - 1.0) if need[0] else None
    gb = g * y * ops.log(ops.where(_const(a._data > 0, a), a, 1.0)) if need[1] else None  # as the raw form
    return ga, gb


def _division(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
    ga = g / b
    return ga, -(ga * y) if need[1] else None


def _extremum(pick_a: Callable[[Any, Any], Any]) -> Callable:
    def fn(a: Tensor, b: Tensor, y: Tensor, g: Tensor, need: tuple[bool, bool]) -> tuple:
        to_a = _const(pick_a(a._data, b._data), g)
        return ops.where(to_a, g, 0.0), ops.where(to_a, 0.0, g)

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
    "mod": lambda a, b, y, g, need: (g, -(g * _const(a._device.xp.floor(a._data / b._data), g))),
    "arctan2": _arctan2,
    "hypot": lambda a, b, y, g, need: (g * a / y, g * b / y),
}
for _name, _fn in _BINARY.items():
    _RULES[_name] = _binary_rule(_fn)


@_rule("where")
def _where(s: _Step, g: Tensor, **_: Any) -> tuple:
    cond, a, b = s.parents
    c = _const(cond._data.astype(bool), g)
    return (None, _sum_to(ops.where(c, g, 0.0), a.shape) if s.need[1] else None,
            _sum_to(ops.where(c, 0.0, g), b.shape) if s.need[2] else None)


@_rule("dropout")
def _dropout(s: _Step, g: Tensor, **_: Any) -> tuple:
    return g * s.parents[1], None  # the mask: a constant parent


# -- linear algebra, shape -------------------------------------------------------------------------
@_rule("matmul")
def _matmul(s: _Step, g: Tensor, **_: Any) -> tuple:
    a, b = s.parents
    ga = _sum_to(ops.matmul(g, ops.swapaxes(b, -1, -2)), a.shape) if s.need[0] else None
    gb = _sum_to(ops.matmul(ops.swapaxes(a, -1, -2), g), b.shape) if s.need[1] else None
    return ga, gb


@_rule("reshape")
def _reshape(s: _Step, g: Tensor, **_: Any) -> tuple:
    return (ops.reshape(g, s.parents[0].shape),)


@_rule("broadcast_to")
def _broadcast_to(s: _Step, g: Tensor, **_: Any) -> tuple:
    return (_sum_to(g, s.parents[0].shape),)


@_rule("transpose")
def _transpose(s: _Step, g: Tensor, x: Tensor, axes: tuple) -> tuple:
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    perm = tuple(int(a) % x.ndim for a in axes) if axes else tuple(reversed(range(x.ndim)))
    return (ops.transpose(g, tuple(int(i) for i in np.argsort(perm))),)


@_rule("getitem")
def _getitem(s: _Step, g: Tensor, x: Tensor, key: Any) -> tuple:
    return (_scatter(g, key, x.shape),)


@_rule("concat")
def _concat(s: _Step, g: Tensor, tensors: list[Tensor], axis: int) -> tuple:
    ax = axis % g.ndim
    bounds = np.cumsum([0] + [t.shape[ax] for t in tensors])
    lead = (slice(None),) * ax
    return tuple(ops.getitem(g, lead + (slice(int(lo), int(hi)),)) if need else None
                 for lo, hi, need in zip(bounds[:-1], bounds[1:], s.need))


@_rule("stack")
def _stack(s: _Step, g: Tensor, tensors: list[Tensor], axis: int) -> tuple:
    lead = (slice(None),) * (axis % g.ndim)
    return tuple(ops.getitem(g, lead + (i,)) if need else None for i, need in enumerate(s.need))


@_rule("tile")
def _tile(s: _Step, g: Tensor, x: Tensor, reps: Any) -> tuple:
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    nd = max(len(reps), x.ndim)
    split: list[int] = []
    for r, n in zip((1,) * (nd - len(reps)) + reps, (1,) * (nd - x.ndim) + x.shape):
        split += [r, n]
    return (ops.reshape(ops.sum(ops.reshape(g, tuple(split)), axis=tuple(range(0, 2 * nd, 2))), x.shape),)


@_rule("repeat")
def _repeat(s: _Step, g: Tensor, x: Tensor, repeats: int, axis: int | None) -> tuple:
    length = x.size if axis is None else x.shape[axis % x.ndim]
    ax = 0 if axis is None else axis % x.ndim
    split = g.shape[:ax] + (length, int(repeats)) + g.shape[ax + 1:]
    return (ops.reshape(ops.sum(ops.reshape(g, split), axis=ax + 1), x.shape),)


@_rule("take_along_axis")
def _take_along_axis(s: _Step, g: Tensor, x: Tensor, indices: Any, axis: int) -> tuple:
    xp = x._device.xp
    idx = (indices._data if isinstance(indices, Tensor) else xp.asarray(indices)).astype(np.int64)
    grids = _open_grid(xp, g.shape)
    grids[axis % x.ndim] = xp.broadcast_to(idx, g.shape)
    return (_scatter(g, tuple(grids), x.shape),)


@_rule("to_device")
def _to_device(s: _Step, g: Tensor, **_: Any) -> tuple:
    return (ops.to_device(g, s.parents[0].device),)


@_rule("astype")
def _astype(s: _Step, g: Tensor, **_: Any) -> tuple:
    return (ops.astype(g, s.parents[0].dtype),)


# -- reductions ------------------------------------------------------------------------------------
@_rule("sum")
def _sum(s: _Step, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    return (ops.broadcast_to(_kept(g, x.shape, axes, keepdims), x.shape),)


@_rule("mean")
def _mean(s: _Step, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    return (ops.broadcast_to(_kept(g, x.shape, axes, keepdims) / float(count), x.shape),)


@_rule("max", "min")
def _extreme(s: _Step, g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> tuple:
    axes = _norm_axis(axis, x.ndim)
    y = s.out._data if keepdims else s.out._data.reshape(tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    hit = x._data == y
    share = hit / hit.sum(axis=axes, keepdims=True)  # tied extremes share the gradient, as the raw form
    return (_kept(g, x.shape, axes, keepdims) * _const(share.astype(g.dtype), g),)


@_rule("cumsum")
def _cumsum(s: _Step, g: Tensor, x: Tensor, axis: int | None) -> tuple:
    ax = 0 if axis is None else axis
    return (ops.reshape(ops.flip(ops.cumsum(ops.flip(g, ax), axis=ax), ax), x.shape),)


# -- layers ----------------------------------------------------------------------------------------
@_rule("softmax")
def _softmax(s: _Step, g: Tensor, x: Tensor, axis: int) -> tuple:
    y = s.out
    return (y * (g - ops.sum(g * y, axis=axis, keepdims=True)),)


@_rule("log_softmax")
def _log_softmax(s: _Step, g: Tensor, x: Tensor, axis: int) -> tuple:
    return (g - ops.exp(s.out) * ops.sum(g, axis=axis, keepdims=True),)


@_rule("softmax_cross_entropy")
def _softmax_cross_entropy(s: _Step, g: Tensor, pred: Tensor, label: Any, sparse_label: bool) -> tuple:
    p = nn_ops.softmax(pred, -1)
    if not sparse_label:  # pred: g * (softmax * sum(label) - label); label: -g * log_softmax(pred)
        dense = ops.reshape(s.parents[1], pred.shape)
        return (g * (p * ops.sum(dense, axis=-1, keepdims=True) - dense),
                -g * nn_ops.log_softmax(pred, -1) if s.need[1] else None)
    n = pred.shape[-1]
    idx = _clip_indices(pred._device.xp, label, n, "clip", pred._device).reshape(pred.shape[:-1] + (1,))
    return (g * (p - _mask(idx == pred._device.xp.arange(n), pred)),)


@_rule("embedding")
def _embedding(s: _Step, g: Tensor, indices: Any, weight: Tensor, sparse_grad: bool) -> tuple:
    idx = _clip_indices(weight._device.xp, indices, weight.shape[0], "clip", weight._device)
    rows = ops.reshape(g, (-1,) + weight.shape[1:])
    return (_scatter(rows, idx.reshape(-1), weight.shape),)


@_rule("take")
def _take(s: _Step, g: Tensor, a: Tensor, indices: Any, axis: int, mode: str) -> tuple:
    ax = _axis(axis, a.ndim)
    idx = _clip_indices(a._device.xp, indices, a.shape[ax], mode, a._device)
    return (_scatter(g, (slice(None),) * ax + (idx,), a.shape),)


@_rule("pick")
def _pick(s: _Step, g: Tensor, data: Tensor, index: Any, axis: int, keepdims: bool) -> tuple:
    xp = data._device.xp
    ax = _axis(axis, data.ndim)
    n = data.shape[ax]
    kept = data.shape[:ax] + (1,) + data.shape[ax + 1:]
    idx = _clip_indices(xp, index, n, "clip", data._device).reshape(kept)
    hit = idx == xp.arange(n).reshape((n,) + (1,) * (data.ndim - ax - 1))
    return (ops.where(_const(hit, g), ops.reshape(g, kept), 0.0),)


@_rule("fully_connected")
def _fully_connected(s: _Step, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, flatten: bool) -> tuple:
    units, in_units = weight.shape
    g2 = ops.reshape(g, (-1, units))
    gx = ops.reshape(ops.matmul(g2, weight), x.shape) if s.need[0] else None
    gw = ops.matmul(ops.transpose(g2), ops.reshape(x, (-1, in_units))) if s.need[1] else None
    if bias is None:
        return gx, gw
    return gx, gw, ops.sum(g2, axis=0) if s.need[2] else None


@_rule("layer_norm")
def _layer_norm(s: _Step, g: Tensor, x: Tensor, gamma: Tensor, beta: Tensor, axis: int, eps: float) -> tuple:
    # The forward recomputed from differentiable ops (statistics in at least float32, as the op).
    acc = np.promote_types(x.dtype, np.float32)
    ax = _axis(axis, x.ndim)
    others = tuple(i for i in range(x.ndim) if i != ax)
    bshape = tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim))
    xa, ga = ops.astype(x, acc, copy=False), ops.astype(g, acc, copy=False)
    centred = xa - ops.mean(xa, axis=ax, keepdims=True)
    inv_std = ops.rsqrt(ops.mean(centred * centred, axis=ax, keepdims=True) + float(eps))
    xhat = centred * inv_std
    dxhat = ga * ops.reshape(ops.astype(gamma, acc, copy=False), bshape)
    gx = inv_std * (dxhat - ops.mean(dxhat, axis=ax, keepdims=True)
                    - xhat * ops.mean(dxhat * xhat, axis=ax, keepdims=True))
    return (ops.astype(gx, x.dtype, copy=False) if s.need[0] else None,
            ops.astype(ops.sum(ga * xhat, axis=others), gamma.dtype, copy=False) if s.need[1] else None,
            ops.astype(ops.sum(ga, axis=others), beta.dtype, copy=False) if s.need[2] else None)


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
    xs = ops.reshape(ops.transpose(ops.reshape(x, (n, groups, c // groups) + x.shape[2:]), (2, 1, 0) + sp),
                     (c // groups, groups * n) + x.shape[2:])
    filters = ops.transpose(g, (1, 0) + tuple(range(2, 2 + nd)))
    w = nn_ops.conv(xs, filters, None, stride=dilation, padding=padding, dilation=stride, groups=groups)
    if w.shape[2:] != kernel:  # positions the forward's stride never reached
        w = ops.getitem(w, (slice(None), slice(None)) + tuple(slice(0, k) for k in kernel))
    return ops.transpose(w, (1, 0) + tuple(range(2, 2 + nd)))


def _bias_grad(g: Tensor) -> Tensor:
    return ops.sum(g, axis=(0,) + tuple(range(2, g.ndim)))


@_rule("conv", "conv2d")
def _conv(s: _Step, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
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


@_rule("conv_transpose")
def _conv_transpose(s: _Step, g: Tensor, x: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
                    output_padding: Any, dilation: Any, groups: int) -> tuple:
    # conv_transpose(x, w) is the input gradient of conv(., w) at output gradient x: <y, g> = <x, conv(g, w)>.
    nd = x.ndim - 2
    st, pad, dil = _per_axis(stride, nd), _per_axis(padding, nd), _per_axis(dilation, nd)
    gx = nn_ops.conv(g, weight, None, stride=st, padding=pad, dilation=dil, groups=groups) if s.need[0] else None
    gw = _conv_weight_grad(g, x, weight.shape[2:], st, pad, dil, groups) if s.need[1] else None
    if bias is None:
        return gx, gw
    return gx, gw, _bias_grad(g) if s.need[2] else None


# -- batch normalisation, average pooling ------------------------------------------------------------
@_rule("batch_norm")
def _batch_norm(s: _Step, g: Tensor, x: Tensor, gamma: Tensor, beta: Tensor, running_mean: Tensor,
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
    xa, ga = ops.astype(x, acc, copy=False), ops.astype(g, acc, copy=False)
    batch_stats = training and not use_global_stats
    if batch_stats:
        centred = xa - ops.mean(xa, axis=others, keepdims=True)
        inv_std = ops.rsqrt(ops.mean(centred * centred, axis=others, keepdims=True) + float(eps))
    else:
        xp = x._device.xp
        centred = xa - _const(running_mean._data.astype(acc).reshape(bshape), ga)
        inv_std = _const((1.0 / xp.sqrt(running_var._data.astype(acc) + eps)).reshape(bshape), ga)
    xhat = centred * inv_std
    dxhat = ga if fix_gamma else ga * ops.reshape(ops.astype(gamma, acc, copy=False), bshape)
    if batch_stats:
        gx = inv_std * (dxhat - ops.mean(dxhat, axis=others, keepdims=True)
                        - xhat * ops.mean(dxhat * xhat, axis=others, keepdims=True))
    else:
        gx = dxhat * inv_std
    if fix_gamma:
        ggamma = _const(x._device.xp.zeros(gamma.shape, dtype=gamma.dtype), gamma)
    else:
        ggamma = ops.astype(ops.sum(ga * xhat, axis=others), gamma.dtype, copy=False)
    return (ops.astype(gx, x.dtype, copy=False) if s.need[0] else None, ggamma if s.need[1] else None,
            ops.astype(ops.sum(ga, axis=others), beta.dtype, copy=False) if s.need[2] else None, None, None)


def _linear_rule(op: Callable) -> Rule:
    """The rule of a linear op ``A x`` (average pooling): its backward ``A^T g`` is the same whatever ``x``
    is, and the derivative of ``A^T g`` w.r.t. ``g`` is ``A`` itself, the op again."""

    def rule(s: _Step, g: Tensor, x: Tensor, **options: Any) -> tuple:
        return (_linear_transpose(g, s.backward, op, options),)

    return rule


_RULES["_zero_derivative"] = lambda step, g: [None]  # see _zero_derivative
_RULES["as_nd_ndarray"] = _RULES["as_np_ndarray"] = lambda step, g: [g]  # a face view: the identity
_RULES["avg_pool"] = _linear_rule(nn_ops.avg_pool)
_RULES["avg_pool2d"] = _linear_rule(nn_ops.avg_pool2d)


@_op("linear_transpose")
def _linear_transpose(values: Tensor, transpose: Callable, op: Callable, options: dict[str, Any]) -> Tensor:
    """``A^T values`` for the linear op ``A = op(., **options)``, given its raw backward ``transpose``.

    Recorded with ``A`` as its own backward (the gradient of ``<A^T g, v>`` w.r.t. ``g`` is ``A v``)."""
    device = values._device

    def backward(g: Any) -> tuple[Any]:
        with _state._scope(False, None):
            return (op(Tensor(g, device), **options)._data,)

    return _result("linear_transpose", transpose(values._data)[0], device, (values,), backward)


@_rule("linear_transpose")
def _linear_transpose_rule(s: _Step, g: Tensor, values: Tensor, transpose: Callable, op: Callable,
                           options: dict[str, Any]) -> tuple:
    return (op(g, **options),)
