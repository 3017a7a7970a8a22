"""Basic layers: Dense, Dropout, BatchNorm, LayerNorm, Embedding, Flatten, Activation, Lambda, Concatenate.

Every layer follows Gluon 2.x: constructor arguments and defaults as MXNet's, input
dimensions inferred from the first batch when not given (deferred initialisation), and the
layer's parameters used on whichever device the input lives (each device has its mirror).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import autograd, ops
from ...arrays import nd
from ...autograd.tensor import Tensor
from ...ops import activations, nn_ops
from ..block import Block, Sequential
from ..parameter import Parameter

__all__ = ["Dense", "Dropout", "BatchNorm", "LayerNorm", "Embedding", "Flatten", "Activation", "Lambda",
           "HybridLambda", "Identity", "Concatenate", "HybridConcatenate"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": activations.relu,  # one kernel pass per direction
    "sigmoid": ops.sigmoid,
    "tanh": ops.tanh,
    "softrelu": lambda x: ops.log(1 + ops.exp(-ops.abs(x))) + ops.relu(x),  # stable log(1 + e^x)
    "softsign": lambda x: x / (1 + ops.abs(x)),
}


def _int_arg(layer: str, name: str, value: Any, low: int = 1) -> int:
    """``value`` as an int >= ``low``; TypeError/ValueError naming the layer, the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{layer}: {name} must be an integer >= {low}, got {type(value).__name__}: {value!r}")
    if value < low:
        raise ValueError(f"{layer}: {name} must be >= {low}, got {value}")
    return int(value)


def _real_arg(layer: str, name: str, value: Any, *, low: float, high: float | None = None,
              low_inclusive: bool = True, high_inclusive: bool = False) -> float:
    """A finite real number in the given range; TypeError/ValueError naming the layer, the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{layer}: {name} must be a real number, got {type(value).__name__}: {value!r}")
    ok = (low <= value if low_inclusive else low < value) and (
        high is None or (value <= high if high_inclusive else value < high))
    if not ok:
        text = (f"lie in {'[' if low_inclusive else '('}{low:g}, {high:g}{']' if high_inclusive else ')'}"
                if high is not None else f"be {'>=' if low_inclusive else '>'} {low:g}")
        raise ValueError(f"{layer}: {name} must {text}, got {value}")
    if not np.isfinite(value):
        raise ValueError(f"{layer}: {name} must be a finite number, got {value}")
    return value


def _activation(name: str | None) -> Callable[[Tensor], Tensor] | None:
    if name is None:
        return None
    if name not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _ready(param: Parameter, x: Tensor) -> Tensor:
    """The mirror of ``param`` on ``x``'s device (finishing a deferred initialisation)."""
    if not param.is_initialized:
        param._finish_deferred_init()
    return param.data(x.device)


def _check_input_dtype(layer: str, x: Tensor, param: Parameter) -> None:
    """Refuse an input whose dtype differs from the layer's parameters, as MXNet does (its type inference
    fails: "Incompatible attr in node ... expected float64, got float32"); mxlite would otherwise compute
    silently in the wider type.

    Raises:
        TypeError: the dtypes differ (names both and how to fix it).
    """
    if x.dtype != param.dtype:
        raise TypeError(f"{layer}: the input has dtype {x.dtype} but Parameter '{param.label}' has dtype "
                        f"{param.dtype}; MXNet refuses mixed dtypes here too. Cast the input "
                        f"(x.astype('{param.dtype}')) or the model (net.cast('{x.dtype}'))")


class Activation(Block):
    """Applies an activation: 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign'.

    Raises:
        ValueError: unknown activation name.
    """

    def __init__(self, activation: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._act_name = activation
        self._act = _activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self._act(x)

    def _extra_repr(self) -> str:
        return self._act_name


class Dense(Block):
    """Fully connected layer: ``y = activation(x · Wᵀ + b)``.

    Args:
        units: output dimension.
        activation: optional activation name.
        use_bias: add a bias vector.
        flatten: collapse all input axes but the first (else apply to the last axis).
        dtype: parameter dtype.
        weight_initializer, bias_initializer: initializers (bias defaults to zeros).
        in_units: input dimension; 0 infers it from the first batch.

    Parameters: ``weight`` of shape (units, in_units), ``bias`` of shape (units,).

    Raises:
        ValueError: ``units < 0`` or an unknown activation (at construction); ``units == 0`` at
            the first call (MXNet builds ``Dense(0)`` and fails at its first forward); an input whose
            feature count differs from the weight's ``in_units`` (at the call, naming the
            weight Parameter and both shapes).
    """

    def __init__(self, units: int, activation: str | None = None, use_bias: bool = True, flatten: bool = True,
                 dtype: Any = np.float32, weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_units: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # MXNet accepts Dense(0) at construction and fails at the first forward (FullyConnected needs
        # num_hidden >= 1); so does mxlite, with a ValueError.
        units = _int_arg("Dense", "units", units, low=0)
        in_units = _int_arg("Dense", "in_units", in_units, low=0)
        self._units, self._flatten, self._in_units = units, flatten, in_units
        self._act_name = activation
        self._act = _activation(activation)
        self.weight = Parameter("weight", shape=(units, in_units), dtype=dtype, init=weight_initializer,
                                allow_deferred_init=True)
        self.bias = (Parameter("bias", shape=(units,), dtype=dtype, init=bias_initializer, allow_deferred_init=True)
                     if use_bias else None)

    def forward(self, x: Tensor) -> Tensor:
        if self._units == 0:
            raise ValueError("Dense: units must be >= 1 to compute an output (the layer was built with units=0; "
                             "MXNet's FullyConnected rejects num_hidden=0 at the first forward too)")
        in_units = int(np.prod(x.shape[1:])) if self._flatten else x.shape[-1]
        if not self.weight.is_initialized:
            self.weight.shape = (self._units, in_units)
        elif self.weight.shape[1] != in_units:
            seen = f"x flattened to {in_units} features" if self._flatten else f"x's last axis has {in_units}"
            raise ValueError(f"Dense: Parameter '{self.weight.label}' has shape {self.weight.shape}, so the layer "
                             f"expects {self.weight.shape[1]} input features, but {seen} (x shape {x.shape})")
        _check_input_dtype("Dense", x, self.weight)
        w = _ready(self.weight, x)
        b = _ready(self.bias, x) if self.bias is not None else None
        y = nn_ops.fully_connected(x, w, b, flatten=self._flatten)
        return self._act(y) if self._act else y

    def _extra_repr(self) -> str:
        shape = self.weight.shape
        return f"{shape[1] if shape[1] > 0 else None} -> {self._units}" + (
            f", {self._act_name}" if self._act_name else "")


class Dropout(Block):
    """Zeroes inputs with probability ``rate`` during training (inverted scaling).

    Args:
        rate: drop probability in [0, 1]; 1 drops everything while training (output zeros), as MXNet.
        axes: axes on which the mask is shared.
    """

    def __init__(self, rate: float, axes: tuple[int, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _real_arg("Dropout", "rate", rate, low=0, high=1, high_inclusive=True)
        self._rate, self._axes = rate, tuple(axes)

    def forward(self, x: Tensor) -> Tensor:
        if self._rate >= 1:
            return ops.multiply(x, 0.0) if autograd.is_training() else x
        return nn_ops.dropout(x, self._rate, self._axes, training=autograd.is_training())

    def _extra_repr(self) -> str:
        return f"p = {self._rate}"


class Flatten(Block):
    """Collapses all axes but the first: ``(N, ...) -> (N, prod(...))``."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.flatten(x)


class Lambda(Block):
    """Wraps a function ``fn(x) -> y`` as a Block; a string names a function of ``mx.nd`` (``Lambda('tanh')``).

    Raises:
        ValueError: a string that names no ``mx.nd`` function. TypeError: neither a string nor a callable.
    """

    def __init__(self, function: Callable[..., Any] | str, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix, params)
        if isinstance(function, str):
            if not callable(getattr(nd, function, None)):
                raise ValueError(f"{type(self).__name__}: function {function!r} is not a function of mx.nd")
            function = getattr(nd, function)
        elif not callable(function):
            raise TypeError(f"{type(self).__name__}: function must be a callable or a name, got "
                            f"{type(function).__name__}")
        self._fn = function

    def forward(self, *args: Any) -> Any:
        return self._fn(*args)


class HybridLambda(Lambda):
    """Wraps a function as a Block: MXNet 2.x's ``HybridLambda``, called as ``fn(x, *args)``.

    A Gluon 1.x function ``fn(F, x, *args)`` (its first parameter named ``F``) still works: it gets
    ``F`` = ``mx.nd``. A string names an ``mx.nd`` function, called as ``fn(x, *args)``.
    """

    def __init__(self, function: Callable[..., Any] | str, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(function, prefix, params)
        self._takes_f = not isinstance(function, str) and _first_parameter(function) == "F"

    def forward(self, *args: Any) -> Any:
        if not self._takes_f:
            return self._fn(*args)
        return self._fn(nd, *args)


def _first_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s first positional parameter (None when it has none or no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return None
    first = next((p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), None)
    return first.name if first is not None else None


class Concatenate(Sequential):
    """Feeds the input to every child and joins their outputs along ``axis`` (MXNet 2.x's ``Concatenate``).

    ``net = Concatenate(axis=1); net.add(Dense(128), Dense(64))`` maps ``(N, d)`` to ``(N, 192)``.
    """

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = axis

    def forward(self, x: Any) -> Tensor:
        return ops.concat([block(x) for block in self._children.values()], axis=self.axis)

    def __getitem__(self, key: int | slice) -> Any:
        out = super().__getitem__(key)
        if isinstance(out, Concatenate):
            out.axis = self.axis
        return out


HybridConcatenate = Concatenate  # HybridBlock and Block are one class in mxlite


class Identity(Block):
    """Returns its input unchanged."""

    def forward(self, x: Any) -> Any:
        return x


class BatchNorm(Block):
    """Batch normalisation over ``axis`` (channels), MXNet's arguments and defaults.

    In training the batch statistics normalise and the running statistics are updated as
    ``running = momentum * running + (1 - momentum) * batch``; in inference the running
    statistics are used. Each device keeps its own running statistics (as MXNet does).

    Parameters: ``gamma``, ``beta`` (learned), ``running_mean``, ``running_var``
    (grad_req 'null').

    Raises:
        ValueError: ``momentum`` outside [0, 1] or ``epsilon <= 0`` (at construction); an input
            whose channel count differs from the initialised parameters' (at the call, naming
            the ``gamma`` Parameter).
    """

    def __init__(self, axis: int = 1, momentum: float = 0.9, epsilon: float = 1e-5, center: bool = True,
                 scale: bool = True, use_global_stats: bool = False, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", running_mean_initializer: Any = "zeros",
                 running_variance_initializer: Any = "ones", in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _real_arg("BatchNorm", "momentum", momentum, low=0, high=1, high_inclusive=True)
        _real_arg("BatchNorm", "epsilon", epsilon, low=0, low_inclusive=False)
        _int_arg("BatchNorm", "axis", axis, low=-(2**31))
        _int_arg("BatchNorm", "in_channels", in_channels, low=0)
        self._axis, self._momentum, self._eps = axis, momentum, epsilon
        self._use_global_stats, self._fix_gamma = use_global_stats, not scale
        self.gamma = Parameter("gamma", grad_req="write" if scale else "null", shape=(in_channels,),
                               init=gamma_initializer, allow_deferred_init=True, differentiable=scale)
        self.beta = Parameter("beta", grad_req="write" if center else "null", shape=(in_channels,),
                              init=beta_initializer, allow_deferred_init=True, differentiable=center)
        self.running_mean = Parameter("running_mean", grad_req="null", shape=(in_channels,),
                                      init=running_mean_initializer, allow_deferred_init=True, differentiable=False)
        self.running_var = Parameter("running_var", grad_req="null", shape=(in_channels,),
                                     init=running_variance_initializer, allow_deferred_init=True,
                                     differentiable=False)

    def forward(self, x: Tensor) -> Tensor:
        if not -x.ndim <= self._axis < x.ndim:
            raise ValueError(f"BatchNorm: axis {self._axis} is out of range for input of shape {x.shape}")
        channels = x.shape[self._axis]
        params = (self.gamma, self.beta, self.running_mean, self.running_var)
        for p in params:
            if not p.is_initialized:
                p.shape = (channels,)
            elif p.shape != (channels,):
                raise ValueError(f"BatchNorm: Parameter '{p.label}' has shape {p.shape}, but the input has "
                                 f"{channels} channels on axis {self._axis} (x shape {x.shape})")
        gamma, beta, mean, var = (_ready(p, x) for p in params)
        return nn_ops.batch_norm(x, gamma, beta, mean, var, axis=self._axis, eps=self._eps,
                                 momentum=self._momentum, training=autograd.is_training(),
                                 use_global_stats=self._use_global_stats, fix_gamma=self._fix_gamma)


class LayerNorm(Block):
    """Layer normalisation over ``axis``: ``gamma * (x - mean) / sqrt(var + eps) + beta``."""

    def __init__(self, axis: int = -1, epsilon: float = 1e-5, center: bool = True, scale: bool = True,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _real_arg("LayerNorm", "epsilon", epsilon, low=0, low_inclusive=False)
        _int_arg("LayerNorm", "axis", axis, low=-(2**31))
        self._axis, self._eps = axis, epsilon
        self.gamma = Parameter("gamma", shape=(in_channels,), init=gamma_initializer, allow_deferred_init=True,
                               differentiable=scale)
        self.beta = Parameter("beta", shape=(in_channels,), init=beta_initializer, allow_deferred_init=True,
                              differentiable=center)

    def forward(self, x: Tensor) -> Tensor:
        channels = x.shape[self._axis]
        for p in (self.gamma, self.beta):
            if not p.is_initialized:
                p.shape = (channels,)
        return nn_ops.layer_norm(x, _ready(self.gamma, x), _ready(self.beta, x), axis=self._axis, eps=self._eps)


class Embedding(Block):
    """Maps integer ids to dense vectors: ``out[..., :] = weight[x[...], :]``.

    Args:
        input_dim: vocabulary size; output_dim: vector size.
        sparse_grad: produce a row-sparse weight gradient (only the looked-up rows).
    """

    def __init__(self, input_dim: int, output_dim: int, dtype: Any = np.float32, weight_initializer: Any = None,
                 sparse_grad: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, value in (("input_dim", input_dim), ("output_dim", output_dim)):
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value <= 0:
                raise ValueError(f"Embedding: input_dim and output_dim must be > 0, got {input_dim}, {output_dim}")
            _int_arg("Embedding", name, value)
        self._sparse_grad = sparse_grad
        self.weight = Parameter("weight", shape=(input_dim, output_dim), dtype=dtype, init=weight_initializer,
                                grad_stype="row_sparse" if sparse_grad else "default")

    def forward(self, x: Tensor) -> Tensor:
        return nn_ops.embedding(x, _ready(self.weight, x), sparse_grad=self._sparse_grad)

    def _extra_repr(self) -> str:
        return f"{self.weight.shape[0]} -> {self.weight.shape[1]}"
