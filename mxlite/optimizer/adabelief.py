"""AdaBelief (Zhuang et al. 2020, "AdaBelief Optimizer: Adapting Stepsizes by the Belief in
Observed Gradients"), MXNet 2.x form::

    G     = clip(rescale_grad · g + wd · w, ±clip_gradient)     (decay added before clipping)
    m     = β1·m + (1 − β1)·G
    s     = β2·s + (1 − β2)·(G − m)² + ε
    lr_t  = lr · sqrt(1 − β2^t) / (1 − β1^t)                    (lr_t = lr without correct_bias)
    w     = w − lr_t · m / (sqrt(s) + ε)

Symbols: ``t`` this parameter's update count, β1/β2 = ``beta1``/``beta2``, ε = ``epsilon``,
``lr`` and ``wd`` with their multipliers. States: ``(m, s)``.

Where mxlite differs: nowhere from MXNet's ``step``. From Adam: the second moment tracks the
gradient's deviation from its mean (the "belief") and adds ε inside the root every step; and
unlike Adam, MXNet adds the weight decay *before* clipping here.

Fused: ``adabelief_update`` in ``kernels/optimizers.cu`` (float32, float16 and bfloat16 weights)
runs this update over a whole arena in one launch on GPUs and, built for the host, on CPU devices,
reading ``(lr_t, wd)`` per parameter (its registration below); :meth:`AdaBelief.step` is
its NumPy twin, operation by operation (the CPU update with ``MXLITE_CPU_KERNELS=numpy``), and the
per-parameter path everywhere else (float64, subclasses).
"""

from __future__ import annotations

import math
from typing import Any

from ._fused import FusedRule, Row, betas_eps, one_kernel, register_fused
from .adam import _check_betas_epsilon, _zero_moments
from .optimizer import Optimizer, _xp, register

__all__ = ["AdaBelief"]


@register
class AdaBelief(Optimizer):
    """AdaBelief with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0 (default 1e-6), added inside (each step) and outside the square root.
        correct_bias: fold the bias corrections into the step size (default True).
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: a β outside [0, 1) or ε <= 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-6, correct_bias: bool = True, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.correct_bias = bool(correct_bias)

    def _create_state(self, index: Any, weight: Any) -> Any:
        return _zero_moments(weight)

    def _lr_t(self, lr: float, count: int) -> float:
        """The step size of update ``count``: ``lr·√(1−β2^t)/(1−β1^t)``, or ``lr`` without ``correct_bias``
        (float64; the fused kernel's table value too)."""
        if self.correct_bias:
            return lr * math.sqrt(1.0 - self.beta2**count) / (1.0 - self.beta1**count)
        return lr

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = grad * self.rescale_grad
        if wd:
            g = g + wd * weight                                # G = rescale·g + wd·w, then clipped
        if self.clip_gradient is not None:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        lr = self._lr_t(lr, count)                              # lr_t = lr·√(1−β2^t)/(1−β1^t)
        m, s = state
        m *= self.beta1                                        # m = β1·m + (1−β1)·G
        m += (1.0 - self.beta1) * g
        d = g - m
        s *= self.beta2                                        # s = β2·s + (1−β2)·(G−m)² + ε
        s += (1.0 - self.beta2) * d * d
        s += self.epsilon
        weight -= lr * m / (xp.sqrt(s) + self.epsilon)         # w −= lr_t·m/(√s + ε)


# -- the fused update (adabelief_update in kernels/optimizers.cu) --------------------
def _adabelief_row(opt: AdaBelief, index: Any, count: int) -> Row:
    return (opt._lr_t(opt._get_lr(index), count), opt._get_wd(index))


register_fused(AdaBelief, FusedRule(lambda o: ("mean", "var"), _adabelief_row,
                                    one_kernel("adabelief_update", ("mean", "var"), betas_eps),
                                    kernels=("adabelief_update",)))
