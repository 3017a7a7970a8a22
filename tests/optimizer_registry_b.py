"""Registry of the second group of update rules, each with a float64 NumPy reference.

``RULES`` is a list of ``(name, kwargs, reference_fn)``: ``name`` and ``kwargs`` go to
``mx.optimizer.create(name, **kwargs)`` (every ``kwargs`` sets ``learning_rate``, which the
tests also hand to the schedule), and ``reference_fn`` replays the same run. Each reference
is written from the update equations (MXNet master's, see the rule modules' docstrings),
not from the mxlite code: it allocates fresh arrays every step and never calls mxlite.

Reference signature (the same as ``tests/optimizer_registry.py``)::

    reference_fn(w0: np.ndarray, grads: list[np.ndarray], *,
                 lr_fn: Callable[[int], float],   # scheduled lr for update t = 1, 2, ...
                 wd: float, rescale_grad: float, clip_gradient: float | None,
                 lr_mult: float, wd_mult: float,
                 **kwargs) -> np.ndarray          # the rule's hyperparameters; final weight

The effective rate of update ``t`` is ``lr_fn(t) * lr_mult`` and the effective weight
decay ``wd * wd_mult``; everything is computed in float64. ``kwargs`` are the rule's own
arguments with MXNet's defaults when absent (``learning_rate`` is accepted and ignored:
``lr_fn`` carries it). The LARS reference also takes ``lars_excluded`` (the parameter is a
bias/gamma/beta, so its layer-wise factor is 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RULES", "REFERENCES"]

Reference = Callable[..., np.ndarray]


def _scaled(g: np.ndarray, rescale_grad: float, clip_gradient: float | None) -> np.ndarray:
    """``clip(rescale_grad * g, ±clip_gradient)`` in float64."""
    out = np.asarray(g, dtype=np.float64) * rescale_grad
    if clip_gradient is not None:
        out = np.minimum(np.maximum(out, -clip_gradient), clip_gradient)
    return out


def _steps(w0: np.ndarray, grads: list[np.ndarray], lr_fn: Callable[[int], float], lr_mult: float):
    """Yield ``(t, lr_t, g_t)`` for t = 1..len(grads), with ``lr_t = lr_fn(t) * lr_mult``."""
    for t, g in enumerate(grads, start=1):
        yield t, lr_fn(t) * lr_mult, g


def ref_rmsprop(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
                learning_rate=None, rho=0.9, momentum=0.9, epsilon=1e-8, centered=False,
                clip_weights=None) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    wdm = wd * wd_mult
    n = np.zeros_like(w)
    mean = np.zeros_like(w)
    delta = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        G = _scaled(g, rescale_grad, clip_gradient) + wdm * w
        n = rho * n + (1 - rho) * G**2
        if centered:
            mean = rho * mean + (1 - rho) * G
            delta = momentum * delta - lr * G / np.sqrt(n - mean**2 + epsilon)
            w = w + delta
        else:
            w = w - lr * G / (np.sqrt(n) + epsilon)  # MXNet 2.x: ε outside the root (plain form)
        if clip_weights is not None:
            w = np.minimum(np.maximum(w, -clip_weights), clip_weights)
    return w


def ref_adagrad(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
                learning_rate=None, epsilon=1e-6) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    h = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        h = h + G**2
        w = w - lr * G / (np.sqrt(h) + epsilon)
    return w


def ref_adadelta(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
                 learning_rate=None, rho=0.9, epsilon=1e-6) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    eg = np.zeros_like(w)
    edx = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        eg = rho * eg + (1 - rho) * G**2
        dx = np.sqrt(edx + epsilon) / np.sqrt(eg + epsilon) * G
        edx = rho * edx + (1 - rho) * dx**2
        w = w - lr * dx
    return w


def ref_lamb(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
             learning_rate=None, beta1=0.9, beta2=0.999, epsilon=1e-6, lower_bound=None,
             upper_bound=None, bias_correction=True, aggregate_num=None) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        gs = _scaled(g, rescale_grad, clip_gradient)
        m = beta1 * m + (1 - beta1) * gs
        v = beta2 * v + (1 - beta2) * gs**2
        if bias_correction:
            m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
        else:
            m_hat, v_hat = m, v
        update = m_hat / (np.sqrt(v_hat) + epsilon) + wd * wd_mult * w
        r1 = float(np.sqrt(np.sum(w**2)))
        if lower_bound is not None:
            r1 = max(r1, lower_bound)
        if upper_bound is not None:
            r1 = min(r1, upper_bound)
        r2 = float(np.sqrt(np.sum(update**2)))
        trust = r1 / r2 if (r1 > 0 and r2 > 0) else 1.0
        w = w - lr * trust * update
    return w


def ref_lars(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
             learning_rate=None, momentum=0.0, eta=0.001, epsilon=1e-8, lazy_update=None,
             aggregate_num=None, lars_excluded=False) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    wdm = wd * wd_mult
    mom = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        w_norm = float(np.sqrt(np.sum(w**2)))
        g_norm = float(np.sqrt(np.sum((np.asarray(g, dtype=np.float64) * rescale_grad) ** 2)))
        if lars_excluded or w_norm == 0 or g_norm == 0:
            layer_lr = lr
        else:
            layer_lr = lr * eta * w_norm / (g_norm + wdm * w_norm + epsilon)
        G = _scaled(g, rescale_grad, clip_gradient) + wdm * w
        mom = momentum * mom - layer_lr * G
        w = w + mom
    return w


def ref_signum(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
               learning_rate=None, momentum=0.9, wd_lh=0.0) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    wdm = wd * wd_mult
    # m is the paper's momentum (a running mean of G); MXNet stores -m.
    m = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        if momentum == 0:
            w = w - lr * (wdm + wd_lh) * w - lr * np.sign(g)
        else:
            G = _scaled(g, rescale_grad, clip_gradient) + wdm * w
            m = momentum * m + (1 - momentum) * G
            w = w - lr * wd_lh * w - lr * np.sign(m)
    return w


def ref_ftrl(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
             learning_rate=None, lamda1=0.01, beta=1.0) -> np.ndarray:
    w = np.array(w0, dtype=np.float64)
    z = np.zeros_like(w)
    n = np.zeros_like(w)
    for _, lr, g in _steps(w0, grads, lr_fn, lr_mult):
        gs = _scaled(g, rescale_grad, clip_gradient)
        n_new = n + gs**2
        z = z + gs - (np.sqrt(n_new) - np.sqrt(n)) / lr * w
        n = n_new
        # Closed-form argmin of the FTRL-proximal objective per coordinate.
        w = np.where(np.abs(z) <= lamda1, 0.0,
                     -(z - lamda1 * np.sign(z)) / ((beta + np.sqrt(n)) / lr + wd * wd_mult))
    return w


REFERENCES: dict[str, Reference] = {
    "rmsprop": ref_rmsprop,
    "adagrad": ref_adagrad,
    "adadelta": ref_adadelta,
    "lamb": ref_lamb,
    "lars": ref_lars,
    "signum": ref_signum,
    "ftrl": ref_ftrl,
}

# (name, kwargs, reference_fn). Learning rates are chosen so that 100 steps move the weights
# by O(0.1-1) without diverging; the LAMB bounds straddle ‖w0‖ ≈ 6 of the tests' 7x5 weights.
RULES: list[tuple[str, dict[str, Any], Reference]] = [
    ("rmsprop", {"learning_rate": 0.01}, ref_rmsprop),
    ("rmsprop", {"learning_rate": 0.01, "rho": 0.8, "epsilon": 1e-6}, ref_rmsprop),
    ("rmsprop", {"learning_rate": 0.01, "centered": True}, ref_rmsprop),
    ("rmsprop", {"learning_rate": 0.01, "centered": True, "momentum": 0.5, "rho": 0.95}, ref_rmsprop),
    ("rmsprop", {"learning_rate": 0.01, "clip_weights": 0.6}, ref_rmsprop),
    ("rmsprop", {"learning_rate": 0.01, "centered": True, "clip_weights": 0.6}, ref_rmsprop),
    ("adagrad", {"learning_rate": 0.05}, ref_adagrad),
    ("adagrad", {"learning_rate": 0.05, "epsilon": 1e-3}, ref_adagrad),
    ("adadelta", {"learning_rate": 1.0}, ref_adadelta),
    ("adadelta", {"learning_rate": 0.5, "rho": 0.95, "epsilon": 1e-4}, ref_adadelta),
    ("lamb", {"learning_rate": 0.01}, ref_lamb),
    ("lamb", {"learning_rate": 0.01, "bias_correction": False, "beta1": 0.8, "beta2": 0.99}, ref_lamb),
    ("lamb", {"learning_rate": 0.01, "lower_bound": 8.0}, ref_lamb),
    ("lamb", {"learning_rate": 0.01, "upper_bound": 2.0}, ref_lamb),
    ("lamb", {"learning_rate": 0.01, "lower_bound": 1.0, "upper_bound": 3.0}, ref_lamb),
    ("lars", {"learning_rate": 0.5, "eta": 0.01}, ref_lars),
    ("lars", {"learning_rate": 0.5, "eta": 0.01, "momentum": 0.9, "epsilon": 0.0}, ref_lars),
    ("signum", {"learning_rate": 0.01}, ref_signum),
    ("signum", {"learning_rate": 0.01, "momentum": 0.8, "wd_lh": 0.05}, ref_signum),
    ("signum", {"learning_rate": 0.01, "momentum": 0.0, "wd_lh": 0.05}, ref_signum),
    ("ftrl", {"learning_rate": 0.1}, ref_ftrl),
    ("ftrl", {"learning_rate": 0.2, "lamda1": 0.05, "beta": 0.5}, ref_ftrl),
]
