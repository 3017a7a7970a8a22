"""SGD with momentum: MXNet's form, or Apache SINGA's when dampening or Nesterov is asked for.

MXNet form (``dampening == 0`` and ``nesterov=False``; ``mx.optimizer.SGD``, ``sgd_mom_update``)::

    G   = clip(rescale_grad · g, ±clip_gradient) + wd · w
    mom = μ · mom − lr · G              (μ > 0; the state is a velocity that includes lr)
    w   = w + mom                       (μ = 0: no state, w = w − lr · G)

SINGA form (``dampening > 0`` or ``nesterov=True``; ``singa.opt.SGD.apply``)::

    G   = clip(rescale_grad · g, ±clip_gradient) + wd · w
    buf = μ · buf + (1 − dampening) · G           (buf starts at 0 and excludes lr)
    D   = G + μ · buf   if nesterov,   else   D = buf
    w   = w − lr · D                  (μ = 0: no state, w = w − lr · G, dampening unused)

Symbols: ``g`` the raw gradient, ``w`` the weight, ``μ`` = ``momentum``, ``lr`` = the
scheduler's (or ``learning_rate``) value times the parameter's ``lr_mult``, ``wd`` =
``wd · wd_mult``, ``dampening`` and ``nesterov`` as given.

Where mxlite differs:

* From MXNet: ``dampening`` and ``nesterov`` do not exist there; ``lazy_update`` may be
  combined with ``multi_precision`` (MXNet asserts it may not); a momentum outside [0, 1)
  raises ``ValueError`` (MXNet accepts any value).
* From SINGA: SINGA has no ``rescale_grad``/``clip_gradient``; mxlite applies them before
  adding ``wd · w``, as MXNet does. SINGA does not reject a dampening outside [0, 1].
* From PyTorch: PyTorch starts ``buf`` at ``G`` (undamped) on the first step; SINGA and
  mxlite start it at 0, so the first step moves by ``lr · (1 − dampening) · G`` (plus
  ``lr · G`` for Nesterov).
* MXNet vs SINGA form: with a constant ``lr`` and ``dampening = 0`` the two give the same
  weights (``mom = −lr · buf``); under a changing ``lr`` MXNet's velocity keeps the old
  rates while SINGA's buffer is rescaled by the new one.

Lazy update: with ``lazy_update=True`` and a row-sparse gradient
(:class:`~mxlite.ops.sparse.RowSparseTensor`), only the gradient's rows of ``w`` and of the
state are read and written (weight decay too applies to those rows only), as MXNet's
``sgd_mom_update`` on a row_sparse gradient; otherwise the gradient is densified.

This file holds the rule three ways: :meth:`SGD.step` (one tensor; the only implementation of the
SINGA form), the kernel ``sgd_update<T>`` of ``kernels/optimizers.cu`` that the Trainer runs over a
flat arena (registered at the bottom with the fused engine, :mod:`mxlite.optimizer._fused`), and
:func:`sgd_twin`, that kernel's hand-tuned NumPy twin (scratch buffers instead of temporaries).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._fused import (
    ArenaPlan,
    FusedRule,
    chunk_views,
    effective_grad,
    lr_wd_row,
    momentum_state,
    one_kernel,
    register_fused,
    scratch,
    weights32,
)
from .optimizer import Optimizer, _check_momentum, _check_real, _xp, register


@register
class SGD(Optimizer):
    """Stochastic gradient descent with momentum (MXNet form; SINGA form for dampening/Nesterov).

    Args:
        learning_rate: step size (default 0.1, as MXNet 2.x).
        momentum: μ in [0, 1); 0 disables the state.
        lazy_update: update only the rows of a row-sparse gradient (see the module docstring).
        dampening: SINGA's dampening of the gradient entering the buffer, in [0, 1].
        nesterov: SINGA's Nesterov momentum; needs ``momentum > 0`` and ``dampening == 0``.
        **kwargs: the :class:`Optimizer` arguments (wd, clip_gradient, multi_precision, ...).

    Raises:
        ValueError: momentum outside [0, 1) (MXNet does not check it; at 1 or more the
            velocity never decays), dampening outside [0, 1], or nesterov with
            ``momentum == 0`` or ``dampening != 0`` (each shows the value received).
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.0, lazy_update: bool = False,
                 dampening: float = 0.0, nesterov: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_momentum(momentum)
        _check_real("dampening", dampening, low=0, high=1, high_inclusive=True)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"nesterov=True needs momentum > 0 and dampening == 0, got momentum={momentum}, "
                             f"dampening={dampening}")
        self.momentum = momentum
        self.lazy_update = bool(lazy_update)
        self.dampening = dampening
        self.nesterov = bool(nesterov)

    def _create_state(self, index: Any, weight: Any) -> Any:
        if self.momentum == 0.0:
            return None
        return _xp(weight).zeros_like(weight)  # mom (MXNet form) or buf (SINGA form)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)        # G = clip(rescale·g) + wd·w
        if state is None:
            weight -= lr * g                                  # w −= lr·G
        elif self.dampening == 0.0 and not self.nesterov:
            state *= self.momentum                            # mom = μ·mom − lr·G
            state -= lr * g
            weight += state                                   # w += mom
        else:
            state *= self.momentum                            # buf = μ·buf + (1 − dampening)·G
            state += (1.0 - self.dampening) * g
            d = g + self.momentum * state if self.nesterov else state  # D = G + μ·buf | buf
            weight -= lr * d                                  # w −= lr·D


# -- the fused update (sgd_update in kernels/optimizers.cu) --------------------
def sgd_twin(plan: ArenaPlan, weight: Any, grad: Any, mom: Any, master: Any, hp: np.ndarray, momentum: float,
             rescale: float, clip: float | None) -> None:
    """Twin of ``sgd_update``: ``G = clip(rescale*g) + wd*w``; ``mom = mu*mom - lr*G``; ``w += mom``
    (``w -= lr*G`` when ``mom`` is None). ``hp[s]`` = (lr, wd, ...) of segment ``s``; ``master``
    (float32, or None) holds master weights for half-precision ``weight``.
    """
    G_buf, tmp_buf, w_buf = scratch(plan, 3)
    for s, w_store, m, w32, g in chunk_views(plan, (weight, mom, master), grad):
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = weights32(w_store, w32, w_buf[:n])
        G = effective_grad(g, w, hp[s, 1], rescale, clip, G, tmp)       # G = clip(rescale*g) + wd*w
        np.multiply(G, np.float32(hp[s, 0]), out=tmp)                    # lr*G
        if m is not None:
            m *= np.float32(momentum)                                    # mom = mu*mom - lr*G
            m -= tmp
            w += m                                                       # w += mom
        else:
            w -= tmp                                                     # w -= lr*G
        if w is not w_store:
            w_store[...] = w


def _plan_twin(opt: SGD, plan, weight, grad, st, master, hp) -> None:
    sgd_twin(plan, weight, grad, st.get("mom"), master, hp, opt.momentum, opt.rescale_grad, opt.clip_gradient)


register_fused(SGD, FusedRule(momentum_state, lr_wd_row,
                              one_kernel("sgd_update", ("mom",), lambda o: (o.momentum, 0.0)),
                              kernels=("sgd_update",), twin=_plan_twin,
                              eligible=lambda o: not o.nesterov and not o.dampening))  # SINGA forms: per parameter
