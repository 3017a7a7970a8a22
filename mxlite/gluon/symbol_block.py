"""``gluon.SymbolBlock``: a Block that runs a symbol graph, such as the files MXNet's ``HybridBlock.export`` writes.

``SymbolBlock.imports('net-symbol.json', ['data'], 'net-0000.params')`` reads the graph
(:mod:`mxlite.formats.mxnet_symbol`), makes a Parameter for every variable that is not an input (named as the
variable, ``grad_req='null'`` for auxiliary states such as BatchNorm's moving statistics) and loads their
values. Calling the block evaluates the graph's nodes in order with mxlite's differentiable ops, so it trains,
runs on any device and hybridizes like any Block.

Each MXNet operator is built once, when the block is made, from its attributes (:data:`_OPS`): a missing or
malformed attribute, an attribute mxlite does not implement (``Pooling``'s ``pool_type='lp'``, ...), and every
operator mxlite lacks are reported then, naming the node, rather than at the first call. Attributes that only
tune MXNet's kernels (``workspace``, ``cudnn_tune``, ``cudnn_off``) and the ``__dunder__`` ones are ignored.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import autograd, ops
from ..autograd.tensor import Tensor
from ..formats.mxnet_symbol import (
    Symbol,
    SymbolNode,
    flag_dtype,
    load,
    parse_bool,
    parse_float,
    parse_int,
    parse_ints,
    var,
)
from ..ops import activations, nn_ops
from ..ops.core import nd_reshape_shape
from .block import Block
from .nn import basic_layers
from .nn.norm_layers import instance_norm
from .parameter import Parameter

__all__ = ["UNARY", "SymbolBlock"]

# Elementwise functions with the same name in MXNet and in mxlite's ops.
UNARY = ("negative", "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu", "abs", "reciprocal", "rsqrt", "sin",
         "cos", "tan", "erf", "log1p", "expm1", "cbrt", "sinh", "cosh", "arctan", "arcsin", "arccos", "log2", "log10")

Runner = Callable[[list[Tensor]], list[Tensor]]
_REQUIRED = object()
_KERNEL_TUNING = frozenset({"workspace", "cudnn_tune", "cudnn_off"})


class SymbolBlock(Block):
    """Runs the graph of ``outputs`` on ``inputs`` (MXNet Gluon's ``SymbolBlock``).

    Args:
        outputs: a :class:`~mxlite.formats.mxnet_symbol.Symbol` (``mx.sym.load(...)``, or one output of its
            ``get_internals()``), or a list of them: the block's outputs, in order.
        inputs: the graph's input variables, as ``mx.sym.var('data')`` Symbols or names, in call order.
        params: Parameters to use for variables of the same name (shared with another block), else
            each other variable gets a new Parameter of its name (shape and dtype from its ``__shape__`` and
            ``__dtype__`` attributes when given).

    Calling the block with one array per input returns the output (a list for several outputs).

    Raises:
        ValueError: an input that is not a variable of the graph, or an attribute mxlite cannot read (names
            the node). NotImplementedError: operators or attribute values mxlite lacks (names each operator and
            its nodes).
    """

    def __init__(self, outputs: Symbol | Sequence[Symbol], inputs: Any, params: Any = None) -> None:
        super().__init__()
        heads = [h for s in ([outputs] if isinstance(outputs, Symbol) else outputs) for h in _symbol(s).heads]
        graph = Symbol(heads)
        names = _input_names(inputs)
        nodes = graph.topological_nodes()
        variables = [n.name for n in nodes if n.is_variable]
        missing = [n for n in names if n not in variables]
        if missing:
            raise ValueError(f"SymbolBlock: inputs {missing} are not variables of the graph; its variables are "
                             f"{variables[:8]}{' ...' if len(variables) > 8 else ''}")
        self._graph, self._input_names = graph, names
        self._steps = _compile(nodes)
        aux = set(graph.list_auxiliary_states())
        if params is not None and not hasattr(params, "keys"):
            raise TypeError(f"SymbolBlock: params must be a dict or ParameterDict, got {type(params).__name__}")
        shared = dict(params.items()) if params is not None else {}  # (ParameterDict.get would create one)
        for node in nodes:
            if node.is_variable and node.name not in names:
                given = shared.get(node.name)
                self._reg_params[node.name] = given if isinstance(given, Parameter) else _parameter(
                    node, aux=node.name in aux)

    @staticmethod
    def imports(symbol_file: str | os.PathLike, input_names: str | Sequence[str],
                param_file: str | os.PathLike | None = None, device: Any = None, ctx: Any = None,
                allow_missing: bool = False, ignore_extra: bool = False) -> SymbolBlock:
        """A SymbolBlock of the graph in ``symbol_file`` (``net-symbol.json``) on the inputs ``input_names``.

        ``param_file`` (``net-0000.params``, MXNet's format with ``arg:``/``aux:`` names, or an mxlite ``.npz``)
        gives the parameters' values, loaded on ``device`` (``ctx``: MXNet 1.x's name) with the file's dtypes;
        every parameter must be in it unless ``allow_missing``, and every array in it must be a parameter unless
        ``ignore_extra``.

        Raises:
            FileNotFoundError: a missing file. ValueError: a file that cannot be read, or parameters that do not
                fit (every problem listed). NotImplementedError: as :class:`SymbolBlock`.
        """
        names = [input_names] if isinstance(input_names, str) else list(input_names)
        block = SymbolBlock(load(symbol_file), [var(n) for n in names])
        if param_file is not None:
            block.load_parameters(param_file, device=device if ctx is None else ctx, allow_missing=allow_missing,
                                  ignore_extra=ignore_extra, cast_dtype=True, dtype_source="saved")
        return block

    def forward(self, *args: Any) -> Any:
        """Evaluate the graph on one array per input (in the order of ``inputs``).

        Raises:
            TypeError: a wrong number of inputs. RuntimeError: a parameter with no value yet.
        """
        if len(args) != len(self._input_names):
            raise TypeError(f"SymbolBlock takes {len(self._input_names)} inputs {self._input_names}, got {len(args)}")
        given = dict(zip(self._input_names, args))
        first = next((a for a in args if isinstance(a, Tensor)), None)
        device = first.device if first is not None else None
        values: dict[int, list[Tensor]] = {}
        for node, run in self._steps:
            if not node.is_variable:
                values[id(node)] = run([values[id(src)][i] for src, i, _ in node.inputs])
            elif node.name in given:
                values[id(node)] = [given[node.name]]
            else:
                values[id(node)] = [self._value(node.name, device)]
        out = [values[id(node)][i] for node, i in self._graph.heads]
        return out[0] if len(out) == 1 else out

    def _value(self, name: str, device: Any) -> Tensor:
        param = self._reg_params[name]
        if not param.is_initialized:
            shape = param.shape
            if shape is None or any(d <= 0 for d in shape):
                raise RuntimeError(f"SymbolBlock: parameter {name!r} has no value and its shape {shape} is not "
                                   "known: load its value (imports(..., param_file) or load_parameters)")
            param._finish_deferred_init()
        return param.data(device) if device is not None else param.data()

    def __repr__(self) -> str:
        return f"SymbolBlock(\n{self._graph!r} : {len(self._input_names)} -> {len(self._graph)}\n)"  # MXNet's


def _symbol(value: Any) -> Symbol:
    if not isinstance(value, Symbol):
        raise TypeError(f"SymbolBlock: outputs must be Symbols (mx.sym.load), got {type(value).__name__}")
    return value


def _input_names(inputs: Any) -> list[str]:
    items = inputs if isinstance(inputs, (list, tuple)) else [inputs]
    names = []
    for item in items:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, Symbol) and len(item) == 1 and item.heads[0][0].is_variable:
            names.append(item.heads[0][0].name)
        else:
            raise TypeError(f"SymbolBlock: an input must be a variable (mx.sym.var('data')) or its name, got {item!r}")
    return names


def _parameter(node: SymbolNode, aux: bool) -> Parameter:
    """A new Parameter for variable ``node``, with the shape, dtype and multipliers its attributes give."""
    attrs = _Attrs(node)
    shape = attrs.ints("__shape__", None) or None  # "()": not known
    flag = attrs.int("__dtype__", 0)
    try:
        dtype = flag_dtype(flag) if flag >= 0 else np.dtype(np.float32)  # -1: not known, MXNet's default
    except ValueError as exc:
        raise attrs.error(str(exc)) from None
    return Parameter(node.name, grad_req="null" if aux else "write",
                     shape=None if shape is None else tuple(d if d is not None else 0 for d in shape),
                     dtype=dtype, lr_mult=attrs.float("__lr_mult__", 1.0), wd_mult=attrs.float("__wd_mult__", 1.0),
                     allow_deferred_init=True)


def _compile(nodes: list[SymbolNode]) -> list[tuple[SymbolNode, Runner | None]]:
    """Build every operator node's runner, checking the inputs' output indices; all operators mxlite lacks at
    once in one error."""
    lacking: dict[str, list[str]] = {}
    for node in nodes:
        if not node.is_variable and node.op not in _OPS:
            lacking.setdefault(node.op, []).append(node.name)
    if lacking:
        listed = "; ".join(f"{op!r} (node{'s' if len(ns) > 1 else ''} {', '.join(map(repr, ns[:3]))}"
                           f"{' ...' if len(ns) > 3 else ''})" for op, ns in lacking.items())
        raise NotImplementedError(f"SymbolBlock: the graph uses operators mxlite does not implement: {listed}. "
                                  f"mxlite runs {len(_OPS)} MXNet operators: {', '.join(sorted(_OPS))}")
    steps: list[tuple[SymbolNode, Runner | None]] = []
    outputs: dict[int, int] = {}
    for node in nodes:
        for src, i, _ in node.inputs:
            if i >= outputs[id(src)]:
                raise NotImplementedError(f"SymbolBlock: node {node.name!r} reads output {i} of node {src.name!r} "
                                          f"({src.op}); mxlite computes only its first {outputs[id(src)]}")
        if node.is_variable:
            steps.append((node, None))
            outputs[id(node)] = 1
            continue
        attrs = _Attrs(node)
        run, count = _OPS[node.op](attrs)
        attrs.finish()
        steps.append((node, run))
        outputs[id(node)] = count
    return steps


class _Attrs:
    """A node's attributes, read with MXNet's defaults; errors name the node, the attribute and its text."""

    def __init__(self, node: SymbolNode) -> None:
        self.node, self.read = node, set()

    def error(self, what: str) -> ValueError:
        return ValueError(f"SymbolBlock: node {self.node.name!r} ({self.node.op}): {what}")

    def _text(self, key: str, default: Any) -> str | None:
        self.read.add(key)
        text = self.node.attrs.get(key)
        if text is None and default is _REQUIRED:
            raise self.error(f"attribute {key!r} is required")
        return text

    def _parse(self, key: str, default: Any, parse: Callable[[str], Any]) -> Any:
        text = self._text(key, default)
        if text is None or (default is not _REQUIRED and text in ("None", "")):
            return default
        try:
            return parse(text)
        except ValueError as exc:
            raise self.error(f"attribute {key!r}: {exc}") from None

    def int(self, key: str, default: Any = _REQUIRED) -> Any:
        """An integer attribute (``default`` when absent)."""
        return self._parse(key, default, parse_int)

    def float(self, key: str, default: Any = _REQUIRED) -> Any:
        """A real-number attribute."""
        return self._parse(key, default, parse_float)

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        """A True/False attribute."""
        return self._parse(key, default, parse_bool)

    def ints(self, key: str, default: Any = _REQUIRED, length: int | None = None) -> Any:
        """A tuple attribute; with ``length``, of exactly that many integers (a single one is repeated)."""
        value = self._parse(key, default, parse_ints)
        if value is default or length is None:
            return value
        if len(value) == 1 and length > 1:
            value = value * length
        if len(value) != length or any(v is None for v in value):
            raise self.error(f"attribute {key!r} must hold {length} integers, got {self.node.attrs.get(key)!r}")
        return value

    def text(self, key: str, default: Any = _REQUIRED, choices: Sequence[Any] | None = None) -> Any:
        """A string attribute; with ``choices``, one of them (NotImplementedError naming the others)."""
        text = self._text(key, default)
        value = default if text is None else text
        if choices is not None and value not in choices:
            raise NotImplementedError(f"SymbolBlock: node {self.node.name!r} ({self.node.op}): {key}={value!r} is "
                                      f"not supported by mxlite; supported: {[c for c in choices if c is not None]}")
        return value

    def inputs(self, *counts: int) -> None:
        """Check the node has one of ``counts`` inputs."""
        if len(self.node.inputs) not in counts:
            raise self.error(f"has {len(self.node.inputs)} inputs, expected "
                             f"{' or '.join(map(str, counts))}")

    def finish(self, ignored: frozenset[str] = _KERNEL_TUNING) -> None:
        """Refuse attributes the operator's builder did not read (mxlite would silently not apply them)."""
        unread = [k for k in self.node.attrs if k not in self.read and k not in ignored
                  and not (k.startswith("__") and k.endswith("__"))]
        if unread:
            raise NotImplementedError(f"SymbolBlock: node {self.node.name!r} ({self.node.op}): mxlite does not "
                                      f"implement its attributes {unread}")


def _one(fn: Callable[..., Tensor]) -> Callable[[list[Tensor]], list[Tensor]]:
    """A runner from a function of the input tensors giving one output."""
    return lambda xs: [fn(*xs)]


def _nd_of(x: Tensor) -> int:
    return x.ndim - 2


_FIRST = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def _layout(a: _Attrs, nd: int) -> bool:
    """Whether the node's ``layout`` is channels-last (else channels-first, MXNet's default)."""
    return a.text("layout", None, (None, _FIRST.get(nd), _LAST.get(nd))) == _LAST.get(nd)


def _first(x: Tensor) -> Tensor:
    return ops.transpose(x, (0, x.ndim - 1) + tuple(range(1, x.ndim - 1)))


def _last(x: Tensor) -> Tensor:
    return ops.transpose(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _channels_last(fn: Callable[..., Tensor], last: bool) -> Callable[..., Tensor]:
    """``fn`` run on channels-first views (its input and, for convolutions, its weight) when ``last``."""
    if not last:
        return fn

    def run(x: Tensor, *rest: Tensor) -> Tensor:
        moved = [_first(r) if r.ndim == x.ndim else r for r in rest]
        return _last(fn(_first(x), *moved))

    return run


# -- operators -------------------------------------------------------------------------------------------------
def _convolution(a: _Attrs) -> tuple[Runner, int]:
    kernel = a.ints("kernel")
    nd = len(kernel)
    if nd not in (1, 2, 3):
        raise a.error(f"kernel {kernel} must have 1, 2 or 3 entries")
    stride, dilate = a.ints("stride", (1,) * nd, nd), a.ints("dilate", (1,) * nd, nd)
    pad, groups = a.ints("pad", (0,) * nd, nd), a.int("num_group", 1)
    num_filter, no_bias = a.int("num_filter"), a.bool("no_bias", False)
    a.inputs(2 if no_bias else 3)

    def conv(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        if w.shape[0] != num_filter or tuple(w.shape[2:]) != kernel:
            raise a.error(f"weight of shape {w.shape} does not fit num_filter={num_filter}, kernel={kernel}")
        return nn_ops.conv(x, w, b, stride=stride, padding=pad, dilation=dilate, groups=groups)

    return _one(_channels_last(conv, _layout(a, nd))), 1


def _deconvolution(a: _Attrs) -> tuple[Runner, int]:
    kernel = a.ints("kernel")
    nd = len(kernel)
    stride, dilate = a.ints("stride", (1,) * nd, nd), a.ints("dilate", (1,) * nd, nd)
    pad, adj = a.ints("pad", (0,) * nd, nd), a.ints("adj", (0,) * nd, nd)
    if a.ints("target_shape", ()):
        raise NotImplementedError(f"SymbolBlock: node {a.node.name!r} (Deconvolution): target_shape is not "
                                  "supported by mxlite; give pad and adj")
    groups, no_bias = a.int("num_group", 1), a.bool("no_bias", True)
    a.int("num_filter")
    a.inputs(2 if no_bias else 3)

    def deconv(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        return nn_ops.conv_transpose(x, w, b, stride=stride, padding=pad, output_padding=adj, dilation=dilate,
                                     groups=groups)

    return _one(_channels_last(deconv, _layout(a, nd))), 1


def _fully_connected(a: _Attrs) -> tuple[Runner, int]:
    num_hidden, no_bias, flatten = a.int("num_hidden"), a.bool("no_bias", False), a.bool("flatten", True)
    a.inputs(2 if no_bias else 3)

    def fc(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
        if w.shape[0] != num_hidden:
            raise a.error(f"weight of shape {w.shape} does not fit num_hidden={num_hidden}")
        return nn_ops.fully_connected(x, w, b, flatten=flatten)

    return _one(fc), 1


def _log_sigmoid(x: Tensor) -> Tensor:
    return ops.negative(basic_layers._ACTIVATIONS["softrelu"](ops.negative(x)))  # log(1 / (1 + e^-x))


def _mish(x: Tensor) -> Tensor:
    return ops.multiply(x, ops.tanh(basic_layers._ACTIVATIONS["softrelu"](x)))


def _activation(a: _Attrs) -> tuple[Runner, int]:
    kinds = {**basic_layers._ACTIVATIONS, "log_sigmoid": _log_sigmoid, "mish": _mish}
    return _one(kinds[a.text("act_type", _REQUIRED, tuple(kinds))]), 1


def _leaky_relu(a: _Attrs) -> tuple[Runner, int]:
    act = a.text("act_type", "leaky", ("leaky", "prelu", "elu", "selu", "gelu"))
    slope = a.float("slope", 0.25)
    a.read.update({"lower_bound", "upper_bound"})  # rrelu's only
    a.inputs(2 if act == "prelu" else 1)
    runs: dict[str, Callable[..., Tensor]] = {
        "leaky": lambda x: activations.leaky_relu(x, slope), "prelu": activations.prelu,
        "elu": lambda x: activations.elu(x, slope), "selu": activations.selu,
        "gelu": lambda x: activations.gelu(x, "erf")}
    return _one(runs[act]), 1


def _batch_norm(a: _Attrs) -> tuple[Runner, int]:
    eps, momentum = a.float("eps", 1e-3), a.float("momentum", 0.9)
    fix_gamma, global_stats = a.bool("fix_gamma", True), a.bool("use_global_stats", False)
    axis = a.int("axis", 1)
    if a.bool("output_mean_var", False):
        raise NotImplementedError(f"SymbolBlock: node {a.node.name!r} (BatchNorm): output_mean_var=True is not "
                                  "supported by mxlite")
    a.inputs(5)

    def bn(x: Tensor, gamma: Tensor, beta: Tensor, mean: Tensor, variance: Tensor) -> Tensor:
        return nn_ops.batch_norm(x, gamma, beta, mean, variance, axis=axis, eps=eps, momentum=momentum,
                                 training=autograd.is_training(), use_global_stats=global_stats, fix_gamma=fix_gamma)

    return _one(bn), 1


def _pooling(a: _Attrs) -> tuple[Runner, int]:
    pool_type = a.text("pool_type", "max", ("max", "avg"))
    global_pool = a.bool("global_pool", False)
    convention = a.text("pooling_convention", "valid", ("valid", "full"))
    include_pad = a.bool("count_include_pad", True)
    kernel = a.ints("kernel", None if global_pool else _REQUIRED)
    nd = len(kernel) if kernel is not None else None
    if nd is None:
        layout = a.text("layout", None, (None, *_FIRST.values(), *_LAST.values()))
        last = layout in _LAST.values()
    else:
        last = _layout(a, nd)
    a.read.add("p_value")  # lp pooling's only
    if global_pool:
        fn = nn_ops.global_max_pool if pool_type == "max" else nn_ops.global_avg_pool
        a.read.update({"stride", "pad"})
        return _one(_channels_last(fn, last)), 1
    stride, pad = a.ints("stride", (1,) * nd, nd), a.ints("pad", (0,) * nd, nd)
    ceil = convention == "full"
    if pool_type == "max":
        def pool(x: Tensor) -> Tensor:
            return nn_ops.max_pool(x, kernel, stride, pad, ceil_mode=ceil)
    else:
        def pool(x: Tensor) -> Tensor:
            return nn_ops.avg_pool(x, kernel, stride, pad, ceil_mode=ceil, count_include_pad=include_pad)
    return _one(_channels_last(pool, last)), 1


def _dropout(a: _Attrs) -> tuple[Runner, int]:
    p, axes = a.float("p", 0.5), a.ints("axes", ())
    mode = a.text("mode", "training", ("training", "always"))
    return _one(lambda x: nn_ops.dropout(x, p, tuple(axes), training=None if mode == "training" else True)), 1


def _reshape(a: _Attrs) -> tuple[Runner, int]:
    shape, reverse = a.ints("shape"), a.bool("reverse", False)
    if a.ints("target_shape", ()) or a.bool("keep_highest", False):
        raise NotImplementedError(f"SymbolBlock: node {a.node.name!r} (Reshape): the legacy target_shape and "
                                  "keep_highest are not supported by mxlite; use shape")
    return _one(lambda x: ops.reshape(x, nd_reshape_shape(x.shape, list(shape), reverse))), 1


def _softmax(log: bool, a: _Attrs) -> tuple[Runner, int]:
    axis, temperature = a.int("axis", -1), a.float("temperature", None)
    if a.bool("use_length", False):
        raise NotImplementedError(f"SymbolBlock: node {a.node.name!r}: use_length=True is not supported by mxlite")
    a.read.add("dtype")  # the output dtype of mixed precision; mxlite keeps the input's

    def run(x: Tensor) -> Tensor:
        if temperature is not None and temperature != 1.0:
            x = ops.divide(x, temperature)
        return (nn_ops.log_softmax if log else nn_ops.softmax)(x, axis=axis)

    return _one(run), 1


def _softmax_activation(a: _Attrs) -> tuple[Runner, int]:
    mode = a.text("mode", "instance", ("instance", "channel"))

    def run(x: Tensor) -> Tensor:
        if mode == "channel":
            return nn_ops.softmax(x, axis=1)
        return ops.reshape(nn_ops.softmax(ops.reshape(x, (x.shape[0], -1)), axis=1), x.shape)

    return _one(run), 1


def _softmax_output(a: _Attrs) -> tuple[Runner, int]:
    multi, preserve = a.bool("multi_output", False), a.bool("preserve_shape", False)
    a.read.update({"grad_scale", "ignore_label", "use_ignore", "normalization", "out_grad", "smooth_alpha"})

    def run(x: Tensor, *label: Tensor) -> Tensor:
        if autograd.is_recording():
            raise NotImplementedError(f"SymbolBlock: node {a.node.name!r} (SoftmaxOutput) runs for inference only "
                                      "in mxlite: its training gradient comes from the label; put a loss on the "
                                      "output of the layer before it instead")
        if multi or preserve:
            return nn_ops.softmax(x, axis=1 if multi else -1)
        return ops.reshape(nn_ops.softmax(ops.reshape(x, (x.shape[0], -1)), axis=1), x.shape)

    return _one(run), 1


def _join(fn: Callable[..., Tensor], key: str, default: int, a: _Attrs) -> tuple[Runner, int]:
    axis, count = a.int(key, default), a.int("num_args", len(a.node.inputs))
    if count != len(a.node.inputs):
        raise a.error(f"num_args={count} but the node has {len(a.node.inputs)} inputs")
    return (lambda xs: [fn(list(xs), axis=axis)]), 1


def _binary(fn: Callable[..., Tensor], a: _Attrs) -> tuple[Runner, int]:
    a.inputs(2)
    return _one(fn), 1


def _scalar(fn: Callable[..., Tensor], scalar_first: bool, a: _Attrs) -> tuple[Runner, int]:
    scalar = a.float("scalar")
    a.read.add("is_int")
    a.inputs(1)
    return _one(lambda x: fn(scalar, x) if scalar_first else fn(x, scalar)), 1


def _add_n(a: _Attrs) -> tuple[Runner, int]:
    a.read.add("num_args")
    return (lambda xs: [functools.reduce(ops.add, xs)]), 1


def _unary(fn: Callable[[Tensor], Tensor], a: _Attrs) -> tuple[Runner, int]:
    a.inputs(1)
    return _one(fn), 1


def _clip(a: _Attrs) -> tuple[Runner, int]:
    low, high = a.float("a_min"), a.float("a_max")
    return _one(lambda x: ops.clip(x, low, high)), 1


def _transpose(a: _Attrs) -> tuple[Runner, int]:
    axes = a.ints("axes", ())
    return _one(lambda x: ops.transpose(x, tuple(axes)) if axes else ops.transpose(x)), 1


def _expand_dims(a: _Attrs) -> tuple[Runner, int]:
    axis = a.int("axis")
    return _one(lambda x: ops.expand_dims(x, axis)), 1


def _squeeze(a: _Attrs) -> tuple[Runner, int]:
    axis = a.ints("axis", None)
    return _one(lambda x: ops.squeeze(x, None if axis is None else tuple(axis))), 1


def _swapaxes(a: _Attrs) -> tuple[Runner, int]:
    dim1, dim2 = a.int("dim1", 0), a.int("dim2", 0)
    return _one(lambda x: ops.swapaxes(x, dim1, dim2)), 1


def _slice_axis(a: _Attrs) -> tuple[Runner, int]:
    axis, begin, end = a.int("axis"), a.int("begin"), a.int("end", None)
    return _one(lambda x: ops.slice_axis(x, axis, begin, end)), 1


def _cast(a: _Attrs) -> tuple[Runner, int]:
    dtype = a.text("dtype")
    try:
        np.dtype(dtype)
    except TypeError:
        raise a.error(f"unknown dtype {dtype!r}") from None
    return _one(lambda x: ops.astype(x, dtype)), 1


def _reduce(fn: Callable[..., Tensor], a: _Attrs) -> tuple[Runner, int]:
    axis, keepdims, exclude = a.ints("axis", None), a.bool("keepdims", False), a.bool("exclude", False)

    def run(x: Tensor) -> Tensor:
        axes = None if not axis else tuple(v % x.ndim for v in axis)
        if exclude:
            axes = tuple(i for i in range(x.ndim) if axes is None or i not in axes)
        out = fn(x, axis=axes, keepdims=keepdims)
        return ops.reshape(out, (1,)) if out.ndim == 0 else out  # MXNet 1.x has no 0-d results

    return _one(run), 1


def _dot(batched: bool, a: _Attrs) -> tuple[Runner, int]:
    ta, tb = a.bool("transpose_a", False), a.bool("transpose_b", False)
    a.read.add("forward_stype")
    fn = ops.batch_dot if batched else ops.tensordot_last_first
    return _one(lambda x, y: fn(x, y, ta, tb)), 1


def _embedding(a: _Attrs) -> tuple[Runner, int]:
    a.int("input_dim")
    a.int("output_dim")
    a.read.add("dtype")
    sparse = a.bool("sparse_grad", False)
    a.inputs(2)
    return _one(lambda idx, w: nn_ops.embedding(idx, w, sparse_grad=sparse)), 1


def _layer_norm(a: _Attrs) -> tuple[Runner, int]:
    axis, eps = a.int("axis", -1), a.float("eps", 1e-5)
    if a.bool("output_mean_var", False):
        raise NotImplementedError(f"SymbolBlock: node {a.node.name!r} (LayerNorm): output_mean_var=True is not "
                                  "supported by mxlite")
    a.inputs(3)
    return _one(lambda x, g, b: nn_ops.layer_norm(x, g, b, axis=axis, eps=eps)), 1


def _instance_norm(a: _Attrs) -> tuple[Runner, int]:
    eps = a.float("eps", 1e-3)
    a.inputs(3)
    return _one(lambda x, g, b: instance_norm(x, g, b, eps)), 1


def _split(a: _Attrs) -> tuple[Runner, int]:
    count, axis, squeeze = a.int("num_outputs"), a.int("axis", 1), a.bool("squeeze_axis", False)

    def run(xs: list[Tensor]) -> list[Tensor]:
        x = xs[0]
        step = x.shape[axis] // count
        if step * count != x.shape[axis]:
            raise a.error(f"axis {axis} of length {x.shape[axis]} does not split into {count} equal parts")
        parts = [ops.slice_axis(x, axis, i * step, (i + 1) * step) for i in range(count)]
        return [ops.squeeze(p, axis) for p in parts] if squeeze else parts

    return run, count


def _slice(a: _Attrs) -> tuple[Runner, int]:
    begin, end = a.ints("begin"), a.ints("end")
    step = a.ints("step", ()) or (None,) * len(begin)
    if not len(begin) == len(end) == len(step):
        raise a.error(f"begin {begin}, end {end} and step {step} must have one entry per sliced axis")
    return _one(lambda x: ops.slice(x, begin, end, step)), 1


def _broadcast_to(a: _Attrs) -> tuple[Runner, int]:
    shape = a.ints("shape")
    return _one(lambda x: ops.broadcast_to(x, tuple(s if s else x.shape[i] for i, s in enumerate(shape)))), 1


def _identity(a: _Attrs) -> tuple[Runner, int]:
    a.inputs(1)
    return _one(lambda x: x), 1


def _block_grad(a: _Attrs) -> tuple[Runner, int]:
    a.inputs(1)
    return _one(lambda x: x.detach()), 1


def _flatten(a: _Attrs) -> tuple[Runner, int]:
    a.inputs(1)
    return _one(ops.flatten), 1


_ARITHMETIC = {"add": ops.add, "sub": ops.subtract, "mul": ops.multiply, "div": ops.divide}
_SCALARS = {"plus": (ops.add, False), "minus": (ops.subtract, False), "rminus": (ops.subtract, True),
            "mul": (ops.multiply, False), "div": (ops.divide, False), "rdiv": (ops.divide, True),
            "power": (ops.power, False), "rpower": (ops.power, True), "maximum": (ops.maximum, False),
            "minimum": (ops.minimum, False)}
# MXNet's older names of the scalar operators (``_PlusScalar``)
_SCALAR_NAMES = {"plus": "Plus", "minus": "Minus", "rminus": "RMinus", "mul": "Mul", "div": "Div", "rdiv": "RDiv",
                 "power": "Power", "rpower": "RPower", "maximum": "Maximum", "minimum": "Minimum"}
_PLUS_ALIASES = {"add": ("_Plus", "_plus", "_add", "broadcast_plus"), "sub": ("_Minus", "_minus", "_sub",
                 "broadcast_minus"), "mul": ("_Mul", "_mul"), "div": ("_Div", "_div")}

# MXNet operator -> builder(attributes) -> (runner, number of outputs it computes).
_OPS: dict[str, Callable[[_Attrs], tuple[Runner, int]]] = {
    "Convolution": _convolution, "Deconvolution": _deconvolution, "FullyConnected": _fully_connected,
    "Activation": _activation, "LeakyReLU": _leaky_relu, "BatchNorm": _batch_norm, "Pooling": _pooling,
    "Dropout": _dropout, "Flatten": _flatten, "flatten": _flatten, "Reshape": _reshape, "reshape": _reshape,
    "softmax": functools.partial(_softmax, False), "log_softmax": functools.partial(_softmax, True),
    "SoftmaxActivation": _softmax_activation, "SoftmaxOutput": _softmax_output, "Softmax": _softmax_output,
    "Concat": functools.partial(_join, ops.concat, "dim", 1), "concat": functools.partial(_join, ops.concat, "dim", 1),
    "stack": functools.partial(_join, ops.stack, "axis", 0),
    **{f"elemwise_{k}": functools.partial(_binary, fn) for k, fn in _ARITHMETIC.items()},
    **{f"broadcast_{k}": functools.partial(_binary, fn) for k, fn in _ARITHMETIC.items()},
    **{alias: functools.partial(_binary, _ARITHMETIC[k]) for k, aliases in _PLUS_ALIASES.items() for alias in aliases},
    **{f"broadcast_{k}": functools.partial(_binary, fn) for k, fn in
       (("maximum", ops.maximum), ("minimum", ops.minimum), ("power", ops.power))},
    "_maximum": functools.partial(_binary, ops.maximum), "_minimum": functools.partial(_binary, ops.minimum),
    "_power": functools.partial(_binary, ops.power), "add_n": _add_n, "ElementWiseSum": _add_n,
    **{f"_{k}_scalar": functools.partial(_scalar, fn, first) for k, (fn, first) in _SCALARS.items()},
    **{f"_{camel}Scalar": functools.partial(_scalar, *_SCALARS[k]) for k, camel in _SCALAR_NAMES.items()},
    **{name: functools.partial(_unary, getattr(ops, name)) for name in UNARY},
    "identity": _identity, "_copy": _identity, "BlockGrad": _block_grad, "stop_gradient": _block_grad,
    "clip": _clip, "transpose": _transpose, "expand_dims": _expand_dims, "squeeze": _squeeze,
    "SwapAxis": _swapaxes, "swapaxes": _swapaxes, "slice_axis": _slice_axis, "Cast": _cast, "cast": _cast,
    "amp_cast": _cast, **{name: functools.partial(_reduce, getattr(ops, name)) for name in ("sum", "mean", "max",
                                                                                            "min")},
    "sum_axis": functools.partial(_reduce, ops.sum), "dot": functools.partial(_dot, False),
    "batch_dot": functools.partial(_dot, True), "Embedding": _embedding, "LayerNorm": _layer_norm,
    "InstanceNorm": _instance_norm, "SliceChannel": _split, "split": _split, "broadcast_to": _broadcast_to,
    "slice": _slice, "crop": _slice,
}
