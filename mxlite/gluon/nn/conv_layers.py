"""2-D convolution and pooling layers (NCHW or NHWC layout), Gluon 2.x arguments and defaults."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import ops
from ...autograd.tensor import Tensor
from ...ops import activations, nn_ops
from ...ops.conv import conv_relu
from ..block import Block
from ..parameter import Parameter
from .basic_layers import _activation, _check_input_dtype, _int_arg, _ready
from .conv_nd_layers import _channels_last, _layout_aware, _to_channels_first, _to_channels_last

__all__ = ["Conv2D", "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "GlobalMaxPool2D", "PixelShuffle1D", "PixelShuffle2D",
           "PixelShuffle3D", "ReflectionPad2D"]


def _pair(value: int | tuple[int, int], layer: str = "layer", name: str = "size", low: int = 1) -> tuple[int, int]:
    """An int or a pair of ints, each >= ``low``, as a pair; errors name the layer, the argument and the value."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{layer}: {name} must be an int or a pair of ints (height, width), got {value!r}")
    return (_int_arg(layer, name, value[0], low), _int_arg(layer, name, value[1], low))


class Conv2D(Block):
    """2-D convolution over NCHW (or, with ``layout='NHWC'``, NHWC) input: ``y = activation(conv(x, W) + b)``.

    Args:
        channels: output channels.
        kernel_size, strides, padding, dilation: ints or pairs.
        groups: grouped convolution (in_channels and channels divisible by it).
        in_channels: 0 infers it from the first batch.

    Parameters: ``weight`` (channels, in_channels/groups, kh, kw), with NHWC (channels, kh, kw,
    in_channels/groups) as MXNet's; ``bias`` (channels,). An NHWC layer transposes its input to NCHW
    and its result back.

    Raises:
        ValueError: bad ``channels``/``groups`` or layout (at construction); an input that is
            not 4-D, or whose channel count differs from the weight's (at the call, naming the
            weight Parameter and both shapes).
    """

    def __init__(self, channels: int, kernel_size: int | tuple[int, int], strides: Any = (1, 1),
                 padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1, layout: str = "NCHW",
                 activation: str | None = None, use_bias: bool = True, weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._channels_last = _channels_last("Conv2D", layout, 2)
        for name, value in (("channels", channels), ("groups", groups)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"Conv2D: {name} must be a positive integer, got {type(value).__name__}: {value!r}")
        if channels <= 0 or groups <= 0 or channels % groups:
            raise ValueError(f"Conv2D: channels ({channels}) must be a positive multiple of groups ({groups})")
        _int_arg("Conv2D", "in_channels", in_channels, low=0)
        self._channels, self._groups = channels, groups
        self._kernel, self._strides = _pair(kernel_size, "Conv2D", "kernel_size"), _pair(strides, "Conv2D", "strides")
        self._padding = _pair(padding, "Conv2D", "padding", low=0)
        self._dilation = _pair(dilation, "Conv2D", "dilation")
        self._act = _activation(activation)
        in_per_group = in_channels // groups if in_channels else 0
        self.weight = Parameter("weight", shape=self._weight_shape(in_per_group), init=weight_initializer,
                                allow_deferred_init=True)
        self.bias = (Parameter("bias", shape=(channels,), init=bias_initializer, allow_deferred_init=True)
                     if use_bias else None)

    def _weight_shape(self, in_per_group: int) -> tuple[int, ...]:
        if self._channels_last:
            return (self._channels,) + self._kernel + (in_per_group,)
        return (self._channels, in_per_group) + self._kernel

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            layout = "NHWC" if self._channels_last else "NCHW"
            raise ValueError(f"Conv2D expects {layout} input with 4 dimensions, got shape {x.shape}")
        c = x.shape[-1] if self._channels_last else x.shape[1]
        if not self.weight.is_initialized:
            if c % self._groups:
                raise ValueError(f"Conv2D: input channels {c} not divisible by groups {self._groups}")
            self.weight.shape = self._weight_shape(c // self._groups)
        else:
            per_group = self.weight.shape[-1] if self._channels_last else self.weight.shape[1]
            if per_group * self._groups != c:
                raise ValueError(f"Conv2D: Parameter '{self.weight.label}' has shape {self.weight.shape}, so the "
                                 f"layer expects {per_group * self._groups} input channels, but x has {c} "
                                 f"(x shape {x.shape})")
        _check_input_dtype("Conv2D", x, self.weight)
        w = _ready(self.weight, x)
        b = _ready(self.bias, x) if self.bias is not None else None
        if self._channels_last:
            x, w = _to_channels_first(x), _to_channels_first(w)
        elif self._act is activations.relu and b is not None:  # CPU devices: bias and ReLU in one pass
            y = conv_relu(x, w, b, self._strides, self._padding, self._dilation, self._groups, 2)
            if y is not None:
                return y
        y = nn_ops.conv2d(x, w, b, stride=self._strides, padding=self._padding, dilation=self._dilation,
                          groups=self._groups)
        if self._channels_last:
            y = _to_channels_last(y)
        return self._act(y) if self._act else y

    def _extra_repr(self) -> str:
        return f"{self._channels}, kernel_size={self._kernel}, stride={self._strides}"


class _Pool(Block):
    _nd = 2

    def __init__(self, pool_size: Any, strides: Any, padding: Any, ceil_mode: bool, layout: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        layer = type(self).__name__
        self._channels_last = _channels_last(layer, layout, 2)
        self._pool = _pair(pool_size, layer, "pool_size")
        self._strides = _pair(strides, layer, "strides") if strides is not None else self._pool
        self._padding, self._ceil = _pair(padding, layer, "padding", low=0), ceil_mode
        if any(2 * p > k for p, k in zip(self._padding, self._pool)):
            raise ValueError(f"{layer}: padding {self._padding} must be at most half of pool_size {self._pool} (a "
                             "window lying wholly in the padding has no input to pool)")

    def _extra_repr(self) -> str:
        return f"size={self._pool}, stride={self._strides}, padding={self._padding}"


class MaxPool2D(_Pool):
    """Max pooling over NCHW (or NHWC) input (strides default to pool_size)."""

    def __init__(self, pool_size: Any = (2, 2), strides: Any = None, padding: Any = 0, layout: str = "NCHW",
                 ceil_mode: bool = False, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, **kwargs)

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        return nn_ops.max_pool2d(x, self._pool, self._strides, self._padding, ceil_mode=self._ceil)


class AvgPool2D(_Pool):
    """Average pooling over NCHW (or NHWC) input; ``count_include_pad`` counts padding in the divisor."""

    def __init__(self, pool_size: Any = (2, 2), strides: Any = None, padding: Any = 0, layout: str = "NCHW",
                 ceil_mode: bool = False, count_include_pad: bool = True, **kwargs: Any) -> None:
        super().__init__(pool_size, strides, padding, ceil_mode, layout, **kwargs)
        self._count_include_pad = count_include_pad

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        return nn_ops.avg_pool2d(x, self._pool, self._strides, self._padding, ceil_mode=self._ceil,
                                 count_include_pad=self._count_include_pad)


class GlobalAvgPool2D(Block):
    """Mean over the spatial axes: ``(N, C, H, W) -> (N, C, 1, 1)`` (NHWC: ``(N, 1, 1, C)``)."""

    _nd = 2

    def __init__(self, layout: str = "NCHW", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._channels_last = _channels_last(type(self).__name__, layout, 2)

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        return nn_ops.global_avg_pool2d(x)


class GlobalMaxPool2D(Block):
    """Maximum over the spatial axes: ``(N, C, H, W) -> (N, C, 1, 1)`` (NHWC: ``(N, 1, 1, C)``)."""

    _nd = 2

    def __init__(self, layout: str = "NCHW", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._channels_last = _channels_last(type(self).__name__, layout, 2)

    @_layout_aware
    def forward(self, x: Tensor) -> Tensor:
        return nn_ops.global_max_pool2d(x)


class _PixelShuffle(Block):
    """Rearranges ``(N, C * f1 * ... * fk, S1, ..., Sk)`` into ``(N, C, S1 * f1, ..., Sk * fk)`` (sub-pixel
    upsampling, Shi et al. 2016), as MXNet Gluon's ``PixelShuffle1D/2D/3D``: the channels of each output
    channel form an ``f1 x ... x fk`` block that is spread over the spatial axes. A reshape and a
    transpose, so the gradient is theirs.
    """

    _dims = 1

    def __init__(self, factor: int | tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        name = type(self).__name__
        factors = (factor,) * self._dims if isinstance(factor, (int, np.integer)) else tuple(factor)
        if len(factors) != self._dims:
            raise ValueError(f"{name}: factor must be an int or {self._dims} ints, got {factor!r}")
        self._factors = tuple(_int_arg(name, "factor", f) for f in factors)

    def forward(self, x: Tensor) -> Tensor:
        k, f = self._dims, self._factors
        if x.ndim != k + 2 or x.shape[1] % int(np.prod(f)):
            raise ValueError(f"{type(self).__name__}: expects (N, C * {' * '.join(map(str, f))}, {k} spatial axes), "
                             f"got shape {x.shape}")
        n, c, spatial = x.shape[0], x.shape[1] // int(np.prod(f)), x.shape[2:]
        y = ops.reshape(x, (n, c) + f + spatial)  # (N, C, f1..fk, S1..Sk)
        # interleave: (N, C, S1, f1, S2, f2, ...)
        perm = (0, 1) + tuple(i for pair in zip(range(2 + k, 2 + 2 * k), range(2, 2 + k)) for i in pair)
        return ops.reshape(ops.transpose(y, perm), (n, c) + tuple(s * g for s, g in zip(spatial, f)))

    def _extra_repr(self) -> str:
        return str(self._factors if self._dims > 1 else self._factors[0])


class PixelShuffle1D(_PixelShuffle):
    """``(N, C * f, W) -> (N, C, W * f)`` (MXNet Gluon's ``PixelShuffle1D``); ``factor`` an int."""

    _dims = 1


class PixelShuffle2D(_PixelShuffle):
    """``(N, C * f1 * f2, H, W) -> (N, C, H * f1, W * f2)`` (MXNet Gluon's ``PixelShuffle2D``); ``factor`` an int
    or ``(f1, f2)``."""

    _dims = 2


class PixelShuffle3D(_PixelShuffle):
    """``(N, C * f1 * f2 * f3, D, H, W) -> (N, C, D * f1, H * f2, W * f3)`` (MXNet Gluon's ``PixelShuffle3D``)."""

    _dims = 3


class ReflectionPad2D(Block):
    """Pads ``(N, C, H, W)`` by reflecting each border row and column (the edge itself not repeated), as MXNet
    Gluon's ``ReflectionPad2D`` (``pad(x, mode='reflect')``): ``[a, b, c]`` padded by 2 is ``[c, b, a, b, c, b, a]``.

    Args:
        padding: an int (the same on the four sides), or MXNet's 8-tuple ``pad_width`` (before, after for each
            axis; the batch and channel axes' must be 0).

    Raises:
        ValueError: a ``padding`` that is neither (at construction); an input that is not 4-D, or a padding not
            smaller than the side it reflects (at the call).
    """

    def __init__(self, padding: int | tuple[int, ...] = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
            padding = (0, 0, 0, 0, padding, padding, padding, padding)
        if not isinstance(padding, (tuple, list)) or len(padding) != 8 or any(padding[:4]):
            raise ValueError(f"ReflectionPad2D: padding must be an int or 8 ints (0, 0, 0, 0, top, bottom, left, "
                             f"right), got {padding!r}")
        self._padding = tuple(_int_arg("ReflectionPad2D", "padding", p, low=0) for p in padding)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"ReflectionPad2D expects NCHW input with 4 dimensions, got shape {x.shape}")
        for axis in (2, 3):
            before, after = self._padding[2 * axis], self._padding[2 * axis + 1]
            n = x.shape[axis]
            if max(before, after) >= n:
                raise ValueError(f"ReflectionPad2D: padding {max(before, after)} must be smaller than axis {axis}'s "
                                 f"length {n} (input shape {x.shape})")
            parts = [ops.flip(ops.slice_axis(x, axis, 1, before + 1), axis)] if before else []
            parts.append(x)
            if after:
                parts.append(ops.flip(ops.slice_axis(x, axis, n - 1 - after, n - 1), axis))
            x = ops.concat(parts, axis=axis) if len(parts) > 1 else x
        return x

    def _extra_repr(self) -> str:
        return str(self._padding)
