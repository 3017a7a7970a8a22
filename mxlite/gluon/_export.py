"""``HybridBlock.export``: a block's forward traced into MXNet's ``path-symbol.json`` and ``path-%04d.params``.

mxlite runs eagerly and keeps no symbol graph, so export runs the forward once more, in inference mode under
``autograd.record()``, and writes down what ran, in MXNet's operator names and attributes. It runs on the example
inputs given, else on arrays of ones shaped as the block's last call since ``hybridize()`` (the block keeps
them: MXNet's order is ``hybridize()``, a call, ``export``). This module registers :func:`export_block` with
``block.py`` at import (``register_exporter``): it reads every layer, and the layers import ``block.py``.

* **Layers** of :data:`_LAYERS` (Dense, the convolutions, pooling, BatchNorm, Activation, Dropout, Flatten,
  Embedding, the leaky ReLUs, LayerNorm, InstanceNorm) describe themselves from their own settings, as MXNet
  Gluon's layers write them (``Dense`` -> ``FullyConnected`` with ``num_hidden``, ``no_bias``, ``flatten``). For
  the trace, each such layer's ``forward`` is wrapped: the real forward runs (later layers need its values),
  then its output is swapped for a fresh leaf with the same data, so the walk below stops there and a layer
  whose output is its input (Dropout in inference) still gets a node of its own.
* **Operations between layers** (``out + residual``, ``ops.relu``, ``ops.concat`` in ``Concatenate``, the
  ``mx.nd`` calls of a ``hybrid_forward``) are read from the recorded autograd graph
  (:func:`~mxlite.autograd.tensor.recorded_op`): each op's name, parents and arguments map to an MXNet
  operator by :data:`_OPS`. Scalar operands become ``_plus_scalar``-style operators; any other array that is
  neither an input nor a Parameter cannot be written and is refused, as is an op without an MXNet twin.

Variables are named by the parameters' structural names (``features.0.weight``: what ``save_parameters``
writes, so ``load_parameters`` reads the exported file too), the inputs ``data`` (one) or ``data0``,
``data1``, ... (several), as MXNet 1.x's export names them. The parameter file holds every parameter the graph
reads, as ``arg:<name>``, or ``aux:<name>`` for BatchNorm's moving statistics, in MXNet's binary format.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import autograd
from ..autograd.tensor import Tensor, recorded_op
from ..device import current_device
from ..formats.archive import save_mxnet_arrays
from ..formats.mxnet_symbol import Symbol, SymbolNode, aux_inputs, dtype_flag, format_attr
from ..ops.creation import array
from . import nn
from .block import Block, register_exporter
from .nn import basic_layers
from .parameter import Parameter
from .symbol_block import UNARY, SymbolBlock

__all__ = ["export_block", "trace_symbol"]

Entry = tuple[SymbolNode, int]  # one output of a node
_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def export_block(block: Block, path: str | os.PathLike, epoch: int = 0, inputs: Any = None
                 ) -> tuple[str, str]:
    """Write ``block``'s graph to ``path-symbol.json`` and its parameters to ``path-%04d.params`` (``epoch``).

    Returns:
        The two file names, symbol file first.

    Raises:
        ValueError: no ``inputs``, or a negative ``epoch``. TypeError: inputs that are not arrays.
        NotImplementedError: an operation or a constant array that MXNet's symbol file cannot hold (named).
    """
    if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
        raise ValueError(f"export: epoch must be an integer >= 0, got {epoch!r}")
    symbol, params = trace_symbol(block, inputs)
    base = os.fspath(path)
    sym_file, param_file = f"{base}-symbol.json", f"{base}-{int(epoch):04d}.params"
    aux = set(symbol.list_auxiliary_states())
    names = [("aux:" if name in aux else "arg:") + name for name in params]
    values = [value for _, value in params.values()]
    save_mxnet_arrays(param_file, values, names)  # first: it refuses what MXNet cannot hold before writing
    symbol.save(sym_file)
    return sym_file, param_file


def trace_symbol(block: Block, inputs: Any) -> tuple[Symbol, dict[str, tuple[Parameter, np.ndarray]]]:
    """Trace ``block``'s forward on ``inputs`` (an array or a list of arrays) into a Symbol.

    Returns:
        The Symbol, and every parameter it reads by variable name: ``(Parameter, value)`` in graph order.

    Raises:
        As :func:`export_block`.
    """
    examples = _example_list(block, inputs)
    device = _trace_device(block, examples)
    tracer = _Tracer(block, device)
    placeholders = [tracer.placeholder(value, "data" if len(examples) == 1 else f"data{i}")
                    for i, value in enumerate(examples)]
    if any(not p.is_initialized for p in block.collect_params().values()):
        with autograd.predict_mode():
            block(*placeholders)  # deferred shapes first, so every parameter is there to be recorded below
    with tracer.layers_described(), tracer.every_parameter_recorded(), autograd.record(train_mode=False):
        out = block(*placeholders)
        tracer.where = "the block's output"
        heads = [tracer.entry(t) for t in _output_tensors(out)]
    symbol = Symbol(heads)
    used = [n for n in symbol.list_inputs() if n in tracer.variables]
    unused = [name for name, p in block.collect_params().items() if name not in tracer.variables
              and id(p) not in {id(q) for q in tracer.variables.values()}]
    if unused:
        warnings.warn(f"export: parameters {unused} are not used by the forward pass; they are not written",
                      stacklevel=3)
    return symbol, {n: (tracer.variables[n], tracer.variables[n].data(device).asnumpy()) for n in used}


def _example_list(block: Block, inputs: Any) -> list[Any]:
    if inputs is None:
        signature = vars(block).get("_export_signature")
        if signature is None:
            raise ValueError("export: give example inputs (net.export('model', inputs=x)), or call the hybridized "
                             "block first (MXNet's order: hybridize(), a forward pass, export): mxlite traces the "
                             "forward on such inputs")
        return [array(np.ones(shape, dtype), device) for shape, dtype, device in signature]
    examples = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for i, value in enumerate(examples):
        if not isinstance(value, (Tensor, np.ndarray)):
            raise TypeError(f"export: input {i} must be an mxlite or NumPy array, got {type(value).__name__}")
    if not examples:
        raise ValueError("export: inputs is empty; give at least one example input")
    return examples


def _trace_device(block: Block, examples: list[Any]) -> Any:
    """The device the trace runs on: the first mxlite input's, else the parameters' first, else the current."""
    for value in examples:
        if isinstance(value, Tensor):
            return value.device
    for param in block.collect_params().values():
        if param.is_initialized:
            return param.list_device()[0]
    return current_device()


def _output_tensors(out: Any) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _output_tensors(item)]
    raise TypeError(f"export: the forward returned a {type(out).__name__}; only arrays (or lists of arrays) can "
                    "be graph outputs")


class _Tracer:
    """The graph being written: every traced tensor's node output, the variables, the node names used."""

    def __init__(self, block: Block, device: Any) -> None:
        self.block, self.device = block, device
        self.produced: dict[int, Entry] = {}
        self.keep: list[Tensor] = []  # holds every traced tensor alive, so no id() is reused during the trace
        self.variables: dict[str, Parameter] = {}
        self.variable_nodes: dict[int, Entry] = {}  # id(Parameter) -> its variable
        self.names: set[str] = set()
        self.where = "the block's input"
        self._tensor_params: dict[int, tuple[str, Parameter]] = {}
        self._param_names: dict[int, str] = {}

    # -- nodes ---------------------------------------------------------------------------------------------
    def unique(self, name: str) -> str:
        """``name``, or ``name`` with the smallest number appended that no node has yet."""
        candidate, n = name, 0
        while candidate in self.names:
            candidate, n = f"{name}{n}", n + 1
        self.names.add(candidate)
        return candidate

    def op(self, op: str, name: str, attrs: dict[str, Any], inputs: list[Entry]) -> Entry:
        """A new operator node reading ``inputs`` (its auxiliary inputs marked as MXNet marks them)."""
        aux = aux_inputs(op)
        node = SymbolNode(op, self.unique(name), {k: format_attr(v) for k, v in attrs.items()},
                          [(src, i, 1 if pos in aux else 0) for pos, (src, i) in enumerate(inputs)])
        return node, 0

    def auto_op(self, op: str, attrs: dict[str, Any], inputs: list[Entry]) -> Entry:
        """An operator node named as MXNet names unnamed ones: the operator in lower case and a number."""
        base = op.lstrip("_").lower()
        n = 0
        while f"{base}{n}" in self.names:
            n += 1
        return self.op(op, f"{base}{n}", attrs, inputs)

    def placeholder(self, value: Any, name: str) -> Tensor:
        """A fresh input tensor holding ``value`` on the trace device, registered as variable ``name``."""
        t = array(value.asnumpy() if isinstance(value, Tensor) else value, self.device, dtype=value.dtype)
        if np.issubdtype(t.dtype, np.floating):
            t.attach_grad()  # so that every op on it is recorded
        self.produced[id(t)] = (SymbolNode("null", self.unique(name)), 0)
        self.keep.append(t)
        return t

    def param(self, param: Parameter) -> Entry:
        """The variable node of ``param`` (created on first use, named by its structural name)."""
        known = self.variable_nodes.get(id(param))
        if known is not None:
            return known
        if not self._param_names:
            for name, p in self.block.collect_params().items():
                self._param_names.setdefault(id(p), name)
        name = self._param_names.get(id(param))
        if name is None:
            raise NotImplementedError(f"export: {self.where} reads Parameter {param.label!r}, which is not one of "
                                      "the block's own (collect_params()): register it on the block")
        if name in self.names:
            raise ValueError(f"export: parameter {name!r} has the name of an input or another node; rename it")
        attrs = {"__dtype__": dtype_flag(param.dtype), "__lr_mult__": float(param.lr_mult),
                 "__shape__": tuple(param.shape), "__storage_type__": 0, "__wd_mult__": float(param.wd_mult)}
        self.names.add(name)
        entry = (SymbolNode("null", name, {k: format_attr(v) for k, v in attrs.items()}), 0)
        self.variables[name] = param
        self.variable_nodes[id(param)] = entry
        return entry

    # -- tensors -> node outputs ---------------------------------------------------------------------------
    def mark(self, out: Tensor, entry: Entry) -> Tensor:
        """A fresh leaf with ``out``'s data standing for ``entry``: what later layers and ops see instead of ``out``."""
        leaf = out.__class__(out.array, out.device)
        if np.issubdtype(leaf.dtype, np.floating):
            leaf.attach_grad()
        self.produced[id(leaf)] = entry
        self.keep.append(leaf)
        return leaf

    def _lookup(self, t: Tensor) -> Entry | None:
        entry = self.produced.get(id(t))
        if entry is not None:
            return entry
        found = self._tensor_params.get(id(t))
        if found is None and recorded_op(t) is None:  # a leaf: maybe a parameter initialised since the last look
            self._index_parameters()
            found = self._tensor_params.get(id(t))
        return self.param(found[1]) if found is not None else None

    def _index_parameters(self) -> None:
        """Map each parameter's tensor on the trace device to it (parameters initialise during the forward)."""
        for name, p in self.block.collect_params().items():
            if p.is_initialized and self.device in p.list_device():
                self._tensor_params.setdefault(id(p.data(self.device)), (name, p))

    def is_constant(self, t: Tensor) -> bool:
        """Whether ``t`` is an array that is neither traced nor a parameter nor a recorded result."""
        return self._lookup(t) is None and recorded_op(t) is None

    def entry(self, t: Tensor) -> Entry:
        """The node output ``t`` stands for, writing the recorded ops that made it first (iteratively, so long
        chains of ops between two layers need no deep recursion).

        Raises:
            NotImplementedError: ``t`` comes from an op without an MXNet twin, or from a constant array.
        """
        if not isinstance(t, Tensor):
            raise TypeError(f"export: {self.where} receives a {type(t).__name__}, not an array")
        stack: list[tuple[Tensor, bool]] = [(t, False)]
        while stack:
            cur, ready = stack.pop()
            if self._lookup(cur) is not None:
                continue
            made = recorded_op(cur)
            if made is not None and made[0] not in _OPS:
                raise NotImplementedError(
                    f"export: operation {made[0]!r} (reached from {self.where}) has no MXNet operator mxlite can "
                    f"write; operations written between layers: {', '.join(sorted(_OPS))}")
            if made is None:
                raise NotImplementedError(
                    f"export: {self.where} reads an array of shape {cur.shape} that is neither an input, a "
                    "Parameter nor the result of a recorded operation (a constant, or the result of an op "
                    "without a gradient such as a comparison); MXNet's symbol file cannot hold it: make it a "
                    "Parameter (gluon.Constant for fixed values)")
            op, parents, _ = made
            if ready:
                self.produced[id(cur)] = self._translate(op, cur, made)
                self.keep.append(cur)
                continue
            stack.append((cur, True))
            if op not in _BINARY:  # a binary op's constant operand is a scalar attribute, not an input
                stack.extend((p, False) for p in reversed(parents))
            else:
                stack.extend((p, False) for p in reversed(parents) if not self.is_constant(p))
        entry = self._lookup(t)
        assert entry is not None
        return entry

    def _translate(self, op: str, out: Tensor, made: tuple[str, tuple[Tensor, ...], Any]) -> Entry:
        _, parents, call = made
        args = _bound(call) if call is not None else {}
        return _OPS[op](self, out, parents, args)

    @contextlib.contextmanager
    def every_parameter_recorded(self) -> Iterator[None]:
        """Make the trace record ops on parameters without gradient too (BatchNorm's statistics, frozen weights,
        Constants): their tensors read as needing one until the trace ends (no backward runs meanwhile)."""
        switched = []
        try:
            for p in self.block.collect_params().values():
                if p.is_initialized and self.device in p.list_device():
                    t = p.data(self.device)
                    if t.grad_req == "null":
                        t.grad_req = "write"
                        switched.append(t)
            yield
        finally:
            for t in switched:
                t.grad_req = "null"

    # -- layers --------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def layers_described(self) -> Iterator[None]:
        """Wrap the forward of every layer :data:`_LAYERS` describes; run without CUDA graphs meanwhile."""
        wrapped, graphs = [], []
        try:
            for prefix, layer in self.block._iter_blocks(""):
                path = prefix[:-1]  # "features.0." -> "features.0"; "" for the block itself
                if "_graphs" in vars(layer) and vars(layer)["_graphs"] is not None:
                    graphs.append((layer, vars(layer)["_graphs"]))
                    object.__setattr__(layer, "_graphs", None)  # a trace must run the Python forward
                emit = _LAYERS.get(type(layer))
                if emit is not None and "forward" not in vars(layer) and _describable(layer):
                    object.__setattr__(layer, "forward", self._described_forward(layer, path, emit))
                    wrapped.append(layer)
            yield
        finally:
            for layer in wrapped:
                vars(layer).pop("forward", None)
            for layer, g in graphs:
                object.__setattr__(layer, "_graphs", g)

    def _described_forward(self, layer: Block, path: str, emit: Callable[..., list[Entry]]) -> Callable[..., Any]:
        original = type(layer).forward
        name = path or type(layer).__name__.lower()

        def forward(*args: Any, **kwargs: Any) -> Any:
            out = original(layer, *args, **kwargs)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if kwargs or not all(isinstance(a, Tensor) for a in args) or not all(isinstance(o, Tensor) for o in outs):
                raise NotImplementedError(f"export: layer {name!r} ({type(layer).__name__}) must be called with "
                                          "arrays (no keyword arguments) and return arrays to be exported")
            self.where = f"the input of layer {name!r} ({type(layer).__name__})"
            entries = emit(self, layer, name, [self.entry(a) for a in args])
            marked = [self.mark(o, e) for o, e in zip(outs, entries)]
            return marked[0] if isinstance(out, Tensor) else type(out)(marked)

        return forward

    def activation(self, entry: Entry, act: str | None, name: str) -> Entry:
        """``entry`` followed by an ``Activation`` node when the layer has an activation."""
        if act is None:
            return entry
        return self.op("Activation", f"{name}_{act}_fwd", {"act_type": act}, [entry])


def _bound(call: tuple[Callable, tuple, dict]) -> dict[str, Any]:
    """The recorded call's arguments by parameter name, defaults filled in."""
    fn, args, kwargs = call
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _describable(layer: Block) -> bool:
    """Whether MXNet has one operator for ``layer`` as configured (else its ops are traced one by one)."""
    if isinstance(layer, nn.GELU):
        return layer._approximation == "erf"
    if isinstance(layer, nn.InstanceNorm):
        return layer._axis == 1
    return True


# -- layers, as MXNet Gluon writes them -----------------------------------------------------------------------
def _act_name(fn: Any) -> str | None:
    """The activation name of a layer's activation function (``Conv2D`` keeps only the function)."""
    if fn is None:
        return None
    return next(name for name, f in basic_layers._ACTIVATIONS.items() if f is fn)


def _layout(layer: Any, nd: int) -> str:
    return (_CHANNELS_LAST if layer._channels_last else _LAYOUTS)[nd]


def _dense(t: _Tracer, layer: nn.Dense, name: str, x: Entry) -> Entry:
    inputs = [x, t.param(layer.weight)] + ([t.param(layer.bias)] if layer.bias is not None else [])
    y = t.op("FullyConnected", f"{name}_fwd",
             {"flatten": layer._flatten, "no_bias": layer.bias is None, "num_hidden": layer._units}, inputs)
    return t.activation(y, layer._act_name, name)


def _conv(t: _Tracer, layer: Any, name: str, x: Entry) -> Entry:
    nd = len(layer._kernel)
    transposed = getattr(layer, "_transposed", False)
    attrs = {"dilate": layer._dilation, "kernel": layer._kernel, "layout": _layout(layer, nd),
             "no_bias": layer.bias is None, "num_filter": layer._channels, "num_group": layer._groups,
             "pad": layer._padding, "stride": layer._strides}
    if transposed:
        attrs["adj"] = layer._output_padding
    inputs = [x, t.param(layer.weight)] + ([t.param(layer.bias)] if layer.bias is not None else [])
    y = t.op("Deconvolution" if transposed else "Convolution", f"{name}_fwd", attrs, inputs)
    return t.activation(y, _act_name(layer._act), name)


def _pool(pool_type: str, t: _Tracer, layer: Any, name: str, x: Entry) -> Entry:
    nd = len(layer._pool)
    attrs = {"global_pool": False, "kernel": layer._pool, "layout": _layout(layer, nd), "pad": layer._padding,
             "pool_type": pool_type, "pooling_convention": "full" if layer._ceil else "valid",
             "stride": layer._strides}
    if pool_type == "avg":
        attrs["count_include_pad"] = layer._count_include_pad
    return t.op("Pooling", f"{name}_fwd", attrs, [x])


def _global_pool(pool_type: str, t: _Tracer, layer: Any, name: str, x: Entry) -> Entry:
    nd = layer._nd
    attrs = {"global_pool": True, "kernel": (1,) * nd, "layout": _layout(layer, nd), "pad": (0,) * nd,
             "pool_type": pool_type, "pooling_convention": "full", "stride": (1,) * nd}
    return t.op("Pooling", f"{name}_fwd", attrs, [x])


def _batch_norm(t: _Tracer, layer: nn.BatchNorm, name: str, x: Entry) -> Entry:
    attrs = {"axis": layer._axis, "eps": layer._eps, "fix_gamma": layer._fix_gamma, "momentum": layer._momentum,
             "use_global_stats": layer._use_global_stats}
    params = [layer.gamma, layer.beta, layer.running_mean, layer.running_var]
    return t.op("BatchNorm", f"{name}_fwd", attrs, [x] + [t.param(p) for p in params])


def _activation_layer(t: _Tracer, layer: nn.Activation, name: str, x: Entry) -> Entry:
    return t.op("Activation", f"{name}_fwd", {"act_type": layer._act_name}, [x])


def _dropout(t: _Tracer, layer: nn.Dropout, name: str, x: Entry) -> Entry:
    return t.op("Dropout", f"{name}_fwd", {"axes": layer._axes, "cudnn_off": False, "p": layer._rate}, [x])


def _flatten(t: _Tracer, layer: nn.Flatten, name: str, x: Entry) -> Entry:
    return t.op("Flatten", f"{name}_fwd", {}, [x])


def _embedding(t: _Tracer, layer: nn.Embedding, name: str, x: Entry) -> Entry:
    w = layer.weight
    attrs = {"dtype": np.dtype(w.dtype).name, "input_dim": w.shape[0], "output_dim": w.shape[1],
             "sparse_grad": layer._sparse_grad}
    return t.op("Embedding", f"{name}_fwd", attrs, [x, t.param(w)])


def _leaky(act_type: str, t: _Tracer, layer: Any, name: str, x: Entry) -> Entry:
    attrs: dict[str, Any] = {"act_type": act_type}
    inputs = [x]
    if act_type in ("leaky", "elu"):
        attrs["slope"] = layer._alpha
    elif act_type == "prelu":
        inputs.append(t.param(layer.alpha))
    return t.op("LeakyReLU", f"{name}_fwd", attrs, inputs)


def _layer_norm(t: _Tracer, layer: nn.LayerNorm, name: str, x: Entry) -> Entry:
    return t.op("LayerNorm", f"{name}_fwd", {"axis": layer._axis, "eps": layer._eps},
                [x, t.param(layer.gamma), t.param(layer.beta)])


def _instance_norm(t: _Tracer, layer: nn.InstanceNorm, name: str, x: Entry) -> Entry:
    return t.op("InstanceNorm", f"{name}_fwd", {"eps": layer._eps}, [x, t.param(layer.gamma), t.param(layer.beta)])


def _symbol_graph(t: _Tracer, block: SymbolBlock, name: str, inputs: list[Entry]) -> list[Entry]:
    """A SymbolBlock's own graph, its nodes renamed under the block's path (kept as they are at the top)."""
    if len(inputs) != len(block._input_names):
        raise NotImplementedError(f"export: SymbolBlock {name!r} takes {len(block._input_names)} inputs, got "
                                  f"{len(inputs)}")
    prefix = "" if block is t.block else name + "_"
    given = dict(zip(block._input_names, inputs))
    made: dict[int, Any] = {}  # id(node) -> function of an output index giving the written entry

    def at(entry: Entry) -> Callable[[int], Entry]:
        return lambda i: entry

    for node, _ in block._steps:
        if node.is_variable:
            entry = given[node.name] if node.name in given else t.param(block._reg_params[node.name])
            made[id(node)] = at(entry)
            continue
        new, _ = t.op(node.op, prefix + node.name, node.attrs, [made[id(src)](i) for src, i, _ in node.inputs])
        new.inputs = [(src, i, version) for (src, i, _), (_, _, version) in zip(new.inputs, node.inputs)]
        made[id(node)] = functools.partial(lambda n, i: (n, i), new)
    return [made[id(node)](i) for node, i in block._graph.heads]


def _single(emit: Callable[..., Entry]) -> Callable[..., list[Entry]]:
    """An emitter of a one-input, one-output layer, called with the list of the layer's inputs."""

    @functools.wraps(emit)
    def run(t: _Tracer, layer: Any, name: str, inputs: list[Entry]) -> list[Entry]:
        if len(inputs) != 1:
            raise NotImplementedError(f"export: layer {name!r} ({type(layer).__name__}) was called with "
                                      f"{len(inputs)} arrays; it is written for one")
        return [emit(t, layer, name, inputs[0])]

    return run


# Layer class (exactly: a subclass may compute something else) -> how it is written.
_ONE_INPUT: dict[type, Callable[..., Entry]] = {
    nn.Dense: _dense, nn.Conv2D: _conv, nn.Conv1D: _conv, nn.Conv3D: _conv, nn.Conv1DTranspose: _conv,
    nn.Conv2DTranspose: _conv, nn.Conv3DTranspose: _conv,
    **{cls: functools.partial(_pool, "max") for cls in (nn.MaxPool1D, nn.MaxPool2D, nn.MaxPool3D)},
    **{cls: functools.partial(_pool, "avg") for cls in (nn.AvgPool1D, nn.AvgPool2D, nn.AvgPool3D)},
    **{cls: functools.partial(_global_pool, "max") for cls in (nn.GlobalMaxPool1D, nn.GlobalMaxPool2D,
                                                               nn.GlobalMaxPool3D)},
    **{cls: functools.partial(_global_pool, "avg") for cls in (nn.GlobalAvgPool1D, nn.GlobalAvgPool2D,
                                                               nn.GlobalAvgPool3D)},
    nn.BatchNorm: _batch_norm, nn.SyncBatchNorm: _batch_norm, nn.Activation: _activation_layer,
    nn.Dropout: _dropout, nn.Flatten: _flatten, nn.Embedding: _embedding,
    nn.LeakyReLU: functools.partial(_leaky, "leaky"), nn.PReLU: functools.partial(_leaky, "prelu"),
    nn.ELU: functools.partial(_leaky, "elu"), nn.SELU: functools.partial(_leaky, "selu"),
    nn.GELU: functools.partial(_leaky, "gelu"), nn.LayerNorm: _layer_norm, nn.InstanceNorm: _instance_norm,
}
_LAYERS: dict[type, Callable[..., list[Entry]]] = {
    **{cls: _single(emit) for cls, emit in _ONE_INPUT.items()}, SymbolBlock: _symbol_graph}


# -- recorded operations, as MXNet names them -----------------------------------------------------------------
# mxlite op -> (MXNet op for equal shapes, for broadcasting shapes, tensor op scalar, scalar op tensor)
_BINARY: dict[str, tuple[str, str, str, str]] = {
    "add": ("elemwise_add", "broadcast_add", "_plus_scalar", "_plus_scalar"),
    "subtract": ("elemwise_sub", "broadcast_sub", "_minus_scalar", "_rminus_scalar"),
    "multiply": ("elemwise_mul", "broadcast_mul", "_mul_scalar", "_mul_scalar"),
    "divide": ("elemwise_div", "broadcast_div", "_div_scalar", "_rdiv_scalar"),
    "power": ("broadcast_power", "broadcast_power", "_power_scalar", "_rpower_scalar"),
    "maximum": ("broadcast_maximum", "broadcast_maximum", "_maximum_scalar", "_maximum_scalar"),
    "minimum": ("broadcast_minimum", "broadcast_minimum", "_minimum_scalar", "_minimum_scalar"),
}


def _scalar_text(t: Tensor) -> str:
    """A one-element constant as the shortest text that gives its value back in its dtype."""
    value = t.asnumpy().reshape(-1)[0]
    return str(value) if np.issubdtype(value.dtype, np.floating) else str(value.item())


def _binary(op: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    a, b = parents
    same, broadcast, scalar_right, scalar_left = _BINARY[op]
    for scalar, tensor, mx_op in ((b, a, scalar_right), (a, b, scalar_left)):
        if t.is_constant(scalar) and not t.is_constant(tensor):
            if scalar.size != 1 or scalar.ndim > tensor.ndim:
                raise NotImplementedError(
                    f"export: {op} of an array with a constant array of shape {scalar.shape} (reached from "
                    f"{t.where}); MXNet's symbol file holds only scalar constants: make it a Parameter")
            return t.auto_op(mx_op, {"scalar": _scalar_text(scalar)}, [t.entry(tensor)])
    return t.auto_op(same if a.shape == b.shape else broadcast, {}, [t.entry(a), t.entry(b)])


def _unary(op: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.auto_op(op, {}, [t.entry(parents[0])])


def _same_as_input(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.entry(parents[0])  # a change of face (mx.nd <-> mx.np) is no operation


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    return tuple(_axis(int(a), ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))


def _reshape_codes(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """MXNet reshape codes for ``in_shape -> out_shape``: 0 copies each leading dimension kept as it was (so the
    batch size is free), and -1 takes the one dimension left after them."""
    codes = list(out_shape)
    kept = 0
    while kept < min(len(in_shape), len(out_shape)) and in_shape[kept] == out_shape[kept]:
        codes[kept] = 0
        kept += 1
    if len(out_shape) - kept == 1:
        codes[-1] = -1
    return tuple(codes)


def _reshape(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    x = parents[0]
    return t.auto_op("Reshape", {"shape": _reshape_codes(x.shape, out.shape)}, [t.entry(x)])


def _transpose(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    x, axes = parents[0], args.get("axes", ())
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    perm = _axes(axes, x.ndim) if axes else tuple(reversed(range(x.ndim)))
    return t.auto_op("transpose", {"axes": perm}, [t.entry(x)])


def _join(op: str, key: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    tensors = args["tensors"]
    attrs = {key: _axis(int(args["axis"]), out.ndim), "num_args": len(tensors)}
    return t.auto_op(op, attrs, [t.entry(x) for x in tensors])


def _reduce(op: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    x = parents[0]
    attrs: dict[str, Any] = {"keepdims": bool(args.get("keepdims", False))}
    if args.get("axis") is not None:
        attrs["axis"] = _axes(args["axis"], x.ndim)
    return t.auto_op(op, attrs, [t.entry(x)])


def _clip(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    low, high = args["a_min"], args["a_max"]
    attrs = {"a_max": float("inf") if high is None else float(high), "a_min": float("-inf") if low is None else
             float(low)}
    return t.auto_op("clip", attrs, [t.entry(parents[0])])


def _softmax(op: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.auto_op(op, {"axis": int(args.get("axis", -1))}, [t.entry(parents[0])])


def _fully_connected(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    w, b = args["weight"], args.get("bias")
    inputs = [t.entry(args["x"]), t.entry(w)] + ([t.entry(b)] if b is not None else [])
    return t.auto_op("FullyConnected", {"flatten": bool(args.get("flatten", True)), "no_bias": b is None,
                                        "num_hidden": w.shape[0]}, inputs)


def _nd(value: Any, nd: int) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),) * nd


def _convolution(transposed: bool, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...],
                 args: dict[str, Any]) -> Entry:
    x, w, b = args["x"], args["weight"], args.get("bias")
    nd, groups = x.ndim - 2, int(args.get("groups", 1))
    attrs = {"dilate": _nd(args.get("dilation", 1), nd), "kernel": tuple(w.shape[2:]), "layout": _LAYOUTS[nd],
             "no_bias": b is None, "num_filter": w.shape[1] * groups if transposed else w.shape[0],
             "num_group": groups, "pad": _nd(args.get("padding", 0), nd), "stride": _nd(args.get("stride", 1), nd)}
    if transposed:
        attrs["adj"] = _nd(args.get("output_padding", 0), nd)
    inputs = [t.entry(x), t.entry(w)] + ([t.entry(b)] if b is not None else [])
    return t.auto_op("Deconvolution" if transposed else "Convolution", attrs, inputs)


def _pooling(pool_type: str, t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    x = args["x"]
    nd = x.ndim - 2
    kernel = _nd(args["pool_size"], nd)
    attrs = {"global_pool": False, "kernel": kernel, "layout": _LAYOUTS[nd], "pad": _nd(args.get("padding", 0), nd),
             "pool_type": pool_type, "pooling_convention": "full" if args.get("ceil_mode") else "valid",
             "stride": kernel if args.get("strides") is None else _nd(args["strides"], nd)}
    if pool_type == "avg":
        attrs["count_include_pad"] = bool(args.get("count_include_pad", True))
    return t.auto_op("Pooling", attrs, [t.entry(x)])


def _batch_norm_op(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    attrs = {"axis": int(args["axis"]), "eps": float(args["eps"]), "fix_gamma": bool(args["fix_gamma"]),
             "momentum": float(args["momentum"]), "use_global_stats": bool(args["use_global_stats"])}
    names = ("x", "gamma", "beta", "running_mean", "running_var")
    return t.auto_op("BatchNorm", attrs, [t.entry(args[n]) for n in names])


def _layer_norm_op(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.auto_op("LayerNorm", {"axis": int(args["axis"]), "eps": float(args["eps"])},
                     [t.entry(args[n]) for n in ("x", "gamma", "beta")])


def _embedding_op(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    w, idx = args["weight"], args["indices"]
    if not isinstance(idx, Tensor):
        raise NotImplementedError(f"export: an embedding looked up with constant indices (reached from {t.where}) "
                                  "cannot be written; pass the indices as an input")
    attrs = {"dtype": np.dtype(w.dtype).name, "input_dim": w.shape[0], "output_dim": w.shape[1],
             "sparse_grad": bool(args.get("sparse_grad", False))}
    return t.auto_op("Embedding", attrs, [t.entry(idx), t.entry(w)])


def _cast(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.auto_op("Cast", {"dtype": np.dtype(out.dtype).name}, [t.entry(parents[0])])


def _matmul(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    a, b = parents
    if a.ndim == b.ndim == 2:
        return t.auto_op("dot", {}, [t.entry(a), t.entry(b)])
    if a.ndim == b.ndim == 3 and a.shape[0] == b.shape[0]:
        return t.auto_op("batch_dot", {}, [t.entry(a), t.entry(b)])
    raise NotImplementedError(f"export: a matrix product of shapes {a.shape} and {b.shape} (reached from {t.where}) "
                              "has no MXNet operator mxlite writes (dot: two 2-D arrays; batch_dot: two 3-D ones)")


def _getitem(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    """Basic indexing (ints, slices, ``...``) as MXNet's ``slice``, then a ``Reshape`` dropping integer-indexed axes."""
    x = parents[0]
    key = args["key"] if isinstance(args["key"], tuple) else (args["key"],)
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (x.ndim - len(key) + 1) + key[at + 1:]
    key = key + (slice(None),) * (x.ndim - len(key))
    begin, end, step, dropped = [], [], [], False
    for dim, k in zip(x.shape, key):
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) % dim
            begin, end, step, dropped = begin + [i], end + [i + 1], step + [1], True
        elif isinstance(k, slice):
            begin, end, step = begin + [k.start], end + [k.stop], step + [k.step]
        else:
            raise NotImplementedError(f"export: indexing with {type(k).__name__} (reached from {t.where}) has no MXNet "
                                      "operator mxlite writes; basic indexing (ints, slices, ...) has")
    if len(key) != x.ndim:
        raise NotImplementedError(f"export: indexing {x.ndim} axes with {len(key)} entries (reached from {t.where})")
    entry = t.auto_op("slice", {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)}, [t.entry(x)])
    if not dropped:
        return entry
    kept = tuple(len(range(*k.indices(dim))) if isinstance(k, slice) else 1 for dim, k in zip(x.shape, key))
    return t.auto_op("Reshape", {"shape": _reshape_codes(kept, out.shape)}, [entry])


def _broadcast_to(t: _Tracer, out: Tensor, parents: tuple[Tensor, ...], args: dict[str, Any]) -> Entry:
    return t.auto_op("broadcast_to", {"shape": tuple(out.shape)}, [t.entry(parents[0])])


# mxlite op (a recorded node's name) -> how it is written.
_OPS: dict[str, Callable[..., Entry]] = {
    **{op: functools.partial(_binary, op) for op in _BINARY},
    **{op: functools.partial(_unary, op) for op in UNARY},
    "as_nd_ndarray": _same_as_input, "as_np_ndarray": _same_as_input,
    "reshape": _reshape, "transpose": _transpose, "clip": _clip, "astype": _cast, "matmul": _matmul,
    "concat": functools.partial(_join, "Concat", "dim"), "stack": functools.partial(_join, "stack", "axis"),
    **{op: functools.partial(_reduce, op) for op in ("sum", "mean", "max", "min")},
    "softmax": functools.partial(_softmax, "softmax"), "log_softmax": functools.partial(_softmax, "log_softmax"),
    "fully_connected": _fully_connected, "conv": functools.partial(_convolution, False),
    "conv2d": functools.partial(_convolution, False), "conv_transpose": functools.partial(_convolution, True),
    "max_pool": functools.partial(_pooling, "max"), "max_pool2d": functools.partial(_pooling, "max"),
    "avg_pool": functools.partial(_pooling, "avg"), "avg_pool2d": functools.partial(_pooling, "avg"),
    "batch_norm": _batch_norm_op, "layer_norm": _layer_norm_op, "embedding": _embedding_op,
    "broadcast_to": _broadcast_to, "getitem": _getitem,
}


register_exporter(export_block)  # Block.export calls it
