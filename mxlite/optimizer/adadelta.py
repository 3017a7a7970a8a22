"""AdaDelta (Zeiler 2012), MXNet form::

    G  = clip(rescale_grad * g, ±clip_gradient) + wd * w
    Eg = ρ·Eg + (1 − ρ)·G²
    d  = sqrt(EΔ + ε) / sqrt(Eg + ε) · G
    EΔ = ρ·EΔ + (1 − ρ)·d²
    w  = w − lr · d

Symbols: Eg, EΔ = the states (running averages of G² and of the step d², each shaped and
typed like the weight), ρ = ``rho``, ε = ``epsilon``, lr = ``learning_rate`` · lr_mult,
wd = ``wd`` · wd_mult.

Where mxlite differs:

* Nothing in the formula: it is MXNet master's. Zeiler's paper has no learning rate (lr = 1,
  MXNet's default); PyTorch's Adadelta matches this form with ``lr`` and L2 ``weight_decay``.
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

No fused kernel in ``kernels/`` yet (MXNet has none either): this NumPy/CuPy twin is the only
implementation.

Kernel: ``adadelta_update<T>`` in ``kernels/optimizers.cu``, fused over an arena by the Trainer;
the ``step`` below is the NumPy twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fused import (
    F32,
    ChunkTwin,
    FusedRule,
    chunk_grad,
    decay_add_square,
    lr_wd_params,
    lr_wd_row,
    one_kernel,
    one_minus,
    register_fused,
)
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["AdaDelta"]


@register
class AdaDelta(Optimizer):
    """AdaDelta with MXNet's argument names and defaults.

    Args:
        learning_rate: multiplier of the AdaDelta step (default 1.0, the paper's rule).
        rho: decay ρ of both running averages, in [0, 1).
        epsilon: ε > 0, added inside both square roots.
        **kwargs: see :class:`~mxlite.optimizer.Optimizer`.

    Raises:
        ValueError: ``rho`` outside [0, 1) or ``epsilon <= 0`` (names the argument and value).
    """

    def __init__(self, learning_rate: float = 1.0, rho: float = 0.9, epsilon: float = 1e-6,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_real("rho", rho, low=0, high=1)
        _check_real("epsilon", epsilon, low=0, low_inclusive=False)
        self.rho, self.epsilon = rho, epsilon

    def create_state(self, index: int, weight: Any) -> Any:
        xp = _xp(weight)
        return (xp.zeros_like(weight), xp.zeros_like(weight))  # (Eg, EΔ)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        rho, eps = self.rho, self.epsilon
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        acc_g, acc_delta = state
        acc_g *= rho                                           # Eg = ρ·Eg + (1−ρ)·G²
        acc_g += (1.0 - rho) * g * g
        d = xp.sqrt(acc_delta + eps) / xp.sqrt(acc_g + eps) * g  # d = √(EΔ + ε)/√(Eg + ε)·G
        acc_delta *= rho                                       # EΔ = ρ·EΔ + (1−ρ)·d²
        acc_delta += (1.0 - rho) * d * d
        weight -= lr * d                                       # w −= lr·d


# -- the fused update (adadelta_update in kernels/optimizers.cu) --------------------
def _adadelta_params(opt: Any, index: Any, count: int) -> tuple | None:
    return lr_wd_params(opt, index, opt.rho, opt.epsilon)


def _adadelta_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any,
                    bufs: Sequence[np.ndarray]) -> None:
    lr, wd, rho, eps = p
    acc_g, acc_delta = state
    G = chunk_grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, d = bufs[1], bufs[2]
    decay_add_square(acc_g, G, rho, tmp)                                # Eg = rho*Eg + ((1-rho)*G)*G
    np.add(acc_delta, F32(eps), out=d)                                    # d = (sqrt(Ed + eps)/sqrt(Eg + eps))*G
    np.sqrt(d, out=d)
    np.add(acc_g, F32(eps), out=tmp)
    np.sqrt(tmp, out=tmp)
    d /= tmp
    d *= G
    decay_add_square(acc_delta, d, rho, tmp)                            # Ed = rho*Ed + ((1-rho)*d)*d
    d *= F32(lr)                                                          # w -= lr*d
    w -= d


register_fused(AdaDelta, FusedRule(lambda o: ("acc_g", "acc_delta"), lr_wd_row,
                                   one_kernel("adadelta_update", ("acc_g", "acc_delta"),
                                              lambda o: (o.rho, one_minus(o.rho), o.epsilon)),
                                   kernels=("adadelta_update",),
                                   chunk_twin=ChunkTwin(_adadelta_params, _adadelta_chunk, 3)))
