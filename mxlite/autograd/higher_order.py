"""``autograd.grad``: gradients returned instead of stored, and higher-order gradients.

Purpose: ``grad(heads, variables)`` returns the gradients of ``heads`` w.r.t. ``variables`` as new
tensors, leaving every ``.grad`` buffer alone (MXNet's ``autograd.grad``). With ``create_graph=True``
the backward pass is itself recorded, so its result can be differentiated again: gradient penalties
(WGAN-GP), Hessian-vector products, second derivatives.

How: every recorded node keeps its op's name, its parents and a backward closure on raw arrays,
the fast form :func:`~.tensor.backward` runs. ``create_graph`` needs the backward as a function of
Tensors instead, built from differentiable ops, so that it records nodes of its own. Those functions
(*rules*) live in one registry keyed by the op's name, here: a rule receives a :class:`BackwardStep`
(the node's parents, its output, which parents need a gradient), the output gradient (a Tensor) and the
op's arguments by name (from the call the ops' ``_op`` decorator keeps on the node). The op library
registers every op's rule at import (:mod:`mxlite.ops.higher_order_rules`, with :func:`register_rule`),
as it stands above this engine. Plain ``backward`` never looks at the registry, so a training step costs
what it did. An op without a rule raises under ``create_graph``, naming the op: a second derivative is
never silently wrong.

Which ops have a rule, and which do not, is listed in :mod:`mxlite.ops.higher_order_rules`. The engine's
own nodes have theirs here: the face views (``as_nd_ndarray``/``as_np_ndarray``, the identity) and a
gradient that depends on no recorded value (zero).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from . import _state
from .tensor import Tensor, _accumulate, _check_heads, _head_grad, _is_sparse, _Node, _pass, describe

__all__ = ["BackwardStep", "Rule", "grad", "register_rule"]

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
            raise ValueError(f"grad: variable {i} ({describe(v)}) does not require a gradient; call attach_grad() "
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
            g = g if g.dtype == v.dtype else g.astype(v.dtype)
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
            grads[id(h)] = g if id(h) not in grads else grads[id(h)] + g
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
                                grads[id(p)] = grads[id(p)] + pg if id(p) in grads else pg
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


class BackwardStep:
    """What a rule gets besides the output gradient and the op's arguments: the node's ``parents``, its output
    ``out``, ``need`` (one bool per parent: whether it needs a gradient) and the node's raw ``backward`` closure
    (for a linear op, whose raw backward is its transpose)."""

    __slots__ = ("parents", "out", "need", "backward")

    def __init__(self, node: _Node, out: Tensor, need: tuple[bool, ...]) -> None:
        self.parents, self.out, self.need, self.backward = node.parents, out, need, node.backward


def _differentiable_backward(node: _Node, out: Tensor, g: Tensor, need: tuple[bool, ...]) -> Sequence[Tensor | None]:
    """The parents' gradients as recorded Tensors, from the op's rule."""
    rule = _RULES.get(node.op)
    if rule is None:
        raise NotImplementedError(
            f"autograd.grad(create_graph=True): the op {node.op!r} (output {describe(out)}) has no differentiable "
            "backward in mxlite, so its second derivative is not available; ops that have one are listed in "
            "mxlite/ops/higher_order_rules.py (compute the gradient with create_graph=False, or avoid this op)")
    with out._device.use():
        grads = rule(BackwardStep(node, out, need), g, **_arguments(node))
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


def register_rule(*names: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the differentiable backward of the ops ``names`` (a later
    registration of a name replaces the earlier one).

    A rule is called as ``rule(step, g, **arguments)``: ``step`` a :class:`BackwardStep`, ``g`` the output
    gradient (a Tensor), ``arguments`` the op's arguments by name; it returns one gradient (a Tensor built
    from differentiable ops, or None) per parent of the node.
    """

    def register(fn: Rule) -> Rule:
        for name in names:
            _RULES[name] = fn
        return fn

    return register


register_rule("_zero_derivative")(lambda step, g: [None])  # see _zero_derivative
register_rule("as_nd_ndarray", "as_np_ndarray")(lambda step, g: [g])  # a face view: the identity
