"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), MXNet form::

    g   = clip(rescale_grad * g, ±clip_gradient)           (no weight decay here)
    m   = β1·m + (1 − β1)·g
    v   = β2·v + (1 − β2)·g²
    m̂   = m / (1 − β1^t),  v̂ = v / (1 − β2^t)              (m̂ = m, v̂ = v without bias_correction)
    u   = m̂ / (sqrt(v̂) + ε) + wd·w
    r1  = min(max(‖w‖, lower_bound), upper_bound)           (each bound only when given)
    r2  = ‖u‖
    r   = r1 / r2 if r1 > 0 and r2 > 0 else 1
    w   = w − lr · r · u

Symbols: β1 = ``beta1``, β2 = ``beta2``, ε = ``epsilon``, t = this index's update count,
‖·‖ = the L2 norm of the whole tensor (one trust ratio per parameter), lr =
``learning_rate`` · lr_mult, wd = ``wd`` · wd_mult. States: ``(m, v)``.

Where mxlite differs:

* The states take the weight's dtype; MXNet allocates them in float32 always (float16
  weights get float32 states here through the base class's multi-precision copy).
* ``aggregate_num`` is accepted and ignored by the rule (MXNet uses it to batch up to 45
  tensors per fused launch, and asserts ``aggregate_num <= 45``).
* ``lower_bound``/``upper_bound`` must be None or >= 0, with lower <= upper; MXNet's
  Python path applies a negative bound as given (a negative ``upper_bound`` makes the
  ratio negative) while its kernel ignores it. MXNet's fused path also ignores a bound of 0,
  which has no effect in the formula above either.
* Weight decay is decoupled (added to the Adam direction u, not to g) as in MXNet, the
  paper and optax's ``lamb``; ε is outside the root of the *bias-corrected* v̂ (MXNet).
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

With ``wd = 0`` the ``wd·w`` term is absent (not ``0·w``: an infinite weight would give NaN).
The norms of a NumPy float32 weight are summed in the order of the serial kernel build
(:func:`mxlite.optimizer._fused.serial_norm`), so both CPU modes give the same bits; on CuPy they
stay on the device (0-d arrays), so a CuPy step does not synchronise.

Kernel: ``lamb_phase1<T>`` and ``lamb_phase2<T>``
(norms, then the update) in ``kernels/optimizers.cu``, fused over an arena by the
Trainer; the ``step`` below is the NumPy twin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._fused import (
    FusedRule,
    Launcher,
    Row,
    betas_eps,
    clip_arg,
    complete_sums,
    phases,
    register_fused,
    rescale_arg,
    serial_norm,
)
from .adam import _check_betas_epsilon
from .optimizer import Optimizer, _check_real, _xp, register

__all__ = ["LAMB"]


@register
class LAMB(Optimizer):
    """LAMB with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.001).
        beta1, beta2: decay rates of the first and second moments, in [0, 1).
        epsilon: ε > 0, added to ``sqrt(v̂)``.
        lower_bound, upper_bound: clamp ‖w‖ in the trust ratio (None: no bound); >= 0.
        bias_correction: divide m and v by ``1 − β^t``.
        **kwargs: see :class:`~mxlite.optimizer.Optimizer` (``aggregate_num`` defaults to 4,
            as in MXNet, and does not change the result).

    Raises:
        ValueError: a β outside [0, 1), ``epsilon <= 0``, a negative bound or
            ``lower_bound > upper_bound`` (the message names the arguments and values).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-6, lower_bound: float | None = None, upper_bound: float | None = None,
                 bias_correction: bool = True, aggregate_num: int = 4, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, aggregate_num=aggregate_num, **kwargs)
        _check_betas_epsilon(beta1, beta2, epsilon)
        for name, bound in (("lower_bound", lower_bound), ("upper_bound", upper_bound)):
            _check_real(name, bound, low=0, none_ok=True, why=" (no bound)")
        if lower_bound is not None and upper_bound is not None and lower_bound > upper_bound:
            raise ValueError(f"lower_bound must not exceed upper_bound, got lower_bound={lower_bound} "
                             f"> upper_bound={upper_bound}")
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.bias_correction = bool(bias_correction)

    def create_state(self, index: int, weight: Any) -> Any:
        xp = _xp(weight)
        return (xp.zeros_like(weight), xp.zeros_like(weight))  # (m, v)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        b1, b2 = self.beta1, self.beta2
        g = self._effective_grad(xp, grad, weight, 0.0)         # g = clip(rescale·g)  (wd comes later)
        m, v = state
        m *= b1                                                 # m = β1·m + (1−β1)·g
        m += (1.0 - b1) * g
        v *= b2                                                 # v = β2·v + (1−β2)·g²
        v += (1.0 - b2) * g * g
        c1 = 1.0 - b1**count if self.bias_correction else 1.0   # 1 − β1^t  (1 without correction)
        c2 = 1.0 - b2**count if self.bias_correction else 1.0   # 1 − β2^t
        u = (m / c1) / (xp.sqrt(v / c2) + self.epsilon)         # u = m̂/(√v̂ + ε)
        if wd:
            u += wd * weight                                    # u += wd·w
        r1 = serial_norm(weight)                                # r1 = ‖w‖ (the serial kernel's order)
        if self.lower_bound is not None:
            r1 = xp.maximum(r1, self.lower_bound)               # r1 = max(r1, lower_bound)
        if self.upper_bound is not None:
            r1 = xp.minimum(r1, self.upper_bound)               # r1 = min(r1, upper_bound)
        r2 = serial_norm(u)                                     # r2 = ‖u‖
        ok = (r1 > 0) & (r2 > 0)
        ratio = xp.where(ok, r1 / xp.where(ok, r2, 1), 1)       # r = r1/r2, or 1 if either is 0
        weight -= (lr * ratio).astype(weight.dtype) * u         # w −= lr·r·u


# -- the fused update (lamb_phase1, lamb_phase2 in kernels/optimizers.cu) --------------------
def _lamb_row(opt: LAMB, index: Any, count: int) -> Row:
    c1 = 1.0 - opt.beta1**count if opt.bias_correction else 1.0
    c2 = 1.0 - opt.beta2**count if opt.bias_correction else 1.0
    return (opt._get_lr(index), opt._get_wd(index), c1, c2)


def _lamb_launch(run: Launcher, opt: LAMB, weight, grad, st, master) -> Iterator[Any] | None:
    return phases(run, _lamb_phases(run, opt, weight, grad, st, master))  # at once, unless sharded


def _lamb_phases(run: Launcher, opt: LAMB, weight, grad, st, master) -> Iterator[Any]:
    sums = run.sums()
    run("lamb_phase1", (weight, grad, st["m"], st["v"], master),
        (rescale_arg(run, opt), clip_arg(opt), *betas_eps(opt)), sums)
    yield from complete_sums(run, sums)  # sharded states: ‖w‖², ‖u‖² summed over the shards of each parameter
    lower = -1.0 if opt.lower_bound is None else opt.lower_bound  # the kernel reads < 0 as "no bound"
    upper = -1.0 if opt.upper_bound is None else opt.upper_bound
    run("lamb_phase2", (weight, st["m"], st["v"], master), (opt.epsilon, lower, upper), sums)


# Norms over whole parameters: two launches, and the twin keeps whole segments (not elementwise).
register_fused(LAMB, FusedRule(lambda o: ("m", "v"), _lamb_row, _lamb_launch, kernels=("lamb_phase1", "lamb_phase2"),
                               kernels_without_grad=("lamb_phase2",), elementwise=False))
