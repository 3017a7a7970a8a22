"""Activation layers (Gluon's ``nn.LeakyReLU``, ``PReLU``, ``ELU``, ``SELU``, ``GELU``, ``Swish``/``SiLU``)
and the differentiable functions they apply, composed from mxlite's primitive ops."""

from __future__ import annotations

import math
from typing import Any

from ...autograd import ops
from ...autograd.tensor import Tensor
from ..block import Block
from ..parameter import Parameter

__all__ = ["LeakyReLU", "PReLU", "ELU", "SELU", "GELU", "Swish", "SiLU", "leaky_relu", "prelu", "elu", "selu",
           "gelu", "swish"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _positive(x: Tensor) -> Tensor:
    """The bool mask ``x > 0`` (no gradient)."""
    return Tensor(x._data > 0, x.device)


def leaky_relu(x: Tensor, alpha: float) -> Tensor:
    """``x`` where positive, else ``alpha * x``."""
    return ops.where(_positive(x), x, ops.multiply(x, alpha))


def prelu(x: Tensor, alpha: Tensor) -> Tensor:
    """``x`` where positive, else ``alpha * x``; ``alpha`` (one value, or one per channel on axis 1) is learned."""
    if alpha.size > 1 and x.ndim >= 2:
        alpha = ops.reshape(alpha, (1, alpha.size) + (1,) * (x.ndim - 2))
    return ops.where(_positive(x), x, ops.multiply(x, alpha))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, else ``alpha * (exp(x) - 1)`` (``exp`` of a clamped value: no overflow)."""
    neg = ops.multiply(ops.expm1(ops.minimum(x, 0.0)), alpha)
    return ops.where(_positive(x), x, neg)


def selu(x: Tensor) -> Tensor:
    """Self-normalising ELU: ``scale * elu(x, alpha)`` with Klambauer et al.'s constants."""
    return ops.multiply(elu(x, _SELU_ALPHA), _SELU_SCALE)


def gelu(x: Tensor, approximation: str = "erf") -> Tensor:
    """Gaussian error linear unit: ``x * Φ(x)`` (``'erf'``, exact) or its ``'tanh'`` approximation.

    Raises:
        ValueError: unknown ``approximation``.
    """
    if approximation == "erf":
        return ops.multiply(ops.multiply(x, 0.5), ops.add(ops.erf(ops.multiply(x, 1 / math.sqrt(2.0))), 1.0))
    if approximation == "tanh":
        inner = ops.multiply(ops.add(x, ops.multiply(ops.power(x, 3.0), 0.044715)), math.sqrt(2 / math.pi))
        return ops.multiply(ops.multiply(x, 0.5), ops.add(ops.tanh(inner), 1.0))
    raise ValueError(f"GELU: approximation must be 'erf' or 'tanh', got {approximation!r}")


def swish(x: Tensor, beta: float = 1.0) -> Tensor:
    """``x * sigmoid(beta * x)``."""
    return ops.multiply(x, ops.sigmoid(ops.multiply(x, beta)))


class LeakyReLU(Block):
    """``x`` where positive, else ``alpha * x``.

    Raises:
        ValueError: ``alpha < 0``.
    """

    def __init__(self, alpha: float) -> None:
        super().__init__()
        if not alpha >= 0:
            raise ValueError(f"LeakyReLU: alpha must be >= 0, got {alpha}")
        self._alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        return leaky_relu(x, self._alpha)

    def _extra_repr(self) -> str:
        return f"{self._alpha}"


class PReLU(Block):
    """Leaky ReLU with a learned slope ``alpha`` (one value, or ``in_channels`` values along axis 1).

    Args:
        alpha_initializer: initializer of ``alpha`` (default: constant 0.25, as Gluon).
        in_channels: number of slopes (1: one shared slope).
    """

    def __init__(self, alpha_initializer: Any = None, in_channels: int = 1) -> None:
        super().__init__()
        from ... import initializer as _init  # noqa: PLC0415

        self.alpha = Parameter("alpha", shape=(in_channels,),
                               init=alpha_initializer if alpha_initializer is not None else _init.Constant(0.25))

    def forward(self, x: Tensor) -> Tensor:
        if not self.alpha.is_initialized:
            self.alpha._finish_deferred_init()
        return prelu(x, self.alpha.data(x.device))


class ELU(Block):
    """``x`` where positive, else ``alpha * (exp(x) - 1)``."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self._alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self._alpha)


class SELU(Block):
    """Self-normalising exponential linear unit (``scale * elu(x, alpha)``, alpha ≈ 1.6733, scale ≈ 1.0507)."""

    def forward(self, x: Tensor) -> Tensor:
        return selu(x)


class GELU(Block):
    """Gaussian error linear unit ``x * Φ(x)``; ``approximation='tanh'`` uses the tanh formula.

    Raises:
        ValueError: unknown ``approximation``.
    """

    def __init__(self, approximation: str = "erf") -> None:
        super().__init__()
        if approximation not in ("erf", "tanh"):
            raise ValueError(f"GELU: approximation must be 'erf' or 'tanh', got {approximation!r}")
        self._approximation = approximation

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self._approximation)


class Swish(Block):
    """``x * sigmoid(beta * x)`` (beta fixed, 1.0 by default)."""

    def __init__(self, beta: float = 1.0) -> None:
        super().__init__()
        self._beta = float(beta)

    def forward(self, x: Tensor) -> Tensor:
        return swish(x, self._beta)


class SiLU(Swish):
    """``x * sigmoid(x)`` (Swish with beta 1)."""

    def __init__(self) -> None:
        super().__init__(1.0)
