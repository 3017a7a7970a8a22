"""A function of Tensors captured as CUDA graphs, replayed as one autograd node (for ``Block.hybridize``).

:func:`capture` records ``fn(*args)`` on a GPU as a forward graph and, when it runs under ``record()``
with something to differentiate, its backward as a second graph (the shape of PyTorch's
``make_graphed_callables``). The tensor arguments are copied into static input buffers, the forward
runs once inside a capture with autograd recording as usual, and ``autograd.grad`` over that recorded
graph, from static output-gradient buffers to the static inputs and the parameters the forward reached,
is captured as the backward. The recorded graph is kept: its saved arrays are the graphs' buffers.

A call of the :class:`GraphedFunction` copies its tensor arguments into the static inputs (one copy
kernel each) and launches the forward graph; under ``record()`` it records ONE autograd node
(:class:`~mxlite.autograd.Function`) whose parents are the arguments and the parameters. That node's
backward copies the incoming output gradients into the static buffers, launches the backward graph and
hands back the static gradients: the autograd engine then writes the parameters' gradients into their
buffers as for any leaf (``grad_req`` 'write' or 'add', then the leaves' ready-hooks: the Trainer's
bucket overlap), and passes the inputs' gradients on. Callers get copies of the outputs (one copy kernel
each), as MXNet gives fresh arrays on every call.

Only one call's activations fit in the static buffers: while the node of a previous call may still be
back-propagated (its outputs alive with their history), :attr:`GraphedFunction.busy` is True and the
caller must run eagerly instead. This module knows no Block; :mod:`mxlite.gluon._graphs` decides when to
capture and when a graph went stale.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..device import graphs as _graphs
from . import _state
from .function import Function
from .higher_order import grad as _grad
from .tensor import Tensor, _face, grad_out

__all__ = ["GraphedFunction", "capture", "signature"]


class GraphedFunction:
    """``fn`` captured as a forward graph (and a backward graph); call it with arguments like the captured ones.

    Attributes:
        forward_graph, backward_graph: the :class:`mxlite.device.graphs.Graph` objects (backward None when
            the capture was not recorded, or nothing needed a gradient).
    """

    def __init__(self, device: Any, statics: dict[int, Tensor], outputs: list[Tensor], rebuild: Callable,
                 forward_graph: Any) -> None:
        self.device = device
        self._statics = statics
        self._outputs = outputs
        self._rebuild = rebuild
        self.forward_graph = forward_graph
        self.backward_graph: Any = None
        self._heads: list[int] = []  # outputs that are differentiated (indices into outputs)
        self._head_bufs: list[Tensor] = []
        self._inputs: list[int] = []  # argument positions whose gradient the backward graph computes
        self._params: list[Tensor] = []  # parameters whose gradient it computes
        self._grads: list[Any] = []  # the static gradients: inputs' then parameters'
        self._direct: list[Tensor] = []  # parameters whose gradient the backward graph writes into their buffer
        self._is_buffer: list[bool] = []  # per gradient of the backward graph: whether it is such a buffer
        self._plain: tuple[Any, list[Any]] | None = None  # (graph, gradients) writing into no buffer
        self._capture_backward: Callable[[bool], tuple[Any, list[Any]]] | None = None
        self._pending: weakref.ref[Any] | None = None
        self._released = False

    @property
    def alive(self) -> bool:
        """False once a graph of it was dropped (:meth:`release`, ``mx.device.graphs.clear()``)."""
        return self.forward_graph.alive and (self.backward_graph is None or self.backward_graph.alive)

    @property
    def busy(self) -> bool:
        """Whether a previous call's node may still be back-propagated (its activations live in the buffers)."""
        return self._pending is not None and self._pending() is not None

    @property
    def nbytes(self) -> int:
        """Bytes held: the graphs' memory pools and the static input and output-gradient buffers."""
        graphs = sum(g.nbytes for g in (self.forward_graph, self.backward_graph, self._plain and self._plain[0]) if g)
        statics = sum(int(s._data.nbytes) for s in self._statics.values())
        return graphs + statics + sum(int(b._data.nbytes) for b in self._head_bufs)

    def release(self) -> None:
        """Drop both graphs and every buffer (the object cannot be called afterwards).

        While a recorded call's backward is pending (:attr:`busy`), the backward graph and its buffers are
        kept until that backward has run, so a block dropped between its forward and backward still
        back-propagates.
        """
        self._released = True
        if self.busy:
            return
        for graph in (self.forward_graph, self.backward_graph, self._plain and self._plain[0]):
            if graph:
                graph.drop()
        self._statics, self._outputs, self._head_bufs, self._grads, self._params = {}, [], [], [], []
        self._direct, self._is_buffer, self._plain, self._capture_backward = [], [], None, None

    def __call__(self, args: Sequence[Any]) -> Any:
        """Run the captured function on ``args`` (tensors of the captured shapes, dtypes and device).

        Under ``record()``, with a backward graph and an argument or parameter needing a gradient, the call
        is recorded as one node; otherwise the forward graph alone runs.
        """
        with self.device.use():
            for i, s in self._statics.items():
                s._data[...] = args[i]._data
        if self.backward_graph is not None and _state.is_recording():
            parents = [args[i] for i in self._inputs] + self._params
            if any(p._requires_grad() for p in parents):
                replay = _CUDAGraph(self, len(self._inputs))
                self._pending = weakref.ref(replay)
                return self._rebuild(_as_list(replay(*parents)))
        self.forward_graph.launch()
        return self._rebuild(self._copies())

    def _copies(self) -> list[Tensor]:
        with self.device.use():
            return [_face(o)(o._data.copy(), self.device) for o in self._outputs]

    def _backward(self, out_grads: Sequence[Tensor]) -> list[Any]:
        with self.device.use():
            for buf, k in zip(self._head_bufs, self._heads):
                buf._data[...] = out_grads[k]._data
        # The backward graph writes 'write' parameters' gradients straight into their buffers, which the engine
        # allows (grad_out) only inside backward() and when this node is the parameters' only consumer. Else
        # (autograd.grad, which must not touch a buffer; a parameter also used outside the block) a second graph,
        # captured the first time it is needed, leaves the buffers alone and the engine stores the gradients.
        if all(grad_out(p, p._grad._data.dtype) is not None for p in self._direct):
            graph, arrays, keep = self.backward_graph, self._grads, self._is_buffer
        else:
            if self._plain is None:
                self._plain = self._capture_backward(False)
            (graph, arrays), keep = self._plain, ()
        graph.launch()
        # The graph's own gradient arrays are overwritten by its next launch: the engine gets copies, since
        # autograd.grad hands what it gets to the caller as it is; only the parameters' buffers go as they are.
        with self.device.use():
            grads = [Tensor(g if k < len(keep) and keep[k] else g.copy(), self.device) for k, g in enumerate(arrays)]
        if self._released:  # released while this backward was pending: now it can go
            self._pending = None
            self.release()
        return grads


class _CUDAGraph(Function):
    """The node a recorded call makes: forward launches the forward graph, backward the backward graph."""

    def __init__(self, graphed: GraphedFunction, n_inputs: int) -> None:
        super().__init__()
        self._graphed = graphed
        self._n_inputs = n_inputs

    def forward(self, *parents: Tensor) -> Any:
        g = self._graphed
        g.forward_graph.launch()
        outs = g._copies()
        return outs[0] if len(outs) == 1 else tuple(outs)

    def backward(self, *out_grads: Tensor) -> list[Any]:
        return self._graphed._backward(out_grads)


def signature(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple | None:
    """What a captured graph depends on in a call: the recording and training flags, and per argument its
    face, shape, dtype, device and whether it needs a gradient (tensors) or its value (anything hashable).

    None when an argument cannot be part of a key (an unhashable value, a tensor passed by keyword).
    """
    recording = _state.is_recording()
    parts: list[Any] = [recording, _state.is_training()]
    for a in args:
        if isinstance(a, Tensor):
            parts.append((type(a), a.shape, a.dtype.str, a.device, recording and a._requires_grad()))
        else:
            parts.append(("value", a))
    for name in sorted(kwargs):
        if isinstance(kwargs[name], Tensor):
            return None
        parts.append((name, kwargs[name]))
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _as_list(result: Any) -> list[Tensor]:
    return [result] if isinstance(result, Tensor) else list(result)


def _flatten(result: Any) -> tuple[list[Tensor], Callable[[list[Tensor]], Any]]:
    """A forward's result as a list of Tensors and the function rebuilding the same structure from such a list.

    Raises:
        CaptureError: anything but a Tensor or a flat list/tuple of Tensors.
    """
    if isinstance(result, Tensor):
        return [result], lambda outs: outs[0]
    if type(result) in (list, tuple) and result and all(isinstance(r, Tensor) for r in result):
        kind = type(result)
        return list(result), lambda outs: kind(outs)
    raise _graphs.CaptureError("an output that is not an array or a flat list/tuple of arrays",
                               f"the function returned {type(result).__name__}")


def _writes_buffer(variable: Tensor, dtype: Any) -> bool:
    """Whether the backward graph writes ``variable``'s gradient into its own buffer (see :func:`capture`): a
    parameter with ``grad_req='write'`` and a dense, C-contiguous buffer of the gradient's dtype, the buffers
    ``tensor.grad_out`` may hand to an op. The replay then gives the autograd engine that very buffer, and the
    engine writes nothing (``_write_leaf_grad``) but still marks it fresh and runs its ready-hooks: one copy
    call per parameter and step less for the host. ``'add'`` is left to the engine, which adds the gradient in.
    """
    buf = variable._grad
    return (variable._node is None and variable._grad_req == "write" and isinstance(buf, Tensor)
            and buf._data.dtype == dtype and buf._data.flags.c_contiguous)


def _reached(heads: Sequence[Tensor]) -> set[int]:
    """Ids of every tensor the recorded graph of ``heads`` reaches (heads included)."""
    seen: set[int] = set()
    stack = list(heads)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t._node is not None:
            stack.extend(p for p in t._node.parents if p._requires_grad())
    return seen


def capture(fn: Callable[..., Any], args: Sequence[Any], params: Sequence[Tensor], label: str) -> GraphedFunction:
    """Capture ``fn(*args)`` on the GPU of ``args``' tensors: its forward and, under ``record()``, its backward.

    Args:
        fn: a function of ``args`` returning a Tensor or a flat list/tuple of Tensors; it must issue only
            work a CUDA graph can record (no reads by the host, no random draws, GEMMs through
            :mod:`mxlite.device.blas`).
        args: the call's arguments; its Tensors become static inputs (their values are copied in on every
            call), other values are baked into the graph.
        params: the parameter tensors ``fn`` may read (their buffers are read by every launch, so new
            values need no new capture); those it reaches get their gradients from the backward graph.
        label: names the graphs in ``mx.device.graphs.info()``.

    Raises:
        mxlite.device.graphs.GraphUnavailableError: no GPU tensor, or no capturable GEMMs.
        mxlite.device.graphs.CaptureError: what ``fn`` does cannot be captured (the reason in words).
        Exception: any other error ``fn`` (or a backward it recorded) raises, unchanged: its own, not the
            capture's; ``fn`` ran once and nothing is kept.
    """
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not tensors or not tensors[0][1].device.is_gpu:
        raise _graphs.GraphUnavailableError("CUDA graphs need tensor arguments on a GPU")
    device = tensors[0][1].device
    recording, training = _state.is_recording(), _state.is_training()
    statics: dict[int, Tensor] = {}
    with device.use():
        for i, a in tensors:
            s = _face(a)(a._data.copy(), device)
            if recording and a._requires_grad() and np.issubdtype(a.dtype, np.floating):
                s._grad_req = "write"  # a variable of the captured backward (no buffer: grad() returns it)
            statics[i] = s
    static_args = [statics.get(i, a) for i, a in enumerate(args)]
    forward_graph, result = _graphs.capture(device, lambda: fn(*static_args), f"{label} forward")
    try:
        outputs, rebuild = _flatten(result)
        graphed = GraphedFunction(device, statics, outputs, rebuild, forward_graph)
        heads = [k for k, o in enumerate(outputs) if recording and o._requires_grad()]
        reached = _reached([outputs[k] for k in heads])
        inputs = [i for i, s in statics.items() if s._grad_req != "null" and id(s) in reached]
        used = [p for p in params if p._requires_grad() and id(p) in reached]
        if heads and (inputs or used):
            with device.use():
                head_bufs = [Tensor(device.xp.empty_like(outputs[k]._data), device) for k in heads]
            variables = [statics[i] for i in inputs] + used
            direct = [p for p in used if _writes_buffer(p, p.dtype)]
            direct_ids = {id(p) for p in direct}

            def capture_backward(into_buffers: bool) -> tuple[Any, list[Any]]:
                def backward() -> list[Any]:
                    grads = _grad([outputs[k] for k in heads], variables, head_bufs, retain_graph=True,
                                  train_mode=training)
                    if not all(isinstance(g, Tensor) for g in grads):
                        raise _graphs.CaptureError("a sparse gradient (Embedding(sparse_grad=True))",
                                                   "a row-sparse gradient changes size with every batch")
                    arrays = [g._data for g in grads]
                    for k, v in enumerate(variables):
                        if into_buffers and id(v) in direct_ids:
                            v._grad._data[...] = arrays[k]
                            arrays[k] = v._grad._data
                    return arrays

                what = "backward" if into_buffers else "backward (into no gradient buffer)"
                return _graphs.capture(device, backward, f"{label} {what}")

            graphed.backward_graph, graphed._grads = capture_backward(True)
            graphed._is_buffer = [id(v) in direct_ids for v in variables]
            graphed._heads, graphed._head_bufs = heads, head_bufs
            graphed._inputs, graphed._params = inputs, used
            graphed._direct, graphed._capture_backward = direct, capture_backward
    except BaseException:
        forward_graph.drop()
        raise
    return graphed
