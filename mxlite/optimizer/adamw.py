"""AdamW: Adam with decoupled weight decay, in MXNet master's form (``mx.optimizer.AdamW``).

    G  = clip(rescale_grad · g, ±clip_gradient)          (no wd · w: the decay is decoupled)
    m  = β1·m + (1 − β1)·G
    v  = β2·v + (1 − β2)·G²
    η  = lr · sqrt(1 − β2^t) / (1 − β1^t)     (correct_bias=True)
    η  = lr                                   (correct_bias=False)
    w  = w − η · (m / (sqrt(v) + ε) + wd · w)            (w on the right: before this step;
                                                          wd = 0: the term is absent, not 0·w)

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
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fused import F32, ChunkTwin, FusedRule, Row, betas_eps, chunk_grad, grad_ok, one_kernel, plain, register_fused
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
        d = m / (xp.sqrt(v) + self.epsilon)                   # w −= η·(m/(√v+ε) + wd·w)
        if wd:                                                #   (wd = 0: no wd·w term at all)
            d += wd * weight
        weight -= eta * d


# -- the fused update (adamw_update in kernels/optimizers.cu) --------------------
def _adamw_row(opt: AdamW, index: Any, count: int) -> Row:
    eta = opt._get_lr(index)
    if opt.correct_bias:
        eta *= math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)
    return (eta, opt._get_wd(index))


def _adamw_params(opt: Any, index: Any, count: int) -> tuple | None:
    eta = opt._get_lr(index)
    if opt.correct_bias:
        eta *= math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)  # as AdamW.step
    values = (eta, opt._get_wd(index), opt.beta1, opt.beta2, opt.epsilon)
    return values if grad_ok(opt) and plain(*values) else None


def _adamw_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any, bufs: Sequence[np.ndarray]) -> None:
    eta, wd, b1, b2, eps = p
    m, v = state
    G = chunk_grad(opt, g, w, 0.0, bufs)                                      # G = clip(rescale*g)
    tmp, step = bufs[1], bufs[2]
    m *= F32(b1)                                                          # m = b1*m + (1-b1)*G
    np.multiply(G, F32(1.0 - b1), out=tmp)
    m += tmp
    v *= F32(b2)                                                          # v = b2*v + ((1-b2)*G)*G
    np.multiply(G, F32(1.0 - b2), out=tmp)
    tmp *= G
    v += tmp
    np.sqrt(v, out=tmp)                                                  # w -= eta*(m/(sqrt(v) + eps) + wd*w)
    tmp += F32(eps)
    np.divide(m, tmp, out=step)
    if wd:                                                               #   (wd = 0: no wd*w term, as step)
        np.multiply(w, F32(wd), out=tmp)
        step += tmp
    step *= F32(eta)
    w -= step


register_fused(AdamW, FusedRule(lambda o: ("mean", "var"), _adamw_row,
                                one_kernel("adamw_update", ("mean", "var"), betas_eps), kernels=("adamw_update",),
                                chunk_twin=ChunkTwin(_adamw_params, _adamw_chunk, 3)))
