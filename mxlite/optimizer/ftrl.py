"""FTRL-proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the Trenches"), MXNet form::

    g = clip(rescale_grad * g, ±clip_gradient)                  (no weight decay here)
    σ = (sqrt(n + g²) − sqrt(n)) / lr
    z = z + g − σ·w
    n = n + g²
    w = −sign(z) · max(|z| − λ1, 0) / ((β + sqrt(n)) / lr + wd)

Symbols: z, n = the states (shaped and typed like the weight), λ1 = ``lamda1`` (L1
strength; MXNet's spelling), β = ``beta``, lr = ``learning_rate`` · lr_mult (the paper's
α), wd = ``wd`` · wd_mult (the paper's L2 strength λ2). The weight is *recomputed* from z
and n each step (coordinates with |z| <= λ1 become exactly 0), not moved by a step.

Where mxlite differs:

* Nothing in the formula: it is MXNet master's (Python ``step`` and the fused
  ``ftrl_update`` kernel agree). The current lr (scheduler, lr_mult) is used in both σ and
  the denominator, so a changing lr changes the recomputed weight at once.
* The rule divides by lr: ``learning_rate <= 0`` raises at construction, and a step whose
  effective lr is 0 (lr_mult = 0, or a schedule reaching 0) raises ``ValueError`` naming the
  index instead of writing NaN/inf into the weight as MXNet does.
* ``beta = 0`` with ``wd = 0`` is allowed (as in MXNet) but gives 0/0 = NaN for a coordinate
  whose gradients have all been 0 so far; keep ``beta > 0`` for parameters that may be unused.
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

No fused kernel in ``kernels/`` yet: this NumPy/CuPy twin is the only implementation.

Kernel: ``ftrl_update<T>`` in ``kernels/optimizers.cu``, fused over an arena by the Trainer;
the ``step`` below is the NumPy twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fused import F32, ChunkTwin, FusedRule, Row, chunk_grad, grad_ok, one_kernel, plain, register_fused, zeros_f32
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["Ftrl"]


@register
class Ftrl(Optimizer):
    """FTRL-proximal with MXNet's argument names and defaults.

    Args:
        learning_rate: α > 0 of the per-coordinate rate ``α / (β + sqrt(n))`` (default 0.1).
        lamda1: L1 regularisation λ1 >= 0 (MXNet's spelling of "lambda1").
        beta: β >= 0 of the per-coordinate rate.
        **kwargs: see :class:`~mxlite.optimizer.Optimizer` (``wd`` is the L2 strength).

    Raises:
        ValueError: ``learning_rate <= 0``, negative ``lamda1`` or ``beta`` (names the argument
            and the value).
    """

    def __init__(self, learning_rate: float = 0.1, lamda1: float = 0.01, beta: float = 1.0,
                 **kwargs: Any) -> None:
        if learning_rate is not None:
            _check_real("learning_rate", learning_rate, low=0, low_inclusive=False,
                        why=" for Ftrl (the rule divides by it)")
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, value in (("lamda1", lamda1), ("beta", beta)):
            _check_real(name, value, low=0)
        self.lamda1, self.beta = lamda1, beta

    def create_state(self, index: int, weight: Any) -> Any:
        xp = _xp(weight)
        return (xp.zeros_like(weight), xp.zeros_like(weight))  # (z, n)

    def _positive_lr(self, index: int) -> float:
        """The learning rate of ``index``; ValueError when it is not > 0 (the rule divides by it)."""
        lr = self._get_lr(index)
        if lr <= 0:
            raise ValueError(f"Ftrl divides by the learning rate, but parameter {index} has lr {lr} "
                             f"(lr_mult 0 or a schedule reaching 0?); use a positive rate or leave it out")
        return lr

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._positive_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, 0.0)           # g = clip(rescale·g)  (wd is in the denominator)
        z, n = state
        sigma = (xp.sqrt(n + g * g) - xp.sqrt(n)) / lr            # σ = (√(n + g²) − √n)/lr
        z += g - sigma * weight                                   # z = z + g − σ·w
        n += g * g                                                # n = n + g²
        shrunk = xp.sign(z) * xp.maximum(xp.abs(z) - self.lamda1, 0)  # sign(z)·max(|z| − λ1, 0)
        weight[...] = -shrunk / ((self.beta + xp.sqrt(n)) / lr + wd)  # w = −shrunk/((β + √n)/lr + wd)


# -- the fused update (ftrl_update in kernels/optimizers.cu) --------------------
def _ftrl_row(opt: Ftrl, index: Any, count: int) -> Row:
    return (opt._positive_lr(index), opt._get_wd(index))


def _ftrl_params(opt: Any, index: Any, count: int) -> tuple | None:
    values = (opt._positive_lr(index), opt._get_wd(index), opt.lamda1, opt.beta)
    return values if grad_ok(opt) and plain(*values) and values[3] >= 0 else None


def _ftrl_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, lamda1, beta = p
    z, n = state
    G = chunk_grad(opt, g, w, 0.0, bufs)                                      # g = clip(rescale*g)
    g2, sig, root = bufs[1], bufs[2], bufs[3]
    np.multiply(G, G, out=g2)                                            # g^2 (step computes it twice: once here)
    np.sqrt(n, out=sig)                                                  # sqrt(n), old n
    n += g2                                                              # n = n + g^2
    np.sqrt(n, out=root)                                                 # sqrt(n + g^2) = sqrt(new n), kept
    np.subtract(root, sig, out=sig)                                      # sigma = (sqrt(n + g^2) - sqrt(n))/lr
    sig /= F32(lr)
    sig *= w                                                             # z = z + (g - sigma*w)
    np.subtract(G, sig, out=sig)
    z += sig
    np.abs(z, out=sig)                                                   # shrunk = sign(z)*max(|z| - l1, 0)
    sig -= F32(lamda1)
    np.maximum(sig, zeros_f32(sig.size), out=sig)                           #   (a zero array: 3x a scalar 0's speed)
    np.sign(z, out=g2)
    g2 *= sig
    # w = -shrunk/((beta + sqrt(n))/lr + wd), as shrunk/(((-beta) - sqrt(n))/lr - wd): negating an
    # operand negates a sum, quotient or difference exactly (beta >= 0, sqrt(n) >= 0: no 0 sign flips)
    np.subtract(F32(-beta), root, out=root)                               # -(beta + sqrt(n))
    root /= F32(lr)                                                       # -((beta + sqrt(n))/lr)
    root -= F32(wd)                                                       # -((beta + sqrt(n))/lr + wd)
    np.divide(g2, root, out=w)


register_fused(Ftrl, FusedRule(lambda o: ("z", "n"), _ftrl_row,
                               one_kernel("ftrl_update", ("z", "n"), lambda o: (o.lamda1, o.beta)),
                               kernels=("ftrl_update",), chunk_twin=ChunkTwin(_ftrl_params, _ftrl_chunk, 4)))
