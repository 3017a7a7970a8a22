"""Adam (MXNet 2.x form: bias correction folded into the learning rate, ε outside the root).

    G     = clip(rescale_grad · g, ±clip_gradient) + wd · w
    m     = β1·m + (1 − β1)·G
    v     = β2·v + (1 − β2)·G²
    lr_t  = lr · sqrt(1 − β2^t) / (1 − β1^t)
    w     = w − lr_t · m / (sqrt(v) + ε)

Symbols: ``g`` the raw gradient, ``w`` the weight, ``t`` this parameter's update count
(1 at the first update, ``begin_num_update + 1`` in general), ``lr`` = the scheduler's (or
``learning_rate``) value times ``lr_mult``, ``wd`` = ``wd · wd_mult``, ``β1``/``β2`` =
``beta1``/``beta2``, ``ε`` = ``epsilon``.

Where mxlite differs: nowhere from MXNet. From the paper and PyTorch: ε is added to the
root of the *uncorrected* ``v`` (the correction sits in ``lr_t``), and weight decay is L2
added to the gradient (see :class:`~mxlite.optimizer.AdamW` for decoupled decay).

Lazy update: with ``lazy_update=True`` and a row-sparse gradient, only the gradient's rows
of ``w``, ``m`` and ``v`` are updated (MXNet's ``adam_update`` on a row_sparse gradient).

This file holds the rule three ways: :meth:`Adam.step` (one tensor), the kernel ``adam_update<T>`` of
``kernels/optimizers.cu`` that the Trainer runs over a flat arena (registered at the bottom with the
fused engine, :mod:`mxlite.optimizer._fused`), and :func:`adam_twin`, that kernel's hand-tuned NumPy twin.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._fused import (
    ArenaPlan,
    FusedRule,
    Row,
    betas_eps,
    chunk_views,
    effective_grad,
    one_kernel,
    one_minus,
    register_fused,
    scratch,
    weights32,
)
from .optimizer import Optimizer, _check_real, _xp, register


def _zero_moments(weight: Any) -> tuple[Any, Any]:
    """Adam-family state: first and second moments ``(m, v)``, zeros shaped like ``weight``."""
    xp = _xp(weight)
    return xp.zeros_like(weight), xp.zeros_like(weight)


def _check_betas_epsilon(beta1: float, beta2: float, epsilon: float) -> None:
    """β in [0, 1), ε > 0 (each error names the argument).

    Shared by the Adam family: Adam, AdamW, AdaBelief, Nadam, LAMB, LANS and FTML.
    """
    for name, beta in (("beta1", beta1), ("beta2", beta2)):
        _check_real(name, beta, low=0, high=1)
    _check_real("epsilon", epsilon, low=0, low_inclusive=False)


@register
class Adam(Optimizer):
    """Adam as in MXNet: ε is added to ``sqrt(v)`` of the *uncorrected* second moment.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0, added outside the square root.
        lazy_update: update only the rows of a row-sparse gradient.
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: a β outside [0, 1) or ε <= 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, lazy_update: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update = bool(lazy_update)

    def _create_state(self, index: Any, weight: Any) -> Any:
        return _zero_moments(weight)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        lr_t = lr * math.sqrt(1.0 - self.beta2**count) / (1.0 - self.beta1**count)  # lr_t = lr·√(1−β2^t)/(1−β1^t)
        g = self._effective_grad(xp, grad, weight, wd)        # G = clip(rescale·g) + wd·w
        m, v = state
        m *= self.beta1                                       # m = β1·m + (1−β1)·G
        m += (1.0 - self.beta1) * g
        v *= self.beta2                                       # v = β2·v + (1−β2)·G²
        v += (1.0 - self.beta2) * g * g
        weight -= lr_t * m / (xp.sqrt(v) + self.epsilon)      # w −= lr_t·m/(√v + ε)


# -- the fused update (adam_update in kernels/optimizers.cu) --------------------
def _adam_row(opt: Adam, index: Any, count: int) -> Row:
    lr_t = opt._get_lr(index) * math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)
    return (lr_t, opt._get_wd(index))


def adam_twin(plan: ArenaPlan, weight: Any, grad: Any, mean: Any, var: Any, master: Any, hp: np.ndarray,
              beta1: float, beta2: float, epsilon: float, rescale: float, clip: float | None) -> None:
    """Twin of ``adam_update``: ``m = b1*m + (1-b1)*G``; ``v = b2*v + (1-b2)*G^2``;
    ``w -= lr_t * m / (sqrt(v) + eps)`` with ``hp[s]`` = (lr_t, wd, ...), ``lr_t`` carrying the
    bias correction.
    """
    f = np.float32
    G_buf, tmp_buf, w_buf = scratch(plan, 3)
    for s, w_store, m, v, w32, g in chunk_views(plan, (weight, mean, var, master), grad):
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = weights32(w_store, w32, w_buf[:n])
        G = effective_grad(g, w, hp[s, 1], rescale, clip, G, tmp)       # G = clip(rescale*g) + wd*w
        m *= f(beta1)                                                    # m = b1*m + (1-b1)*G
        np.multiply(G, one_minus(beta1), out=tmp)
        m += tmp
        v *= f(beta2)                                                    # v = b2*v + (1-b2)*G^2
        np.multiply(G, one_minus(beta2), out=tmp)                        #   ((1-b2)*G)*G, the kernel's order
        tmp *= G
        v += tmp
        step = G_buf[:n]                                                 # G is no longer read
        np.multiply(m, f(hp[s, 0]), out=step)                            # w -= (lr_t*m)/(sqrt(v)+eps)
        np.sqrt(v, out=tmp)
        tmp += f(epsilon)
        step /= tmp
        w -= step
        if w is not w_store:
            w_store[...] = w


def _plan_twin(opt: Adam, plan, weight, grad, st, master, hp) -> None:
    adam_twin(plan, weight, grad, st["mean"], st["var"], master, hp, opt.beta1, opt.beta2, opt.epsilon,
                     opt.rescale_grad, opt.clip_gradient)


register_fused(Adam, FusedRule(lambda o: ("mean", "var"), _adam_row,
                               one_kernel("adam_update", ("mean", "var"), betas_eps), kernels=("adam_update",),
                               twin=_plan_twin))
