"""LANS (Zheng et al. 2020, "Accelerated Large Batch Optimization of BERT Pretraining in 54
minutes"), MXNet 2.x form::

    ĝ    = rescale_grad · g / ‖rescale_grad · g‖, then clip(ĝ, ±clip_gradient)
    m    = β1·m + (1 − β1)·ĝ
    v    = β2·v + (1 − β2)·ĝ²
    r1   = min(max(‖w‖, lower_bound), upper_bound)              (each bound only when given)
    u_m  = m / (1 − β1^t) / (sqrt(v / (1 − β2^t)) + ε) + wd·w
    u_g  = ĝ + wd·w
    r_m  = r1 / ‖u_m‖,  r_g = r1 / ‖u_g‖                        (1 where the ratio is 0 or NaN)
    w    = w − β1·lr·r_m·u_m − (1 − β1)·lr·r_g·u_g

Symbols: ``t`` this parameter's update count, β1/β2 = ``beta1``/``beta2``, ε = ``epsilon``,
‖·‖ the L2 norm of the whole tensor, ``lr`` and ``wd`` with their multipliers. States: ``(m, v)``.

The second direction ``u_g`` is the normalised gradient itself (not divided by the root), as in
MXNet's ``step``.

Where mxlite differs: a zero gradient (‖g‖ = 0) is left at 0 instead of becoming NaN from
0/0 as in MXNet. ``aggregate_num`` is accepted and ignored.

No fused kernel: :meth:`LANS.step` (NumPy/CuPy) is the implementation; the norms stay on the
device (0-d arrays).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .adam import _check_betas_epsilon, _zero_moments
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["LANS"]


@register
class LANS(Optimizer):
    """LANS with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: moment decay rates in [0, 1).
        epsilon: > 0 (default 1e-6).
        lower_bound, upper_bound: clamp ‖w‖ in the trust ratios (None: no bound); >= 0.
        **kwargs: the :class:`Optimizer` arguments (``aggregate_num`` accepted).

    Raises:
        ValueError: a β outside [0, 1), ε <= 0, a negative bound, or lower > upper.
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-6, lower_bound: float | None = None, upper_bound: float | None = None,
                 aggregate_num: int = 4, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, aggregate_num=aggregate_num, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        _check_real("lower_bound", lower_bound, low=0, none_ok=True)
        _check_real("upper_bound", upper_bound, low=0, none_ok=True)
        if lower_bound is not None and upper_bound is not None and lower_bound > upper_bound:
            raise ValueError(f"lower_bound must be <= upper_bound ({upper_bound}), got {lower_bound}")
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def _create_state(self, index: Any, weight: Any) -> Any:
        return _zero_moments(weight)

    @staticmethod
    def _ratio(xp: Any, r1: Any, r2: Any) -> Any:
        """r1/r2, or 1 where that is 0, inf or NaN (MXNet's ``where(1 − r/r, 1, r)``)."""
        with _quiet(xp):
            ratio = r1 / r2
        return xp.where(xp.isfinite(ratio) & (ratio != 0), ratio, 1.0)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = grad * self.rescale_grad
        norm = xp.linalg.norm(g)
        g = g / xp.where(norm > 0, norm, 1.0)                  # ĝ = g/‖g‖ (0 stays 0)
        if self.clip_gradient is not None:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        m, v = state
        m *= self.beta1                                        # m = β1·m + (1−β1)·ĝ
        m += (1.0 - self.beta1) * g
        v *= self.beta2                                        # v = β2·v + (1−β2)·ĝ²
        v += (1.0 - self.beta2) * g * g
        r1 = xp.linalg.norm(weight)
        if self.lower_bound is not None:
            r1 = xp.maximum(r1, self.lower_bound)
        if self.upper_bound is not None:
            r1 = xp.minimum(r1, self.upper_bound)
        denom = xp.sqrt(v / (1.0 - self.beta2**count)) + self.epsilon
        u_m = m / (1.0 - self.beta1**count) / denom            # u_m = m̂/(√v̂ + ε) + wd·w
        u_g = g                                                # u_g = ĝ + wd·w
        if wd:                                                 #   (wd = 0: no wd·w term at all)
            u_m = u_m + wd * weight
            u_g = g + wd * weight
        lr_m = lr * self._ratio(xp, r1, xp.linalg.norm(u_m))
        lr_g = lr * self._ratio(xp, r1, xp.linalg.norm(u_g))
        weight -= (self.beta1 * lr_m) * u_m                    # w −= β1·lr·r_m·u_m
        weight -= ((1.0 - self.beta1) * lr_g) * u_g            # w −= (1−β1)·lr·r_g·u_g


class _quiet:
    """Silence NumPy's divide/invalid warnings for a ratio whose 0/0 is handled after."""

    def __init__(self, xp: Any) -> None:
        self._ctx = np.errstate(divide="ignore", invalid="ignore") if xp is np else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
