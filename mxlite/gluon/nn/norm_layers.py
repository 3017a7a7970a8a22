"""Normalisation layers beyond BatchNorm/LayerNorm: ``GroupNorm`` and ``InstanceNorm`` (MXNet Gluon 2.x's).

Both are composed from mxlite's differentiable ops (mean, subtract, square, sqrt, divide), so
their gradients come from the ops' own and hold on every device. Statistics are taken in at
least float32 (a float16 input is normalised in float32 and cast back).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import ops
from ...autograd.tensor import Tensor
from ..block import Block
from ..parameter import Parameter
from .basic_layers import BatchNorm, _int_arg, _ready, _real_arg

__all__ = ["GroupNorm", "InstanceNorm", "SyncBatchNorm", "group_norm", "instance_norm"]


def _normalize(x: Tensor, groups: int, eps: float) -> Tensor:
    """``x`` of shape ``(N, C, ...)`` normalised per sample over each of ``groups`` channel groups.

    Mean and biased variance are taken over the ``C // groups`` channels of a group and every
    axis after the channel axis; the result is ``(x - mean) / sqrt(var + eps)``, ``x``'s shape.
    """
    shape = x.shape
    wide = x.dtype == np.float16
    data = ops.astype(x, np.float32) if wide else x
    grouped = ops.reshape(data, (shape[0], groups, -1))
    mu = ops.mean(grouped, axis=2, keepdims=True)
    centred = ops.subtract(grouped, mu)
    var = ops.mean(ops.square(centred), axis=2, keepdims=True)
    out = ops.reshape(ops.divide(centred, ops.sqrt(ops.add(var, eps))), shape)
    return ops.astype(out, np.float16) if wide else out


def _affine(x: Tensor, gamma: Tensor, beta: Tensor) -> Tensor:
    """``x * gamma + beta`` with ``gamma``/``beta`` of shape ``(C,)`` broadcast over axis 1 of ``x``."""
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return ops.add(ops.multiply(x, ops.reshape(gamma, bshape)), ops.reshape(beta, bshape))


def _check_channels(name: str, x: Tensor, gamma: Tensor, beta: Tensor) -> None:
    if x.ndim < 2:
        raise ValueError(f"{name} needs an input of shape (N, C, ...), got shape {x.shape}")
    c = x.shape[1]
    for what, t in (("gamma", gamma), ("beta", beta)):
        if t.shape != (c,):
            raise ValueError(f"{name}: {what} must have shape ({c},) for {c} channels, got {t.shape}")


def group_norm(x: Tensor, gamma: Tensor, beta: Tensor, num_groups: int = 1, eps: float = 1e-5) -> Tensor:
    """Group normalisation (MXNet's ``npx.group_norm``), channels on axis 1.

    ``x`` of shape ``(N, C, ...)`` is viewed as ``(N, num_groups, C // num_groups, ...)``; each
    sample's group is normalised with its mean and biased variance, then scaled and shifted per
    channel: ``gamma[c] * (x - mean) / sqrt(var + eps) + beta[c]``.

    Args:
        x: floating-point input ``(N, C, ...)``.
        gamma, beta: per-channel scale and shift, shape ``(C,)``.
        num_groups: how many groups the channel axis is split into; must divide ``C``.
        eps: added to the variance, in the units of ``x`` squared.

    Returns:
        A tensor of ``x``'s shape and dtype; gradients flow to ``x``, ``gamma`` and ``beta``.

    Raises:
        ValueError: ``num_groups`` does not divide ``C``, ``x`` has fewer than 2 axes, or
            ``gamma``/``beta`` are not ``(C,)``.
    """
    _check_channels("group_norm", x, gamma, beta)
    if x.shape[1] % num_groups:
        raise ValueError(f"group_norm: num_groups={num_groups} does not divide the {x.shape[1]} channels "
                         f"of x (shape {x.shape})")
    return _affine(_normalize(x, num_groups, eps), gamma, beta)


def instance_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """Instance normalisation (MXNet's ``npx.instance_norm``), channels on axis 1.

    Each (sample, channel) slice of ``x`` (shape ``(N, C, ...)``, at least 3 axes) is normalised
    over its remaining axes: ``gamma[c] * (x - mean) / sqrt(var + eps) + beta[c]`` (biased
    variance).

    Raises:
        ValueError: ``x`` has fewer than 3 axes, or ``gamma``/``beta`` are not ``(C,)``.
    """
    _check_channels("instance_norm", x, gamma, beta)
    if x.ndim < 3:
        raise ValueError(f"instance_norm needs an input of shape (N, C, d1, ...) with at least 3 axes, "
                         f"got shape {x.shape}")
    return _affine(_normalize(x, x.shape[1], eps), gamma, beta)


class _ChannelNorm(Block):
    """Shared parts: per-channel ``gamma``/``beta`` with MXNet's grad_req rule, deferred shapes."""

    _layer = "norm"

    def __init__(self, epsilon: float, center: bool, scale: bool, beta_initializer: Any, gamma_initializer: Any,
                 in_channels: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _real_arg(self._layer, "epsilon", epsilon, low=0, low_inclusive=False)
        in_channels = _int_arg(self._layer, "in_channels", in_channels, low=0)
        self._eps, self._center, self._scale = epsilon, bool(center), bool(scale)
        # As MXNet: with scale=False (center=False) gamma (beta) keeps its initial value and gets grad_req 'null'.
        self.gamma = Parameter("gamma", grad_req="write" if scale else "null", shape=(in_channels,),
                               init=gamma_initializer, allow_deferred_init=True)
        self.beta = Parameter("beta", grad_req="write" if center else "null", shape=(in_channels,),
                              init=beta_initializer, allow_deferred_init=True)

    def _params_for(self, x: Tensor, channels: int) -> tuple[Tensor, Tensor]:
        for p in (self.gamma, self.beta):
            if not p.is_initialized:
                p.shape = (channels,)
            elif p.shape != (channels,):
                raise ValueError(f"{self._layer}: Parameter '{p.label}' has shape {p.shape}, but the input has "
                                 f"{channels} channels (x shape {x.shape})")
        return _ready(self.gamma, x), _ready(self.beta, x)


class GroupNorm(_ChannelNorm):
    """Group normalisation (Wu and He, 2018) over an input ``(N, C, ...)``, MXNet Gluon 2.x's arguments.

    The channel axis (always axis 1) is split into ``num_groups`` groups; each sample's group is
    normalised by its mean and biased variance, then ``gamma``/``beta`` scale and shift each
    channel. ``GroupNorm(num_groups=C)`` is instance normalisation, ``num_groups=1`` normalises
    over every axis but the batch axis.

    Args:
        num_groups: groups the channels are split into (divides the channel count).
        epsilon: added to the variance (units of the input squared), > 0.
        center: learn ``beta`` (else it stays at its initial value, grad_req 'null').
        scale: learn ``gamma`` (else it stays at its initial value, grad_req 'null').
        beta_initializer, gamma_initializer: initializers (default zeros and ones).
        in_channels: number of channels; 0 infers it from the first batch.

    Parameters: ``gamma`` and ``beta``, shape ``(in_channels,)`` (MXNet 2.x; MXNet 1.x had one
    per group).

    Raises:
        ValueError / TypeError: a bad ``num_groups``, ``epsilon`` or ``in_channels`` (at
            construction); a channel count not divisible by ``num_groups`` or different from the
            initialised parameters' (at the call).
    """

    _layer = "GroupNorm"

    def __init__(self, num_groups: int = 1, epsilon: float = 1e-5, center: bool = True, scale: bool = True,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(epsilon, center, scale, beta_initializer, gamma_initializer, in_channels, **kwargs)
        self._num_groups = _int_arg("GroupNorm", "num_groups", num_groups)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ValueError(f"GroupNorm needs an input of shape (N, C, ...), got shape {x.shape}")
        if x.shape[1] % self._num_groups:
            raise ValueError(f"GroupNorm: num_groups={self._num_groups} does not divide the {x.shape[1]} channels "
                             f"on axis 1 (x shape {x.shape})")
        gamma, beta = self._params_for(x, x.shape[1])
        return group_norm(x, gamma, beta, self._num_groups, self._eps)

    def _extra_repr(self) -> str:
        return (f"eps={self._eps}, num_groups={self._num_groups}, center={self._center}, scale={self._scale}, "
                f"in_channels={self.gamma.shape[0] if self.gamma.shape else 0}")


class InstanceNorm(_ChannelNorm):
    """Instance normalisation (Ulyanov et al., 2016), MXNet Gluon's arguments and defaults.

    Each (sample, channel) slice is normalised over every other axis by its mean and biased
    variance: ``gamma * (x - mean) / sqrt(var + eps) + beta``. ``axis`` names the channel axis
    (1 for NCHW, 3 for NHWC); the batch is axis 0. The input needs at least 3 axes.

    Args:
        axis: the channel axis (not normalised over); not 0.
        epsilon: added to the variance (units of the input squared), > 0.
        center: learn ``beta`` (default True).
        scale: learn ``gamma``; **False by default, as in MXNet** (``gamma`` then stays at its
            initial value, ones unless ``gamma_initializer`` says otherwise).
        beta_initializer, gamma_initializer: initializers (default zeros and ones).
        in_channels: number of channels; 0 infers it from the first batch.

    Parameters: ``gamma`` and ``beta``, shape ``(in_channels,)``.

    Raises:
        ValueError / TypeError: bad ``axis``, ``epsilon`` or ``in_channels`` (at construction);
            an input with fewer than 3 axes, ``axis`` out of range or 0, or a channel count
            different from the initialised parameters' (at the call).
    """

    _layer = "InstanceNorm"

    def __init__(self, axis: int = 1, epsilon: float = 1e-5, center: bool = True, scale: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(epsilon, center, scale, beta_initializer, gamma_initializer, in_channels, **kwargs)
        self._axis = _int_arg("InstanceNorm", "axis", axis, low=-(2**31))
        if axis == 0:
            raise ValueError("InstanceNorm: axis must name the channel axis, not the batch axis 0")

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 3:
            raise ValueError(f"InstanceNorm needs an input with at least 3 axes (N, C, d1, ...), got shape {x.shape}")
        if not -x.ndim <= self._axis < x.ndim or self._axis % x.ndim == 0:
            raise ValueError(f"InstanceNorm: axis {self._axis} is out of range or the batch axis for input of shape "
                             f"{x.shape}")
        axis = self._axis % x.ndim
        gamma, beta = self._params_for(x, x.shape[axis])
        if axis == 1:
            return instance_norm(x, gamma, beta, self._eps)
        return ops.swapaxes(instance_norm(ops.swapaxes(x, 1, axis), gamma, beta, self._eps), 1, axis)

    def _extra_repr(self) -> str:
        return (f"eps={self._eps}, axis={self._axis}, center={self._center}, scale={self._scale}, "
                f"in_channels={self.gamma.shape[0] if self.gamma.shape else 0}")



class SyncBatchNorm(BatchNorm):
    """MXNet Gluon's ``SyncBatchNorm`` on one device: :class:`BatchNorm` (the statistics of the batch it is given).

    MXNet's reduces the batch statistics over the devices of one process, whose forward passes run concurrently;
    mxlite runs each device's forward in turn, eagerly, so statistics cannot be shared between them, and a layer
    whose parameters live on several devices raises rather than normalise each device's slice on its own.

    Args:
        in_channels, momentum, epsilon, center, scale, use_global_stats, the initializers: as :class:`BatchNorm`.
        num_devices: MXNet's count of devices to synchronise; more than 1 raises.
        key: MXNet's synchronisation key, accepted and unused.

    Raises:
        NotImplementedError: ``num_devices > 1`` (at construction), or parameters on several devices (at the call).
    """

    def __init__(self, in_channels: int = 0, num_devices: int | None = None, momentum: float = 0.9,
                 epsilon: float = 1e-5, center: bool = True, scale: bool = True, use_global_stats: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                 running_mean_initializer: Any = "zeros", running_variance_initializer: Any = "ones",
                 key: Any = None, **kwargs: Any) -> None:
        if num_devices is not None and num_devices > 1:
            raise NotImplementedError(self._several(f"num_devices={num_devices}"))
        super().__init__(1, momentum, epsilon, center, scale, use_global_stats, beta_initializer, gamma_initializer,
                         running_mean_initializer, running_variance_initializer, in_channels, **kwargs)

    @staticmethod
    def _several(what: str) -> str:
        return (f"SyncBatchNorm: {what}: mxlite cannot synchronise batch statistics across devices (each device's "
                "forward runs in turn); use nn.BatchNorm (statistics per device) or a larger batch per device")

    def forward(self, x: Tensor) -> Tensor:
        out = super().forward(x)
        devices = self.gamma.list_device()
        if len(devices) > 1:
            raise NotImplementedError(self._several(f"its parameters are on {len(devices)} devices"))
        return out
