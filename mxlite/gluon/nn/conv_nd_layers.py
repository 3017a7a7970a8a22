"""1-D, 2-D and 3-D convolution, transposed convolution and pooling layers, with Gluon's arguments and defaults.

Layouts are channels-first (``NCW``, ``NCHW``, ``NCDHW``), the ones MXNet Gluon defaults to, or
channels-last (``NWC``, ``NHWC``, ``NDHWC``): a channels-last layer transposes its input to
channels-first, computes, and transposes the result back (no channels-last kernels). The
layers run :func:`mxlite.ops.nn_ops.conv`, :func:`~mxlite.ops.nn_ops.conv_transpose`,
:func:`~mxlite.ops.nn_ops.max_pool`, :func:`~mxlite.ops.nn_ops.avg_pool` and the global
pools. ``Conv2D``, ``MaxPool2D``, ``AvgPool2D`` and ``GlobalAvgPool2D``/``GlobalMaxPool2D`` live in
``conv_layers.py``.

Weights: a convolution's is ``(channels, in_channels/groups, *kernel)``; a transposed
convolution's is ``(in_channels, channels/groups, *kernel)`` (MXNet's ``Deconvolution``). With a
channels-last layout the second axis moves last, as in MXNet: ``(channels, *kernel, in_channels/groups)``.
``in_channels=0`` defers the weight's shape to the first batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ... import ops
from ...autograd.tensor import Tensor
from ...ops import nn_ops
from ..block import Block
from ..parameter import Parameter
from .basic_layers import _activation, _check_input_dtype, _int_arg, _ready

__all__ = [
    "Conv1D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
    "MaxPool1D", "MaxPool3D", "AvgPool1D", "AvgPool3D",
    "GlobalMaxPool1D", "GlobalMaxPool3D", "GlobalAvgPool1D", "GlobalAvgPool3D",
]

_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def _tuple(layer: str, name: str, value: Any, nd: int, low: int) -> tuple[int, ...]:
    """An int or ``nd`` ints, each >= ``low``, as an ``nd``-tuple; errors name the layer and the argument."""
    if not isinstance(value, (tuple, list)):
        value = (_int_arg(layer, name, value, low),) * nd
    if len(value) != nd:
        raise ValueError(f"{layer}: {name} must be an int or a tuple of {nd} ints, got {value!r}")
    return tuple(_int_arg(layer, name, v, low) for v in value)


_CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def _channels_last(layer: str, layout: str, nd: int) -> bool:
    """Whether ``layout`` is the channels-last layout of ``nd`` spatial axes (False: the channels-first one).

    Raises:
        ValueError: ``layout`` is neither (names the two accepted).
    """
    if layout == _LAYOUTS[nd]:
        return False
    if layout == _CHANNELS_LAST[nd]:
        return True
    raise ValueError(f"{layer}: layout must be {_LAYOUTS[nd]!r} or {_CHANNELS_LAST[nd]!r}, got {layout!r}")


def _to_channels_first(x: Tensor) -> Tensor:
    """``(N, *S, C) -> (N, C, *S)`` (also a channels-last weight to the channels-first one), differentiable."""
    return ops.transpose(x, (0, x.ndim - 1) + tuple(range(1, x.ndim - 1)))


def _to_channels_last(x: Tensor) -> Tensor:
    """``(N, C, *S) -> (N, *S, C)``, differentiable."""
    return ops.transpose(x, (0,) + tuple(range(2, x.ndim)) + (1,))


def _layout_aware(forward: Callable[[Any, Tensor], Tensor]) -> Callable[[Any, Tensor], Tensor]:
    """Wrap a channels-first ``forward(self, x)`` so that a layer built with a channels-last layout
    (``self._channels_last``) runs it on the channels-first view of ``x`` and returns a channels-last result."""

    @functools.wraps(forward)
    def run(self: Any, x: Tensor) -> Tensor:
        if not self._channels_last:
            return forward(self, x)
        if x.ndim != self._nd + 2:
            raise ValueError(f"{type(self).__name__} expects {_CHANNELS_LAST[self._nd]} input with {self._nd + 2} "
                             f"dimensions, got shape {x.shape}")
        return _to_channels_last(forward(self, _to_channels_first(x)))

    return run


class _ConvND(Block):
    """Shared body of the N-D (transposed) convolution layers."""

    _nd = 2
    _transposed = False

    def __init__(self, channels: int, kernel_size: Any, strides: Any, padding: Any, dilation: Any, groups: int,
                 layout: str, activation: str | None, use_bias: bool, weight_initializer: Any,
                 bias_initializer: Any, in_channels: int, output_padding: Any = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        layer, nd = type(self).__name__, self._nd
        self._channels_last = _channels_last(layer, layout, nd)
        self._channels = _int_arg(layer, "channels", channels, 1)
        self._groups = _int_arg(layer, "groups", groups, 1)
        self._in_channels = _int_arg(layer, "in_channels", in_channels, 0)
        if self._transposed:
            if self._channels % self._groups or self._in_channels % self._groups:
                raise ValueError(f"{layer}: channels ({channels}) and in_channels ({in_channels}) must be "
                                 f"multiples of groups ({groups})")
        elif self._channels % self._groups:
            raise ValueError(f"{layer}: channels ({channels}) must be a positive multiple of groups ({groups})")
        self._kernel = _tuple(layer, "kernel_size", kernel_size, nd, 1)
        self._strides = _tuple(layer, "strides", strides, nd, 1)
        self._padding = _tuple(layer, "padding", padding, nd, 0)
        self._dilation = _tuple(layer, "dilation", dilation, nd, 1)
        self._output_padding = _tuple(layer, "output_padding", output_padding, nd, 0)
        if any(a >= max(s, d) for a, s, d in zip(self._output_padding, self._strides, self._dilation)):
            raise ValueError(f"{layer}: output_padding {self._output_padding} must be smaller than the strides "
                             f"{self._strides} or the dilation {self._dilation}")
        self._act = _activation(activation)
        self.weight = Parameter("weight", shape=self._weight_shape(self._in_channels), init=weight_initializer,
                                allow_deferred_init=True)
        self.bias = (Parameter("bias", shape=(self._channels,), init=bias_initializer, allow_deferred_init=True)
                     if use_bias else None)

    def _weight_shape(self, in_channels: int) -> tuple[int, ...]:
        if self._transposed:  # (in_channels, channels/groups, *kernel); 0 = not known yet
            first, second = in_channels, self._channels // self._groups
        else:
            first, second = self._channels, in_channels // self._groups if in_channels else 0
        if self._channels_last:  # MXNet's channels-last weight: the second axis last
            return (first,) + self._kernel + (second,)
        return (first, second) + self._kernel

    def forward(self, x: Tensor) -> Tensor:
        """Convolve ``x`` ``(N, C, *spatial)``; the weight's input channels are inferred from the first batch.

        Raises:
            ValueError: ``x`` has the wrong rank, or channels that do not match the weight or ``groups``.
        """
        layer, nd = type(self).__name__, self._nd
        if x.ndim != nd + 2:
            layout = _CHANNELS_LAST[nd] if self._channels_last else _LAYOUTS[nd]
            raise ValueError(f"{layer} expects {layout} input with {nd + 2} dimensions, got shape {x.shape}")
        c = x.shape[-1] if self._channels_last else x.shape[1]
        if not self.weight.is_initialized:
            if c % self._groups:
                raise ValueError(f"{layer}: input channels {c} not divisible by groups {self._groups}")
            self.weight.shape = self._weight_shape(c)
        else:
            per_group = self.weight.shape[-1] if self._channels_last else self.weight.shape[1]
            expected = self.weight.shape[0] if self._transposed else per_group * self._groups
            if expected != c:
                raise ValueError(f"{layer}: Parameter '{self.weight.label}' has shape {self.weight.shape}, so the "
                                 f"layer expects {expected} input channels, but x has {c} (x shape {x.shape})")
        _check_input_dtype(layer, x, self.weight)
        w = _ready(self.weight, x)
        b = _ready(self.bias, x) if self.bias is not None else None
        if self._channels_last:
            x, w = _to_channels_first(x), _to_channels_first(w)
        if self._transposed:
            y = nn_ops.conv_transpose(x, w, b, stride=self._strides, padding=self._padding,
                                      output_padding=self._output_padding, dilation=self._dilation,
                                      groups=self._groups)
        else:
            y = nn_ops.conv(x, w, b, stride=self._strides, padding=self._padding, dilation=self._dilation,
                            groups=self._groups)
        if self._channels_last:
            y = _to_channels_last(y)
        return self._act(y) if self._act else y

    def _extra_repr(self) -> str:
        return f"{self._channels}, kernel_size={self._kernel}, stride={self._strides}"


class Conv1D(_ConvND):
    """1-D convolution over NCW input (e.g. temporal): ``y = activation(conv(x, W) + b)``.

    Args:
        channels: output channels.
        kernel_size, strides, padding, dilation: ints or 1-tuples, in elements.
        groups: grouped convolution (in_channels and channels divisible by it).
        layout: 'NCW' or 'NWC' (channels last).
        activation: applied to the output ('relu', ...), or None.
        use_bias: add a ``(channels,)`` bias.
        weight_initializer, bias_initializer: initialisers of the parameters.
        in_channels: 0 infers it from the first batch.

    Output width: ``(W + 2*padding - dilation*(kernel_size-1) - 1) // strides + 1``.

    Raises:
        TypeError, ValueError: bad arguments (at construction); input of the wrong rank or channels
            (at the call).
    """

    _nd = 1

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0, dilation: Any = 1,
                 groups: int = 1, layout: str = "NCW", activation: str | None = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, dilation, groups, layout, activation, use_bias,
                         weight_initializer, bias_initializer, in_channels, **kwargs)


class Conv3D(_ConvND):
    """3-D convolution over NCDHW input (volumes); arguments as :class:`Conv1D`, with 3-tuples.

    Raises:
        TypeError, ValueError: as :class:`Conv1D`.
    """

    _nd = 3

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
                 dilation: Any = (1, 1, 1), groups: int = 1, layout: str = "NCDHW", activation: str | None = None,
                 use_bias: bool = True, weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, dilation, groups, layout, activation, use_bias,
                         weight_initializer, bias_initializer, in_channels, **kwargs)


class Conv1DTranspose(_ConvND):
    """Transposed 1-D convolution (MXNet's ``Deconvolution``) over NCW input: the gradient of a convolution.

    Args:
        channels: output channels.
        kernel_size, strides, padding, dilation: as the convolution this one transposes (ints or 1-tuples).
        output_padding: extra elements at the end of the output (MXNet's ``adj``), smaller than the
            stride or the dilation.
        groups, layout ('NCW' or 'NWC'), activation, use_bias, weight_initializer, bias_initializer,
        in_channels: as :class:`Conv1D`.

    Weight ``(in_channels, channels/groups, k)``. Output width:
    ``(W - 1)*strides - 2*padding + dilation*(kernel_size - 1) + 1 + output_padding``.

    Raises:
        TypeError, ValueError: as :class:`Conv1D`, and an ``output_padding`` not below the stride or dilation.
    """

    _nd, _transposed = 1, True

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1, layout: str = "NCW",
                 activation: str | None = None, use_bias: bool = True, weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, dilation, groups, layout, activation, use_bias,
                         weight_initializer, bias_initializer, in_channels, output_padding, **kwargs)


class Conv2DTranspose(_ConvND):
    """Transposed 2-D convolution over NCHW input; arguments as :class:`Conv1DTranspose`, with pairs.

    Raises:
        TypeError, ValueError: as :class:`Conv1DTranspose`.
    """

    _nd, _transposed = 2, True

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1), padding: Any = (0, 0),
                 output_padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1, layout: str = "NCHW",
                 activation: str | None = None, use_bias: bool = True, weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, dilation, groups, layout, activation, use_bias,
                         weight_initializer, bias_initializer, in_channels, output_padding, **kwargs)


class Conv3DTranspose(_ConvND):
    """Transposed 3-D convolution over NCDHW input; arguments as :class:`Conv1DTranspose`, with 3-tuples.

    Raises:
        TypeError, ValueError: as :class:`Conv1DTranspose`.
    """

    _nd, _transposed = 3, True

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
                 output_padding: Any = (0, 0, 0), dilation: Any = (1, 1, 1), groups: int = 1,
                 layout: str = "NCDHW", activation: str | None = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, dilation, groups, layout, activation, use_bias,
                         weight_initializer, bias_initializer, in_channels, output_padding, **kwargs)


class _PoolND(Block):
    _nd = 2

    def __init__(self, pool_size: Any, strides: Any, padding: Any, ceil_mode: bool, layout: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        layer, nd = type(self).__name__, self._nd
        self._channels_last = _channels_last(layer, layout, nd)
        self._pool = _tuple(layer, "pool_size", pool_size, nd, 1)
        self._strides = _tuple(layer, "strides", strides, nd, 1) if strides is not None else self._pool
        self._padding = _tuple(layer, "padding", padding, nd, 0)
        self._ceil = bool(ceil_mode)

    def _check(self, x: Tensor) -> None:
        if x.ndim != self._nd + 2:
            raise ValueError(f"{type(self).__name__} expects {_LAYOUTS[self._nd]} input with {self._nd + 2} "
                             f"dimensions, got shape {x.shape}")

    def _extra_repr(self) -> str:
        return f"size={self._pool}, stride={self._strides}, padding={self._padding}, ceil_mode={self._ceil}"


class _MaxPoolND(_PoolND):
    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        """Max-pool ``x`` ``(N, C, *spatial)``.

        Raises:
            ValueError: wrong rank, or a window larger than the padded input.
        """
        self._check(x)
        return nn_ops.max_pool(x, self._pool, self._strides, self._padding, ceil_mode=self._ceil)


class _AvgPoolND(_PoolND):
    def __init__(self, pool_size: Any, strides: Any, padding: Any, ceil_mode: bool, layout: str,
                 count_include_pad: bool, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, **kwargs)
        self._count_include_pad = bool(count_include_pad)

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        """Average-pool ``x`` ``(N, C, *spatial)``.

        Raises:
            ValueError: wrong rank, or a window larger than the padded input. TypeError: integer input.
        """
        self._check(x)
        return nn_ops.avg_pool(x, self._pool, self._strides, self._padding, ceil_mode=self._ceil,
                               count_include_pad=self._count_include_pad)


class MaxPool1D(_MaxPoolND):
    """Max pooling over NCW input.

    Args:
        pool_size: window length. strides: step between windows (None = pool_size).
        padding: implicit padding on both sides (never wins the maximum).
        layout: 'NCW' or 'NWC'. ceil_mode: round the output length up (MXNet's 'full' convention).

    Raises:
        TypeError, ValueError: bad arguments (at construction) or input (at the call).
    """

    _nd = 1

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: Any = 0, layout: str = "NCW",
                 ceil_mode: bool = False, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, **kwargs)


class MaxPool3D(_MaxPoolND):
    """Max pooling over NCDHW input; arguments as :class:`MaxPool1D`, with 3-tuples.

    Raises:
        TypeError, ValueError: as :class:`MaxPool1D`.
    """

    _nd = 3

    def __init__(self, pool_size: Any = (2, 2, 2), strides: Any = None, padding: Any = 0, layout: str = "NCDHW",
                 ceil_mode: bool = False, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, **kwargs)


class AvgPool1D(_AvgPoolND):
    """Average pooling over NCW input; arguments as :class:`MaxPool1D`, plus ``count_include_pad``
    (whether zero padding counts in the divisor; default True, as MXNet).

    Raises:
        TypeError, ValueError: as :class:`MaxPool1D`.
    """

    _nd = 1

    def __init__(self, pool_size: Any = 2, strides: Any = None, padding: Any = 0, layout: str = "NCW",
                 ceil_mode: bool = False, count_include_pad: bool = True, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, count_include_pad, **kwargs)


class AvgPool3D(_AvgPoolND):
    """Average pooling over NCDHW input; arguments as :class:`AvgPool1D`, with 3-tuples.

    Raises:
        TypeError, ValueError: as :class:`MaxPool1D`.
    """

    _nd = 3

    def __init__(self, pool_size: Any = (2, 2, 2), strides: Any = None, padding: Any = 0, layout: str = "NCDHW",
                 ceil_mode: bool = False, count_include_pad: bool = True, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, count_include_pad, **kwargs)


class _GlobalPoolND(Block):
    _nd = 1
    _max = False

    def __init__(self, layout: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._channels_last = _channels_last(type(self).__name__, layout, self._nd)

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        """Pool every spatial axis of ``x`` to length 1: ``(N, C, *S) -> (N, C, 1, ...)``.

        Raises:
            ValueError: ``x`` has the wrong rank.
        """
        if x.ndim != self._nd + 2:
            raise ValueError(f"{type(self).__name__} expects {_LAYOUTS[self._nd]} input with {self._nd + 2} "
                             f"dimensions, got shape {x.shape}")
        return nn_ops.global_max_pool(x) if self._max else nn_ops.global_avg_pool(x)


class GlobalMaxPool1D(_GlobalPoolND):
    """Maximum over the width of NCW input: ``(N, C, W) -> (N, C, 1)``."""

    _nd, _max = 1, True

    def __init__(self, layout: str = "NCW", **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)


class GlobalMaxPool3D(_GlobalPoolND):
    """Maximum over depth, height and width of NCDHW input: ``(N, C, D, H, W) -> (N, C, 1, 1, 1)``."""

    _nd, _max = 3, True

    def __init__(self, layout: str = "NCDHW", **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)


class GlobalAvgPool1D(_GlobalPoolND):
    """Mean over the width of NCW input: ``(N, C, W) -> (N, C, 1)``."""

    _nd = 1

    def __init__(self, layout: str = "NCW", **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)


class GlobalAvgPool3D(_GlobalPoolND):
    """Mean over depth, height and width of NCDHW input: ``(N, C, D, H, W) -> (N, C, 1, 1, 1)``."""

    _nd = 3

    def __init__(self, layout: str = "NCDHW", **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)
