"""FTML (Zheng & Kwok 2017, "Follow the Moving Leader in Deep Learning"), MXNet 2.x form::

    G     = clip(rescale_grad · g, ±clip_gradient) + wd · w
    v     = β2·v + (1 − β2)·G²
    d'    = (1 − β1^t) / lr · (sqrt(v / (1 − β2^t)) + ε)
    σ     = d' − β1·d
    z     = β1·z + (1 − β1)·G − σ·w
    d     = d'
    w     = −z / d

Symbols: ``t`` this parameter's update count, β1/β2 = ``beta1``/``beta2``, ε = ``epsilon``,
``lr`` and ``wd`` with their multipliers. States: ``(d, v, z)``, all starting at 0.

Where mxlite differs: nowhere from MXNet's ``step`` (MXNet 1.x's kernel clipped after adding
the decay).

No fused kernel: :meth:`FTML.step` (NumPy/CuPy) is the implementation.
"""

from __future__ import annotations

from typing import Any

from .adam import _check_betas_epsilon
from .optimizer import Optimizer, _xp, register

__all__ = ["FTML"]


@register
class FTML(Optimizer):
    """FTML with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.0025).
        beta1: decay of the leader (default 0.6), in [0, 1).
        beta2: decay of the second moment (default 0.999), in [0, 1).
        epsilon: > 0 (default 1e-8).
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: a β outside [0, 1) or ε <= 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.0025, beta1: float = 0.6, beta2: float = 0.999,
                 epsilon: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def _create_state(self, index: Any, weight: Any) -> Any:
        xp = _xp(weight)
        return xp.zeros_like(weight), xp.zeros_like(weight), xp.zeros_like(weight)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        coef1, coef2 = 1.0 - self.beta1**count, 1.0 - self.beta2**count
        d, v, z = state
        v *= self.beta2                                        # v = β2·v + (1−β2)·G²
        v += (1.0 - self.beta2) * g * g
        sigma = -self.beta1 * d
        d[...] = (xp.sqrt(v / coef2) + self.epsilon) * (coef1 / lr)  # d = (1−β1^t)/lr·(√(v/(1−β2^t)) + ε)
        sigma += d                                             # σ = d − β1·d_old
        z *= self.beta1                                        # z = β1·z + (1−β1)·G − σ·w
        z += (1.0 - self.beta1) * g
        z -= sigma * weight
        weight[...] = -z / d                                   # w = −z/d
