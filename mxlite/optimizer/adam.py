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

Kernel: ``adam_update<T>`` in ``kernels/optimizers.cu``, driven over a flat arena by the
Trainer (``_fused_rules.py``); :func:`mxlite.optimizer._fused.adam_twin` is its NumPy twin,
and :meth:`Adam.step` below the same rule for one tensor.
"""

from __future__ import annotations

import math
from typing import Any

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
