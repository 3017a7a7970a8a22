"""Activation functions composed from the primitive ops: leaky ReLU, PReLU, ELU, SELU, GELU, swish.

Differentiable through the ops they are built from. Gluon's activation layers
(:mod:`mxlite.gluon.nn.activations`) and ``mx.nd.LeakyReLU`` apply them.
"""

from __future__ import annotations

import math

from . import ops
from .tensor import Tensor

__all__ = ["elu", "gelu", "leaky_relu", "prelu", "selu", "swish"]

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
