"""NAG: Nesterov accelerated gradient in MXNet's form (``mx.optimizer.NAG``, ``nag_mom_update``).

    G   = clip(rescale_grad · g, ±clip_gradient) + wd · w
    mom = μ · mom − lr · G
    w   = w + μ · mom − lr · G          (with the new mom)
    (μ = 0: no state, w = w − lr · G)

Symbols: ``g`` the raw gradient, ``w`` the weight, ``μ`` = ``momentum``, ``lr`` = the
scheduler's (or ``learning_rate``) value times ``lr_mult``, ``wd`` = ``wd · wd_mult``.

Where mxlite differs: MXNet's 1.x docstring writes the rule with ``lr`` outside the
momentum (``mom = μ·mom + G``, ``w −= lr·(G + μ·mom)``); MXNet's code (and mxlite) keep
``lr`` inside it, which is the same only while ``lr`` is constant. MXNet does not validate
``momentum``; mxlite rejects one outside [0, 1).

Kernel: ``sgd_update<T>`` in ``kernels/optimizers.cu`` with its ``nesterov`` flag set (SGD and NAG
differ by one line; fused over an arena by the Trainer, registered at the bottom); :meth:`NAG.step` below
is its NumPy twin, and ``_nag_chunk`` the same operations on one chunk into reused scratch buffers.
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
    lr_wd_params,
    lr_wd_row,
    momentum_state,
    one_kernel,
    register_fused,
)
from .optimizer import Optimizer, _check_momentum, _xp, register


@register
class NAG(Optimizer):
    """Nesterov accelerated gradient (MXNet form).

    Args:
        learning_rate: step size (default 0.1, as MXNet 2.x).
        momentum: μ in [0, 1) (default 0.9, as MXNet 2.x); 0 makes NAG plain SGD without state.
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: momentum outside [0, 1).
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.9, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_momentum(momentum)
        self.momentum = momentum

    def _create_state(self, index: Any, weight: Any) -> Any:
        if self.momentum == 0.0:
            return None
        return _xp(weight).zeros_like(weight)  # mom

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)        # G = clip(rescale·g) + wd·w
        if state is None:
            weight -= lr * g                                  # w −= lr·G
            return
        state *= self.momentum                                # mom = μ·mom − lr·G
        state -= lr * g
        weight += self.momentum * state - lr * g              # w += μ·mom − lr·G


# -- the fused update (sgd_update in kernels/optimizers.cu) --------------------
def _nag_params(opt: Any, index: Any, count: int) -> tuple | None:
    return lr_wd_params(opt, index, opt.momentum)


def _nag_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, mom: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, mu = p
    G = chunk_grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    step, tmp = bufs[2], bufs[1]
    np.multiply(G, F32(lr), out=step)                                     # lr*G
    if mom is None:
        w -= step                                                        # w -= lr*G
        return
    mom *= F32(mu)                                                        # mom = mu*mom - lr*G
    mom -= step
    np.multiply(mom, F32(mu), out=tmp)                                    # w += mu*mom - lr*G
    tmp -= step
    w += tmp


# One kernel with SGD: its flag (the last scalar) adds the Nesterov look-ahead.
register_fused(NAG, FusedRule(momentum_state, lr_wd_row,
                              one_kernel("sgd_update", ("mom",), lambda o: (o.momentum, 1.0)),
                              kernels=("sgd_update",), chunk_twin=ChunkTwin(_nag_params, _nag_chunk, 3)))
