"""Which optimizers have a fused arena update, and what drives each one.

A :class:`FusedRule` holds everything rule-specific that the arena updater (``_arena.py``)
needs; the updater itself knows no rule:

* ``states(opt)``: the names of the float32 state buffers (arena layout), in the order of the
  state tuple the rule's ``step`` takes (one name: the state is that array; none: None);
* ``row(opt, index, count)``: the parameter's row of the per-launch table (``HP`` floats: the
  learning rate, the weight decay and up to two rule values), computed with the same optimizer
  methods ``step`` uses, after the update count has been incremented;
* ``launch(run, opt, weight, grad, states, master)``: the kernel launches of one update (one,
  or two for the rules with per-parameter norms, LAMB and LARS); ``grad`` may be a narrow wire's
  half-precision sum, so every launch passes ``rescale_grad`` through :func:`_rescale`;
* ``twin``: a hand-tuned NumPy twin, or None for the generic one (the rule's ``step`` on views,
  :func:`mxlite.optimizer._fused.step_segments`).

Only the exact classes are fused (a subclass may change ``step``), and only the forms the
kernels implement: SGD with SINGA's ``nesterov``/``dampening`` keeps the per-parameter path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _fused
from ._fused import one_minus
from .adabelief import AdaBelief
from .adadelta import AdaDelta
from .adagrad import AdaGrad
from .adam import Adam
from .adamw import AdamW
from .ftrl import Ftrl
from .lamb import LAMB
from .lars import LARS
from .nadam import Nadam
from .nag import NAG
from .optimizer import MultiPrecisionState, Optimizer
from .rmsprop import RMSProp
from .sgd import SGD
from .signum import Signum

__all__ = ["FusedRule", "fused_rule", "to_structure", "from_structure"]

FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))

Row = tuple[float, ...]


@dataclass(frozen=True)
class FusedRule:
    """How one optimizer class runs as a fused arena update (see the module docstring)."""

    states: Callable[[Any], tuple[str, ...]]
    row: Callable[[Any, Any, int], Row]
    launch: Callable[..., None]
    twin: Callable[..., None] | None = None
    eligible: Callable[[Any], bool] = lambda opt: True


def _clip(opt: Optimizer) -> float:
    return opt.clip_gradient or 0.0  # the kernels read clip <= 0 as "no clipping"


def _rescale(run: Any, opt: Optimizer) -> float:
    """The kernels' ``rescale``: ``rescale_grad``, times N when they read a narrow wire's sum pre-scaled by 1/N.

    (See :meth:`mxlite.optimizer._fused.Launcher.rescale`; a launcher without ``grad_scale`` reads
    the gradient buffer itself.)
    """
    scale = getattr(run, "grad_scale", 1.0)
    return opt.rescale_grad if scale == 1.0 else float(run.rescale(opt.rescale_grad))


def _lr_wd(opt: Optimizer, index: Any, count: int) -> Row:
    return (opt._get_lr(index), opt._get_wd(index))


def _one_kernel(kernel: str, state_args: tuple[str, ...], scalars: Callable[[Any], tuple[float, ...]]):
    """A launch of ``kernel(weight, grad, *states named state_args, master, ..., rescale, clip, *scalars)``."""
    def launch(run: _fused.Launcher, opt: Any, weight: Any, grad: Any, st: dict[str, Any], master: Any) -> None:
        run(kernel, (weight, grad, *(st.get(n) for n in state_args), master),
            (_rescale(run, opt), _clip(opt), *scalars(opt)))
    return launch


def _momentum_state(opt: Any) -> tuple[str, ...]:
    return ("mom",) if opt.momentum else ()


# -- SGD and Adam: hand-tuned twins ---------------------------------------------------------------
def _sgd_twin(opt: SGD, plan, weight, grad, st, master, hp) -> None:
    _fused.sgd_twin(plan, weight, grad, st.get("mom"), master, hp, opt.momentum, opt.rescale_grad,
                    opt.clip_gradient)


def _adam_row(opt: Adam, index: Any, count: int) -> Row:
    lr_t = opt._get_lr(index) * math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)
    return (lr_t, opt._get_wd(index))


def _adam_twin(opt: Adam, plan, weight, grad, st, master, hp) -> None:
    _fused.adam_twin(plan, weight, grad, st["mean"], st["var"], master, hp, opt.beta1, opt.beta2, opt.epsilon,
                     opt.rescale_grad, opt.clip_gradient)


def _betas_eps(opt: Any) -> tuple[float, ...]:
    """Adam, AdamW, Nadam, AdaBelief and LAMB: ``beta1, 1 - beta1, beta2, 1 - beta2, epsilon``.

    (See :func:`_fused.one_minus`.)
    """
    return (opt.beta1, one_minus(opt.beta1), opt.beta2, one_minus(opt.beta2), opt.epsilon)


# -- rules with a per-parameter value besides lr and wd ------------------------------------------
def _adamw_row(opt: AdamW, index: Any, count: int) -> Row:
    eta = opt._get_lr(index)
    if opt.correct_bias:
        eta *= math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)
    return (eta, opt._get_wd(index))


def _nadam_row(opt: Nadam, index: Any, count: int) -> Row:
    """``(a, wd, b, 1 - beta2^t)``: the per-parameter momentum schedule folded in (:meth:`Nadam._coefficients`)."""
    a, b, c2 = opt._coefficients(index, count)
    return (a, opt._get_wd(index), b, c2)


def _adabelief_row(opt: AdaBelief, index: Any, count: int) -> Row:
    return (opt._lr_t(opt._get_lr(index), count), opt._get_wd(index))


def _signum_row(opt: Signum, index: Any, count: int) -> Row:
    lr, wd = opt._get_lr(index), opt._get_wd(index)
    decay = 1.0 - lr * opt.wd_lh if opt.momentum else 1.0 - lr * (wd + opt.wd_lh)
    return (lr, wd, decay)


def _ftrl_row(opt: Ftrl, index: Any, count: int) -> Row:
    return (opt._positive_lr(index), opt._get_wd(index))


def _rmsprop_states(opt: RMSProp) -> tuple[str, ...]:
    return ("mean", "n", "delta") if opt.centered else ("n",)


# -- two-launch rules: per-parameter norms first --------------------------------------------------
def _lamb_row(opt: LAMB, index: Any, count: int) -> Row:
    c1 = 1.0 - opt.beta1**count if opt.bias_correction else 1.0
    c2 = 1.0 - opt.beta2**count if opt.bias_correction else 1.0
    return (opt._get_lr(index), opt._get_wd(index), c1, c2)


def _lamb_launch(run: _fused.Launcher, opt: LAMB, weight, grad, st, master) -> None:
    sums = run.sums()
    run("lamb_phase1", (weight, grad, st["m"], st["v"], master),
        (_rescale(run, opt), _clip(opt), *_betas_eps(opt)), sums)
    lower = -1.0 if opt.lower_bound is None else opt.lower_bound  # the kernel reads < 0 as "no bound"
    upper = -1.0 if opt.upper_bound is None else opt.upper_bound
    run("lamb_phase2", (weight, st["m"], st["v"], master), (opt.epsilon, lower, upper), sums)


def _lars_row(opt: LARS, index: Any, count: int) -> Row:
    return (opt._get_lr(index), opt._get_wd(index), 1.0 if opt._excluded(index) else 0.0)


def _lars_launch(run: _fused.Launcher, opt: LARS, weight, grad, st, master) -> None:
    sums = run.sums()
    run("lars_norms", (weight, grad, master), (), sums)
    run("lars_update", (weight, grad, st.get("mom"), master),
        (_rescale(run, opt), _clip(opt), opt.momentum, opt.eta, opt.epsilon), sums)


_RULES: dict[type, FusedRule] = {
    SGD: FusedRule(_momentum_state, _lr_wd, _one_kernel("sgd_update", ("mom",), lambda o: (o.momentum,)),
                   twin=_sgd_twin, eligible=lambda o: not o.nesterov and not o.dampening),
    NAG: FusedRule(_momentum_state, _lr_wd, _one_kernel("nag_update", ("mom",), lambda o: (o.momentum,))),
    Adam: FusedRule(lambda o: ("mean", "var"), _adam_row,
                    _one_kernel("adam_update", ("mean", "var"), _betas_eps), twin=_adam_twin),
    AdamW: FusedRule(lambda o: ("mean", "var"), _adamw_row, _one_kernel("adamw_update", ("mean", "var"), _betas_eps)),
    Nadam: FusedRule(lambda o: ("mean", "var"), _nadam_row, _one_kernel("nadam_update", ("mean", "var"), _betas_eps)),
    AdaBelief: FusedRule(lambda o: ("mean", "var"), _adabelief_row,
                         _one_kernel("adabelief_update", ("mean", "var"), _betas_eps)),
    RMSProp: FusedRule(_rmsprop_states, _lr_wd, _one_kernel(
        "rmsprop_update", ("n", "mean", "delta"),
        lambda o: (o.rho, one_minus(o.rho), o.momentum, o.epsilon, o.clip_weights or 0.0))),
    AdaGrad: FusedRule(lambda o: ("history",), _lr_wd,
                       _one_kernel("adagrad_update", ("history",), lambda o: (o.epsilon,))),
    AdaDelta: FusedRule(lambda o: ("acc_g", "acc_delta"), _lr_wd,
                        _one_kernel("adadelta_update", ("acc_g", "acc_delta"),
                                    lambda o: (o.rho, one_minus(o.rho), o.epsilon))),
    Signum: FusedRule(_momentum_state, _signum_row,
                      _one_kernel("signum_update", ("mom",), lambda o: (o.momentum, one_minus(o.momentum)))),
    Ftrl: FusedRule(lambda o: ("z", "n"), _ftrl_row,
                    _one_kernel("ftrl_update", ("z", "n"), lambda o: (o.lamda1, o.beta))),
    LAMB: FusedRule(lambda o: ("m", "v"), _lamb_row, _lamb_launch),
    LARS: FusedRule(_momentum_state, _lars_row, _lars_launch),
}


def fused_rule(optimizer: Optimizer, dtype: Any) -> FusedRule | None:
    """The :class:`FusedRule` of ``optimizer`` for weights of ``dtype``, or None (per-parameter path).

    Fused: the exact rule classes above, in the forms their kernels implement, on float32 or
    float16 storage. float64 runs keep the per-parameter path's float64 arithmetic.
    """
    if np.dtype(dtype) not in FUSED_DTYPES:
        return None
    rule = _RULES.get(type(optimizer))
    if rule is None or not rule.eligible(optimizer):
        return None
    return rule


def to_structure(names: tuple[str, ...], arrays: dict[str, Any], master: Any = None) -> Any:
    """The state as the rule's ``step`` (and ``create_state``) shapes it, from named arrays."""
    inner = [arrays[n] for n in names]
    state = None if not inner else inner[0] if len(inner) == 1 else tuple(inner)
    return state if master is None else MultiPrecisionState(master, state)


def from_structure(names: tuple[str, ...], state: Any) -> tuple[dict[str, Any], Any]:
    """Inverse of :func:`to_structure`: ``({name: array}, master or None)``.

    Raises:
        ValueError: the state does not have the structure ``names`` describes.
    """
    master = None
    if isinstance(state, MultiPrecisionState):
        master, state = state.master, state.state
    parts = [] if state is None else [state] if len(names) == 1 else state
    if not isinstance(parts, (list, tuple)) or len(parts) != len(names):
        raise ValueError(f"expected a state of {len(names)} arrays ({', '.join(names) or 'none'}), "
                         f"got {type(state).__name__}")
    return dict(zip(names, parts)), master
