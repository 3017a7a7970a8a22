"""LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional Networks"), MXNet form.

SGD with momentum whose learning rate is scaled per layer (per parameter tensor)::

    ‖w‖ = L2 norm of w,   ‖g‖ = L2 norm of rescale_grad * g      (raw g: no clipping, no wd)
    λ   = η · ‖w‖ / (‖g‖ + wd·‖w‖ + ε)    if ‖w‖ > 0 and ‖g‖ > 0
    λ   = 1                                otherwise, and for excluded parameters
    G   = clip(rescale_grad * g, ±clip_gradient) + wd * w
    mom = μ·mom − lr·λ·G                   (mom = −lr·λ·G when μ = 0: no state)
    w   = w + mom

Symbols: η = ``eta``, ε = ``epsilon``, μ = ``momentum``, lr = ``learning_rate`` · lr_mult,
wd = ``wd`` · wd_mult. Excluded parameters are those whose name ends in ``gamma``, ``beta``
or ``bias`` (batch-norm scale/shift and biases); their λ is 1, so they take plain SGD steps.

Where mxlite differs:

* The name used for the exclusion is ``param_idx2name[index]`` when given (MXNet's only
  source), else ``param_dict[index].name`` (so a Trainer's ``bias``/``gamma``/``beta``
  Parameters are excluded), else ``str(index)``. MXNet's Gluon Trainer passes no
  ``param_idx2name``, so there every parameter gets the trust ratio.
* Note the fallback λ = 1 is ``lr``, not ``η·lr`` (as in MXNet's code and its
  ``multi_lars`` kernel, and unlike the "λ = η·…" of the paper's Algorithm 1).
* The momentum is MXNet's ``step``/aggregated-kernel form above. MXNet's default path for
  one tensor at a time (``use_fused_step=True, aggregate_num=1``) tries to rescale μ by the
  previous over the current layer rate, but divides the whole ``last_lr`` dict by a float
  (a ``TypeError`` from the second step with momentum); mxlite does not reproduce that.
* The norms are taken in the weight's dtype (MXNet casts to float32 first).
* ``lazy_update`` is accepted for compatibility and has no effect: a row-sparse gradient is
  densified, because the trust ratio needs the norms of the whole tensor (a row-wise update
  would see only the present rows). ``aggregate_num`` does not change the result.
* Bad hyperparameters raise ``ValueError`` at construction (MXNet does not check them).

With ``wd = 0`` both ``wd`` terms are absent (not ``0·w``, ``0·‖w‖``: an infinite weight would
give NaN). The norms of a NumPy float32 weight are summed in the order of the serial kernel build
(:func:`mxlite.optimizer._fused.serial_norm`), so both CPU modes give the same bits; on CuPy they
stay on the device (0-d arrays), so a CuPy step does not synchronise.

Kernel: ``lars_norms<T>`` and ``lars_update<T>``
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
    clip_arg,
    complete_sums,
    momentum_state,
    phases,
    register_fused,
    rescale_arg,
    serial_norm,
)
from .optimizer import Optimizer, _check_momentum, _check_real, _xp, register

__all__ = ["LARS"]

# Name endings of parameters that LARS leaves at the global rate (MXNet's list).
_EXCLUDED_SUFFIXES = ("gamma", "beta", "bias")


@register
class LARS(Optimizer):
    """LARS with MXNet's argument names and defaults.

    Args:
        learning_rate: global step size (default 0.1).
        momentum: μ in ``mom = μ·mom − lr·λ·G``, in [0, 1); 0 disables the state.
        eta: trust coefficient η, >= 0.
        epsilon: ε >= 0 in the denominator of λ (default 1e-8, MXNet master; MXNet 1.x
            used ``eps=0``). λ is only computed when both norms are positive, so 0 is safe.
        lazy_update: accepted for MXNet compatibility; no effect.
        param_idx2name: ``{index: name}`` used for the exclusion (see the module docstring).
        **kwargs: see :class:`~mxlite.optimizer.Optimizer`.

    Raises:
        ValueError: ``momentum`` outside [0, 1), or a negative ``eta`` or ``epsilon`` (names the
            argument and value).
    """

    def __init__(self, learning_rate: float = 0.1, momentum: float = 0.0, eta: float = 0.001,
                 epsilon: float = 1e-8, lazy_update: bool = False, aggregate_num: int = 1,
                 param_idx2name: dict[int, str] | None = None, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, aggregate_num=aggregate_num, **kwargs)
        _check_momentum(momentum)
        for name, value in (("eta", eta), ("epsilon", epsilon)):
            _check_real(name, value, low=0)
        self.momentum, self.eta, self.epsilon = momentum, eta, epsilon
        # Kept private: the base class applies row-wise (lazy) updates to rules whose public
        # ``lazy_update`` is true, which would take the norms over the present rows only.
        self._lazy_update = bool(lazy_update)
        self.idx2name = dict(param_idx2name or {})

    def create_state(self, index: int, weight: Any) -> Any:
        if self.momentum == 0.0:
            return None
        return _xp(weight).zeros_like(weight)  # mom

    def _excluded(self, index: int) -> bool:
        """Whether ``index`` names a bias or batch-norm parameter (λ = 1)."""
        name = self.idx2name.get(index)
        if name is None:
            name = getattr(self.param_dict.get(index), "name", None) or str(index)
        return name.endswith(_EXCLUDED_SUFFIXES)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        if not self._excluded(index):
            w_norm = serial_norm(weight)                                   # ‖w‖ (the serial kernel's order)
            g_norm = serial_norm(grad) * abs(self.rescale_grad)            # ‖rescale·g‖
            ok = (w_norm > 0) & (g_norm > 0)
            denom = g_norm + wd * w_norm if wd else g_norm                 # (wd = 0: no wd·‖w‖ term at all)
            denom = xp.where(ok, denom + self.epsilon, 1)                  # (1 where λ is unused: no 0/0)
            trust = self.eta * w_norm / denom                              # λ = η‖w‖/(‖g‖ + wd‖w‖ + ε)
            lr = (lr * xp.where(ok, trust, 1)).astype(weight.dtype)       # lr·λ, λ = 1 if a norm is 0
        g = self._effective_grad(xp, grad, weight, wd)                     # G = clip(rescale·g) + wd·w
        if state is None:
            weight -= lr * g                                               # w −= lr·λ·G
        else:
            state *= self.momentum                                         # mom = μ·mom − lr·λ·G
            state -= lr * g
            weight += state                                                # w += mom


# -- the fused update (lars_norms, lars_update in kernels/optimizers.cu) --------------------
def _lars_row(opt: LARS, index: Any, count: int) -> Row:
    return (opt._get_lr(index), opt._get_wd(index), 1.0 if opt._excluded(index) else 0.0)


def _lars_launch(run: Launcher, opt: LARS, weight, grad, st, master) -> Iterator[Any] | None:
    return phases(run, _lars_phases(run, opt, weight, grad, st, master))  # at once, unless sharded


def _lars_phases(run: Launcher, opt: LARS, weight, grad, st, master) -> Iterator[Any]:
    sums = run.sums()
    run("lars_norms", (weight, grad, master), (), sums)
    yield from complete_sums(run, sums)  # sharded states: ‖w‖², ‖g‖² summed over the shards of each parameter
    run("lars_update", (weight, grad, st.get("mom"), master),
        (rescale_arg(run, opt), clip_arg(opt), opt.momentum, opt.eta, opt.epsilon), sums)


# Norms over whole parameters: two launches, and the twin keeps whole segments (not elementwise).
register_fused(LARS, FusedRule(momentum_state, _lars_row, _lars_launch, kernels=("lars_norms", "lars_update"),
                               elementwise=False))
