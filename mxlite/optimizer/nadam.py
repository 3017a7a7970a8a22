"""Nadam (Dozat 2016, "Incorporating Nesterov Momentum into Adam"), MXNet 2.x form::

    G      = clip(rescale_grad · g, ±clip_gradient) + wd · w
    μ_t    = β1 · (1 − 0.5 · 0.96^(t · schedule_decay))
    μ_t+1  = β1 · (1 − 0.5 · 0.96^((t + 1) · schedule_decay))
    S_t    = μ_1 · μ_2 · ... · μ_t                       (the momentum schedule; S_0 = 1)
    m      = β1·m + (1 − β1)·G
    v      = β2·v + (1 − β2)·G²
    Ĝ      = G / (1 − S_t)
    m̂      = m / (1 − S_t · μ_t+1)
    v̂      = v / (1 − β2^t)
    m̄      = μ_t · m̂ + (1 − μ_t) · Ĝ
    w      = w − lr · m̄ / (sqrt(v̂) + ε)

Symbols: ``t`` this parameter's update count, β1/β2 = ``beta1``/``beta2``, ε = ``epsilon``,
``lr`` and ``wd`` with their multipliers. States: ``(m, v)``.

Where mxlite differs: MXNet keeps one schedule product ``S`` on the optimizer and multiplies
it once per parameter update, so with several parameters it decays as many times faster
(and depends on the parameter order); here each parameter has its own ``S_t``, which is
MXNet's value for a model with one parameter. ``S_t`` is recomputed from ``t`` after a
restore, so saved states continue bit-identically.

Evaluation order: the schedule enters the weight update through two per-parameter scalars the
host computes in float64 (:meth:`Nadam._coefficients`), ``a = lr·μ_t/(1 − S_t·μ_t+1)`` and
``b = lr·(1 − μ_t)/(1 − S_t)``, so that ``w −= (a·m + b·G)/(sqrt(v/(1 − β2^t)) + ε)`` — the same
value as the equations above up to float rounding, with four per-parameter numbers instead of seven.

Fused: ``nadam_update`` in ``kernels/optimizers.cu`` (float32, float16 and bfloat16 weights) runs
this update over a whole arena in one launch on GPUs and, built for the host, on CPU devices, reading
``(a, wd, b, 1 − β2^t)`` per parameter (its registration below); :meth:`Nadam.step` is its
NumPy twin, operation by operation (the CPU update with ``MXLITE_CPU_KERNELS=numpy``), and the
per-parameter path everywhere else (float64, subclasses).
"""

from __future__ import annotations

from typing import Any

from ._fused import FusedRule, Row, betas_eps, one_kernel, register_fused
from .adam import _check_betas_epsilon, _zero_moments
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["Nadam"]


@register
class Nadam(Optimizer):
    """Nadam with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0, added outside the square root.
        schedule_decay: >= 0, the decay of the momentum warm-up schedule (default 0.004).
        **kwargs: the :class:`Optimizer` arguments.

    Raises:
        ValueError: a β outside [0, 1), ε <= 0 or schedule_decay < 0 (names the argument).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, schedule_decay: float = 0.004, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        _check_real("schedule_decay", schedule_decay, low=0)
        self.beta1, self.beta2, self.epsilon, self.schedule_decay = beta1, beta2, epsilon, schedule_decay
        self._schedule: dict[Any, tuple[int, float]] = {}

    def _create_state(self, index: Any, weight: Any) -> Any:
        return _zero_moments(weight)

    def _mu(self, t: int) -> float:
        return self.beta1 * (1.0 - 0.5 * 0.96 ** (t * self.schedule_decay))

    def _m_schedule(self, index: Any, t: int) -> float:
        """S_t, the cached value when asked again for the same t (the fused update's table row and
        then its twin, chunk by chunk), from the cached S_(t−1), or recomputed from 1 in the same order."""
        last_t, last = self._schedule.get(index, (0, 1.0))
        if last_t == t:
            return last
        if last_t == t - 1:
            value = last * self._mu(t)
        else:
            value = 1.0
            for i in range(1, t + 1):
                value = value * self._mu(i)
        self._schedule[index] = (t, value)
        return value

    def _coefficients(self, index: Any, count: int) -> tuple[float, float, float]:
        """``(a, b, c2)`` of update ``count`` of parameter ``index``, in float64 (see the module docstring).

        ``a = lr·μ_t/(1 − S_t·μ_t+1)``, ``b = lr·(1 − μ_t)/(1 − S_t)``, ``c2 = 1 − β2^t``: the values
        ``step`` and the fused kernel's table row (registered with ``_fused.py``) both use; advances the
        parameter's cached schedule ``S_t`` (idempotent for a repeated ``count``).
        """
        lr = self._get_lr(index)
        mu_t, mu_next = self._mu(count), self._mu(count + 1)
        s_t = self._m_schedule(index, count)                   # S_t = S_(t−1)·μ_t
        a = lr * mu_t / (1.0 - s_t * mu_next)                  # lr·μ_t/(1 − S_t·μ_t+1)
        b = lr * (1.0 - mu_t) / (1.0 - s_t)                    # lr·(1 − μ_t)/(1 − S_t)
        return a, b, 1.0 - self.beta2**count

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        wd = self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        a, b, c2 = self._coefficients(index, count)
        m, v = state
        m *= self.beta1                                        # m = β1·m + (1−β1)·G
        m += (1.0 - self.beta1) * g
        v *= self.beta2                                        # v = β2·v + (1−β2)·G²
        v += (1.0 - self.beta2) * g * g
        # w −= lr·m̄/(√v̂ + ε) with lr·m̄ = a·m + b·G and v̂ = v/(1 − β2^t): nadam_update's order
        weight -= (a * m + b * g) / (xp.sqrt(v / c2) + self.epsilon)


# -- the fused update (nadam_update in kernels/optimizers.cu) --------------------
def _nadam_row(opt: Nadam, index: Any, count: int) -> Row:
    """``(a, wd, b, 1 - beta2^t)``: the per-parameter momentum schedule folded in (:meth:`Nadam._coefficients`)."""
    a, b, c2 = opt._coefficients(index, count)
    return (a, opt._get_wd(index), b, c2)


# elementwise: its schedule S_t is cached per (parameter, count), so step runs chunk by chunk
register_fused(Nadam, FusedRule(lambda o: ("mean", "var"), _nadam_row,
                                one_kernel("nadam_update", ("mean", "var"), betas_eps), kernels=("nadam_update",)))
