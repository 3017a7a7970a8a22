"""Adam (MXNet 2.x form: bias correction folded into the learning rate, ε outside the root).

    G     = clip(rescale_grad * g, ±clip_gradient) + wd * w
    m     = β1·m + (1 − β1)·G
    v     = β2·v + (1 − β2)·G²
    lr_t  = lr · sqrt(1 − β2^t) / (1 − β1^t)
    w     = w − lr_t · m / (sqrt(v) + ε)
"""

from __future__ import annotations

import math
from typing import Any

from .optimizer import Optimizer, _xp, register


@register
class Adam(Optimizer):
    """Adam as in MXNet: ε is added to ``sqrt(v)`` of the *uncorrected* second moment.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0, added outside the square root.

    Raises:
        ValueError: a β outside [0, 1) or ε <= 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, lazy_update: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {beta}")
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update = lazy_update

    def create_state(self, index: int, weight: Any) -> Any:
        xp = _xp(weight)
        return (xp.zeros_like(weight), xp.zeros_like(weight))  # (m, v)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        lr_t = lr * math.sqrt(1.0 - self.beta2**count) / (1.0 - self.beta1**count)
        g = self._effective_grad(xp, grad, weight, wd)        # G = clip(rescale·g) + wd·w
        m, v = state
        m *= self.beta1                                       # m = β1·m + (1−β1)·G
        m += (1.0 - self.beta1) * g
        v *= self.beta2                                       # v = β2·v + (1−β2)·G²
        v += (1.0 - self.beta2) * g * g
        weight -= lr_t * m / (xp.sqrt(v) + self.epsilon)      # w −= lr_t·m/(√v + ε)
