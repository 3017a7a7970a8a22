"""AdamW: Adam with decoupled weight decay, in MXNet master's form (``mx.optimizer.AdamW``).

    G  = clip(rescale_grad · g, ±clip_gradient)          (no wd · w: the decay is decoupled)
    m  = β1·m + (1 − β1)·G
    v  = β2·v + (1 − β2)·G²
    η  = lr · sqrt(1 − β2^t) / (1 − β1^t)     (correct_bias=True)
    η  = lr                                   (correct_bias=False)
    w  = w − η · (m / (sqrt(v) + ε) + wd · w)            (w on the right: before this step)

Symbols: ``g`` the raw gradient, ``w`` the weight, ``t`` this parameter's update count,
``lr`` = the scheduler's (or ``learning_rate``) value times ``lr_mult``, ``wd`` =
``wd · wd_mult``, ``β1``/``β2`` = ``beta1``/``beta2``, ``ε`` = ``epsilon``, ``η`` the step
that MXNet passes to its ``adamw_update`` kernel as ``eta`` (with that kernel's ``lr`` = 1).

Where mxlite differs:

* From MXNet: mxlite follows the fused kernel (MXNet's default ``use_fused_step=True``). MXNet's
  unfused ``step`` applies the decay after the Adam step, to the already-updated weight
  (``w −= η·m/(√v+ε)``, then ``w −= η·wd·w``), which differs at order ``η²``. MXNet does not
  validate β and ε; mxlite raises ValueError as :class:`~mxlite.optimizer.Adam` does.
* From PyTorch/the paper: the decay is scaled by ``η``, which carries the bias correction,
  not by the plain ``lr``; ε is added to the root of the uncorrected ``v``.

Kernel: ``adamw_update<T>`` in ``kernels/optimizers.cu`` (fused over an arena by the Trainer);
:meth:`AdamW.step` below is its NumPy twin.
"""

from __future__ import annotations

import math
from typing import Any

from .adam import _check_betas_epsilon, _zero_moments
from .optimizer import Optimizer, _xp, register


@register
class AdamW(Optimizer):
    """Adam with decoupled weight decay (MXNet master's AdamW).

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0, added outside the square root (default 1e-6, as MXNet).
        correct_bias: fold Adam's bias correction into the step (default True; False as in
            BERT's TensorFlow code).
        **kwargs: the :class:`Optimizer` arguments (``wd`` is the decoupled decay rate).

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

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        eta = lr
        if self.correct_bias:
            eta *= math.sqrt(1.0 - self.beta2**count) / (1.0 - self.beta1**count)  # η = lr·√(1−β2^t)/(1−β1^t)
        g = self._effective_grad(xp, grad, weight, 0.0)       # G = clip(rescale·g)
        m, v = state
        m *= self.beta1                                       # m = β1·m + (1−β1)·G
        m += (1.0 - self.beta1) * g
        v *= self.beta2                                       # v = β2·v + (1−β2)·G²
        v += (1.0 - self.beta2) * g * g
        weight -= eta * (m / (xp.sqrt(v) + self.epsilon) + wd * weight)  # w −= η·(m/(√v+ε) + wd·w)
