"""AdaGrad (Duchi, Hazan & Singer 2011), MXNet form::

    G = clip(rescale_grad * g, ±clip_gradient) + wd * w
    h = h + G²
    w = w − lr · G / (sqrt(h) + ε)

Symbols: h = the state (sum of squared gradients, shaped and typed like the weight),
ε = ``epsilon``, lr = ``learning_rate`` · lr_mult, wd = ``wd`` · wd_mult.

Where mxlite differs:

* Weight decay is folded into G *before* it is accumulated in h, as in MXNet master's dense
  path (``step``). MXNet's fused kernel serves only row-sparse gradients, where it puts ε
  inside the root (``sqrt(h + ε)``) and refuses ``wd != 0``; mxlite densifies row-sparse
  gradients, so the dense formula above always applies.
* PyTorch's Adagrad also adds ε outside the root but has ``lr_decay`` and
  ``initial_accumulator_value``; TensorFlow starts h at 0.1. mxlite starts h at 0 (MXNet).
* MXNet's deprecated ``eps`` alias is not accepted (MXNet raises for it too).
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

No fused kernel in ``kernels/`` yet: this NumPy/CuPy twin is the only implementation.

Kernel: ``adagrad_update<T>`` in ``kernels/optimizers.cu``, fused over an arena by the Trainer;
the ``step`` below is the NumPy twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fused import (
    ChunkTwin,
    FusedRule,
    chunk_grad,
    descend_by_root,
    lr_wd_params,
    lr_wd_row,
    one_kernel,
    register_fused,
)
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["AdaGrad"]


@register
class AdaGrad(Optimizer):
    """AdaGrad with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.01).
        epsilon: ε > 0, added to ``sqrt(h)`` (outside the root).
        **kwargs: see :class:`~mxlite.optimizer.Optimizer`.

    Raises:
        ValueError: ``epsilon <= 0`` (the message names the argument and the value).
    """

    def __init__(self, learning_rate: float = 0.01, epsilon: float = 1e-6, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_real("epsilon", epsilon, low=0, low_inclusive=False)
        self.epsilon = epsilon

    def create_state(self, index: int, weight: Any) -> Any:
        return _xp(weight).zeros_like(weight)  # h

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        history = state
        history += g * g                                       # h = h + G²
        weight -= lr * g / (xp.sqrt(history) + self.epsilon)   # w −= lr·G/(√h + ε)


# -- the fused update (adagrad_update in kernels/optimizers.cu) --------------------
def _adagrad_params(opt: Any, index: Any, count: int) -> tuple | None:
    return lr_wd_params(opt, index, opt.epsilon)


def _adagrad_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, h: np.ndarray,
                   bufs: Sequence[np.ndarray]) -> None:
    lr, wd, eps = p
    G = chunk_grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, step = bufs[1], bufs[2]
    np.multiply(G, G, out=tmp)                                           # h = h + G^2
    h += tmp
    descend_by_root(w, G, h, lr, eps, tmp, step)                        # w -= (lr*G)/(sqrt(h) + eps)


register_fused(AdaGrad, FusedRule(lambda o: ("history",), lr_wd_row,
                                  one_kernel("adagrad_update", ("history",), lambda o: (o.epsilon,)),
                                  kernels=("adagrad_update",),
                                  chunk_twin=ChunkTwin(_adagrad_params, _adagrad_chunk, 3)))
