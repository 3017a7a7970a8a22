"""DCASGD, delay-compensated asynchronous SGD (Zheng et al. 2017), MXNet 2.x form::

    G    = clip(rescale_grad · g, ±clip_gradient) + wd · w
    D    = G + λ · G² · (w − w_prev)
    mom  = μ·mom − lr·D                  (without momentum: mom = −lr·D)
    w_prev = w
    w    = w + mom

Symbols: λ = ``lamda``, μ = ``momentum``, ``lr`` and ``wd`` with their multipliers.
States: ``(mom, w_prev)``, ``mom`` None without momentum and ``w_prev`` a copy of the
initial weight.

Where mxlite differs: nowhere from MXNet.

No fused kernel: :meth:`DCASGD.step` (NumPy/CuPy) is the implementation.
"""

from __future__ import annotations

from typing import Any

from .optimizer import Optimizer, _check_momentum, _check_real, _xp, register

__all__ = ["DCASGD"]


@register
class DCASGD(Optimizer):
    """DCASGD with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.1).
        momentum: in [0, 1) (default 0).
        lamda: the delay-compensation strength λ >= 0 (default 0.04; MXNet's spelling).
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: momentum outside [0, 1) or lamda < 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.0, lamda: float = 0.04,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_momentum(momentum)
        _check_real("lamda", lamda, low=0)
        self.momentum, self.lamda = momentum, lamda

    def _create_state(self, index: Any, weight: Any) -> Any:
        xp = _xp(weight)
        mom = xp.zeros_like(weight) if self.momentum != 0.0 else None
        return mom, weight.copy()

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        mom, prev = state
        d = g + self.lamda * g * g * (weight - prev)           # D = G + λ·G²·(w − w_prev)
        if mom is not None:
            mom *= self.momentum                               # mom = μ·mom − lr·D
            mom -= lr * d
            step = mom
        else:
            step = -lr * d
        prev[...] = weight                                     # w_prev = w
        weight += step                                         # w += mom
