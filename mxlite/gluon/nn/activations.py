"""Activation layers (Gluon's ``nn.LeakyReLU``, ``PReLU``, ``ELU``, ``SELU``, ``GELU``, ``Swish``/``SiLU``).

The differentiable functions they apply live on the tensor floor, :mod:`mxlite.ops.activations`
(``mx.nd.LeakyReLU`` and the layers share them); they are re-exported here under their old names."""

from __future__ import annotations

from typing import Any

from ... import initializer as _init
from ...autograd.tensor import Tensor
from ...ops.activations import elu, gelu, leaky_relu, prelu, selu, swish
from ..block import Block
from ..parameter import Parameter

__all__ = ["LeakyReLU", "PReLU", "ELU", "SELU", "GELU", "Swish", "SiLU", "leaky_relu", "prelu", "elu", "selu",
           "gelu", "swish"]

class LeakyReLU(Block):
    """``x`` where positive, else ``alpha * x``.

    Raises:
        ValueError: ``alpha < 0``.
    """

    def __init__(self, alpha: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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

    def __init__(self, alpha_initializer: Any = None, in_channels: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = Parameter("alpha", shape=(in_channels,),
                               init=alpha_initializer if alpha_initializer is not None else _init.Constant(0.25))

    def forward(self, x: Tensor) -> Tensor:
        if not self.alpha.is_initialized:
            self.alpha._finish_deferred_init()
        return prelu(x, self.alpha.data(x.device))


class ELU(Block):
    """``x`` where positive, else ``alpha * (exp(x) - 1)``."""

    def __init__(self, alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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

    def __init__(self, approximation: str = "erf", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if approximation not in ("erf", "tanh"):
            raise ValueError(f"GELU: approximation must be 'erf' or 'tanh', got {approximation!r}")
        self._approximation = approximation

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self._approximation)


class Swish(Block):
    """``x * sigmoid(beta * x)`` (beta fixed, 1.0 by default)."""

    def __init__(self, beta: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._beta = float(beta)

    def forward(self, x: Tensor) -> Tensor:
        return swish(x, self._beta)


class SiLU(Swish):
    """``x * sigmoid(x)`` (Swish with beta 1)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(1.0, **kwargs)
