"""RMSProp, plain (Tieleman & Hinton 2012) and centered (Graves 2013, eqs. 38-45), MXNet 2.x form.

Plain (``centered=False``)::

    G = clip(rescale_grad * g, ±clip_gradient) + wd * w
    n = ρ·n + (1 − ρ)·G²
    w = w − lr · G / (sqrt(n) + ε)

Centered (``centered=True``)::

    G = clip(rescale_grad * g, ±clip_gradient) + wd * w
    n = ρ·n + (1 − ρ)·G²
    ḡ = ρ·ḡ + (1 − ρ)·G
    Δ = μ·Δ − lr · G / sqrt(n − ḡ² + ε)
    w = w + Δ

then, in both forms, ``w = clip(w, ±clip_weights)`` when ``clip_weights`` is set.

Symbols: ρ = ``rho``, μ = ``momentum`` (centered form only), ε = ``epsilon``,
lr = ``learning_rate`` · lr_mult, wd = ``wd`` · wd_mult. States: ``n`` (plain) or
``(ḡ, n, Δ)`` (centered), each shaped and typed like the weight.

Where ε sits is MXNet 2.x's choice in both its Python ``step`` and its C++
``RMSPropUpdateKernel``/``RMSPropAlexUpdateKernel``: *outside* the square root in the plain
form, ``sqrt(n) + ε`` (as PyTorch), and *inside* it in the centered form,
``sqrt(n − ḡ² + ε)``. (MXNet 1.x's plain kernel used ``sqrt(n + ε)``; with ``n`` below ε its
step differs from 2.x's by up to ``sqrt(ε)/sqrt(n)`` times.)

Where mxlite differs:

* The gradient is clipped *before* ``wd·w`` is added (mxlite's shared convention, as in
  MXNet's Python ``step``); MXNet's fused kernels clip ``rescale_grad·g + wd·w`` as a whole.
* MXNet's deprecated ``gamma1``/``gamma2`` aliases are not accepted (MXNet raises for them too).
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

Kernel: ``rmsprop_update<T>`` in ``kernels/optimizers.cu``, fused over an arena by the Trainer;
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
    descend_by_root,
    lr_wd_params,
    lr_wd_row,
    one_kernel,
    one_minus,
    plain,
    register_fused,
)
from .optimizer import Optimizer, _check_momentum, _check_real, _xp, register

__all__ = ["RMSProp"]


@register
class RMSProp(Optimizer):
    """RMSProp (plain or centered) with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.001).
        rho: decay ρ of the moving averages of G² (and of G when centered), in [0, 1).
        momentum: heavy-ball μ of the centered form (ignored when ``centered=False``), in [0, 1).
        epsilon: ε > 0, added to ``sqrt(n)`` in the plain form and to the variance inside the
            square root in the centered form (MXNet 2.x).
        centered: use Graves's centered form (variance ``n − ḡ²`` and momentum).
        clip_weights: after the update clamp the weights to ``[-clip_weights, clip_weights]``;
            None turns it off.
        **kwargs: see :class:`~mxlite.optimizer.Optimizer`.

    Raises:
        ValueError: ``rho`` or ``momentum`` outside [0, 1), ``epsilon <= 0`` or
            ``clip_weights <= 0`` (the message names the argument and the value).
    """

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.9,
                 epsilon: float = 1e-8, centered: bool = False, clip_weights: float | None = None,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_real("rho", rho, low=0, high=1)
        _check_momentum(momentum)
        _check_real("epsilon", epsilon, low=0, low_inclusive=False)
        _check_real("clip_weights", clip_weights, low=0, low_inclusive=False, none_ok=True, why=" (no clipping)")
        self.rho, self.momentum, self.epsilon = rho, momentum, epsilon
        self.centered = bool(centered)
        self.clip_weights = clip_weights

    def create_state(self, index: int, weight: Any) -> Any:
        xp = _xp(weight)
        if self.centered:
            return (xp.zeros_like(weight), xp.zeros_like(weight), xp.zeros_like(weight))  # (ḡ, n, Δ)
        return xp.zeros_like(weight)                                                     # n

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        rho = self.rho
        g = self._effective_grad(xp, grad, weight, wd)             # G = clip(rescale·g) + wd·w
        if not self.centered:
            n = state
            n *= rho                                                # n = ρ·n + (1−ρ)·G²
            n += (1.0 - rho) * g * g
            weight -= lr * g / (xp.sqrt(n) + self.epsilon)          # w −= lr·G/(√n + ε)
        else:
            mean, n, delta = state
            n *= rho                                                # n = ρ·n + (1−ρ)·G²
            n += (1.0 - rho) * g * g
            mean *= rho                                             # ḡ = ρ·ḡ + (1−ρ)·G
            mean += (1.0 - rho) * g
            delta *= self.momentum                                  # Δ = μ·Δ − lr·G/√(n − ḡ² + ε)
            delta -= lr * g / xp.sqrt(n - mean * mean + self.epsilon)
            weight += delta                                         # w += Δ
        if self.clip_weights is not None:
            xp.clip(weight, -self.clip_weights, self.clip_weights, out=weight)  # w = clip(w, ±c_w)


# -- the fused update (rmsprop_update in kernels/optimizers.cu) --------------------
def _rmsprop_states(opt: RMSProp) -> tuple[str, ...]:
    return ("mean", "n", "delta") if opt.centered else ("n",)


def _rmsprop_params(opt: Any, index: Any, count: int) -> tuple | None:
    clip_w = opt.clip_weights
    if opt.centered or not (clip_w is None or plain(clip_w)):
        return None  # the centred form keeps the generic path
    values = lr_wd_params(opt, index, opt.rho, opt.epsilon)
    return None if values is None else (*values, clip_w)


def _rmsprop_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, n: np.ndarray,
                   bufs: Sequence[np.ndarray]) -> None:
    lr, wd, rho, eps, clip_w = p
    G = chunk_grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, step = bufs[1], bufs[2]
    decay_add_square(n, G, rho, tmp)                                    # n = rho*n + ((1-rho)*G)*G
    descend_by_root(w, G, n, lr, eps, tmp, step)                        # w -= (lr*G)/(sqrt(n) + eps)
    if clip_w is not None:
        np.clip(w, -F32(clip_w), F32(clip_w), out=w)                       # w = clip(w, +-c_w)


register_fused(RMSProp, FusedRule(
    _rmsprop_states, lr_wd_row,
    one_kernel("rmsprop_update", ("n", "mean", "delta"),
               lambda o: (o.rho, one_minus(o.rho), o.momentum, o.epsilon, o.clip_weights or 0.0)),
    kernels=("rmsprop_update",), chunk_twin=ChunkTwin(_rmsprop_params, _rmsprop_chunk, 3)))
