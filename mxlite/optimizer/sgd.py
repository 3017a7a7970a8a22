"""SGD with optional momentum (MXNet form).

    G   = clip(rescale_grad * g, ±clip_gradient) + wd * w
    mom = momentum * mom - lr * G        (momentum > 0)
    w   = w + mom                        (w = w - lr * G without momentum)
"""

from __future__ import annotations

from typing import Any

from .optimizer import Optimizer, _check_nonneg, _xp, register


@register
class SGD(Optimizer):
    """Stochastic gradient descent with MXNet's momentum form.

    Args:
        learning_rate: step size (default 0.1, as MXNet 2.x).
        momentum: μ in ``mom = μ·mom − lr·G``; 0 disables the state.
        lazy_update: accepted for MXNet compatibility (row-sparse gradients are densified here).

    Raises:
        ValueError: negative momentum.
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.0, lazy_update: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_nonneg("momentum", momentum)
        self.momentum = momentum
        self.lazy_update = lazy_update

    def create_state(self, index: int, weight: Any) -> Any:
        if self.momentum == 0.0:
            return None
        return _xp(weight).zeros_like(weight)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)   # G = clip(rescale·g) + wd·w
        if state is None:
            weight -= lr * g                             # w -= lr·G
        else:
            state *= self.momentum                       # mom = μ·mom − lr·G
            state -= lr * g
            weight += state                              # w += mom
