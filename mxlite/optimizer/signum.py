"""Signum and signSGD (Bernstein et al. 2018, "signSGD: Compressed Optimisation for
Non-Convex Problems"), MXNet form, with decoupled weight decay ``wd_lh`` (Loshchilov & Hutter).

Signum (``momentum > 0``)::

    G   = clip(rescale_grad * g, ±clip_gradient) + wd * w
    mom = μ·mom − (1 − μ)·G
    w   = (1 − lr·wd_lh)·w + lr·sign(mom)

signSGD (``momentum == 0``: no state)::

    w   = (1 − lr·(wd + wd_lh))·w − lr·sign(g)

Symbols: μ = ``momentum``, ``wd_lh`` = the decoupled decay (never enters the sign),
lr = ``learning_rate`` · lr_mult, wd = ``wd`` · wd_mult. The state ``mom`` holds the
*negated* momentum of the paper (``m = −mom``), as in MXNet, hence ``+ lr·sign(mom)``.

Where mxlite differs:

* Nothing in the formulas: they are MXNet master's (Python ``step`` and the fused
  ``signum_update``/``signsgd_update`` kernels agree). In signSGD the sign is that of the raw
  gradient, as in MXNet: a positive ``rescale_grad`` and clipping cannot change it, and the
  coupled ``wd`` acts as a multiplicative decay rather than inside the sign.
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

No fused kernel in ``kernels/`` yet: this NumPy/CuPy twin is the only implementation.

Kernel: ``signum_update<T>`` in ``kernels/optimizers.cu``, fused over an arena by the Trainer;
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
    Row,
    chunk_grad,
    grad_ok,
    momentum_state,
    one_kernel,
    one_minus,
    plain,
    register_fused,
)
from .optimizer import Optimizer, _check_momentum, _check_real, _xp, register

__all__ = ["Signum"]


@register
class Signum(Optimizer):
    """Signum (signSGD when ``momentum == 0``) with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.01); every coordinate moves by exactly ``lr``.
        momentum: μ in [0, 1) of the momentum average; 0 selects signSGD (no state).
        wd_lh: decoupled weight decay >= 0: ``w *= 1 − lr·wd_lh`` each step.
        **kwargs: see :class:`~mxlite.optimizer.Optimizer`.

    Raises:
        ValueError: ``momentum`` outside [0, 1) (at 1 the average never moves, above 1 its
            sign flips) or a negative ``wd_lh`` (names the argument and the value).
    """

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.9, wd_lh: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_momentum(momentum)
        _check_real("wd_lh", wd_lh, low=0)
        self.momentum, self.wd_lh = momentum, wd_lh

    def create_state(self, index: int, weight: Any) -> Any:
        if self.momentum == 0.0:
            return None
        return _xp(weight).zeros_like(weight)  # mom

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        if state is None:
            weight *= 1.0 - lr * (wd + self.wd_lh)              # w = (1 − lr·(wd + wd_lh))·w − lr·sign(g)
            weight -= lr * xp.sign(grad)
        else:
            g = self._effective_grad(xp, grad, weight, wd)      # G = clip(rescale·g) + wd·w
            state *= self.momentum                              # mom = μ·mom − (1−μ)·G
            state -= (1.0 - self.momentum) * g
            weight *= 1.0 - lr * self.wd_lh                     # w = (1 − lr·wd_lh)·w + lr·sign(mom)
            weight += lr * xp.sign(state)


# -- the fused update (signum_update in kernels/optimizers.cu) --------------------
def _signum_row(opt: Signum, index: Any, count: int) -> Row:
    lr, wd = opt._get_lr(index), opt._get_wd(index)
    decay = 1.0 - lr * opt.wd_lh if opt.momentum else 1.0 - lr * (wd + opt.wd_lh)
    return (lr, wd, decay)


def _signum_params(opt: Any, index: Any, count: int) -> tuple | None:
    lr, wd = opt._get_lr(index), opt._get_wd(index)
    decay = 1.0 - lr * opt.wd_lh if opt.momentum else 1.0 - lr * (wd + opt.wd_lh)
    values = (lr, wd, opt.momentum, decay)
    return values if grad_ok(opt) and plain(*values) else None


def _signum_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, mom: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, mu, decay = p
    tmp = bufs[1]
    if mom is None:
        w *= F32(decay)                                                   # w = (1 - lr*(wd + wd_lh))*w - lr*sign(g)
        np.sign(g, out=tmp)
        tmp *= F32(lr)
        w -= tmp
        return
    G = chunk_grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    mom *= F32(mu)                                                        # mom = mu*mom - (1-mu)*G
    np.multiply(G, F32(1.0 - mu), out=tmp)
    mom -= tmp
    if decay != 1.0:                                                     # (w*1 is w: skipped)
        w *= F32(decay)                                                   # w = (1 - lr*wd_lh)*w + lr*sign(mom)
    np.sign(mom, out=tmp)
    tmp *= F32(lr)
    w += tmp


register_fused(Signum, FusedRule(momentum_state, _signum_row,
                                 one_kernel("signum_update", ("mom",), lambda o: (o.momentum, one_minus(o.momentum))),
                                 kernels=("signum_update",), chunk_twin=ChunkTwin(_signum_params, _signum_chunk, 2)))
