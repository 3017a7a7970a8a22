"""The registry that drives the optimizer rule tests: ``RULES``, one entry per rule variant.

Each entry is ``(name, kwargs, reference_fn)``. ``name`` and ``kwargs`` go to
``mx.optimizer.create(name, **kwargs)``; every ``kwargs`` sets ``learning_rate`` (the tests
hand it to the schedule too) and states each hyperparameter the variant is about.
``reference_fn`` replays a whole run of one parameter in float64, written from the update
equations in the rule's module docstring (MXNet master's; SINGA's for SGD's dampening and
Nesterov), never from mxlite code: it allocates fresh arrays every step and imports only NumPy.

Reference signature (shared with ``tests/optimizer_registry_b.py``, whose ``RULES`` the tests
add to these)::

    reference_fn(w0: np.ndarray, grads: list[np.ndarray], *,
                 lr_fn: Callable[[int], float],   # scheduled lr of update t = 1, 2, ...
                 wd: float, rescale_grad: float, clip_gradient: float | None,
                 lr_mult: float, wd_mult: float,
                 **kwargs) -> np.ndarray          # kwargs: the entry's kwargs; returns the final weight

Update ``t`` (the parameter's update count, 1 at the first update) uses the rate
``lr_fn(t) * lr_mult`` and the weight decay ``wd * wd_mult``. Hyperparameters absent from
``kwargs`` take the rule's default; ``learning_rate`` is accepted and ignored (``lr_fn``
carries it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RULES", "REFERENCES", "INVALID"]

Reference = Callable[..., np.ndarray]


def _scaled(g: np.ndarray, rescale_grad: float, clip_gradient: float | None) -> np.ndarray:
    """``clip(rescale_grad * g, ±clip_gradient)`` in float64."""
    out = np.asarray(g, dtype=np.float64) * rescale_grad
    if clip_gradient is not None:
        out = np.minimum(np.maximum(out, -clip_gradient), clip_gradient)
    return out


def ref_sgd(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
            learning_rate=None, momentum=0.0, dampening=0.0, nesterov=False, lazy_update=False) -> np.ndarray:
    """MXNet: mom = μ·mom − lr·G, w += mom. SINGA (dampening or Nesterov): buf = μ·buf + (1−d)·G,
    D = G + μ·buf (Nesterov) or buf, w −= lr·D. Without momentum both are w −= lr·G."""
    w = np.array(w0, dtype=np.float64)
    mom = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        if momentum == 0:
            w = w - lr * G
        elif dampening == 0 and not nesterov:
            mom = momentum * mom - lr * G
            w = w + mom
        else:
            mom = momentum * mom + (1 - dampening) * G
            w = w - lr * (G + momentum * mom if nesterov else mom)
    return w


def ref_nag(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
            learning_rate=None, momentum=0.9) -> np.ndarray:
    """mom = μ·mom − lr·G; w = w + μ·mom − lr·G (new mom); no momentum: w −= lr·G."""
    w = np.array(w0, dtype=np.float64)
    mom = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        mom = momentum * mom - lr * G
        w = w + momentum * mom - lr * G
    return w


def ref_adam(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
             learning_rate=None, beta1=0.9, beta2=0.999, epsilon=1e-8, lazy_update=False) -> np.ndarray:
    """G with L2 decay; m, v; w −= lr·√(1−β2^t)/(1−β1^t) · m/(√v + ε)."""
    w = np.array(w0, dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        m = beta1 * m + (1 - beta1) * G
        v = beta2 * v + (1 - beta2) * G**2
        w = w - lr * np.sqrt(1 - beta2**t) / (1 - beta1**t) * m / (np.sqrt(v) + epsilon)
    return w


def ref_adamw(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult,
              learning_rate=None, beta1=0.9, beta2=0.999, epsilon=1e-6, correct_bias=True) -> np.ndarray:
    """G without decay; m, v; η = lr·√(1−β2^t)/(1−β1^t) (or lr); w −= η·(m/(√v + ε) + wd·w)."""
    w = np.array(w0, dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient)
        m = beta1 * m + (1 - beta1) * G
        v = beta2 * v + (1 - beta2) * G**2
        eta = lr * np.sqrt(1 - beta2**t) / (1 - beta1**t) if correct_bias else lr
        w = w - eta * (m / (np.sqrt(v) + epsilon) + wd * wd_mult * w)
    return w


REFERENCES: dict[str, Reference] = {"sgd": ref_sgd, "nag": ref_nag, "adam": ref_adam, "adamw": ref_adamw}

# (name, kwargs, reference_fn). Rates move the weights by O(0.1-1) over 100 steps.
RULES: list[tuple[str, dict[str, Any], Reference]] = [
    ("sgd", {"learning_rate": 0.05}, ref_sgd),
    ("sgd", {"learning_rate": 0.02, "momentum": 0.9}, ref_sgd),
    ("sgd", {"learning_rate": 0.02, "momentum": 0.9, "dampening": 0.3}, ref_sgd),
    ("sgd", {"learning_rate": 0.02, "momentum": 0.8, "nesterov": True}, ref_sgd),
    ("sgd", {"learning_rate": 0.05, "dampening": 0.5}, ref_sgd),
    ("nag", {"learning_rate": 0.02, "momentum": 0.9}, ref_nag),
    ("nag", {"learning_rate": 0.05, "momentum": 0.0}, ref_nag),
    ("adam", {"learning_rate": 0.01}, ref_adam),
    ("adam", {"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}, ref_adam),
    ("adamw", {"learning_rate": 0.01}, ref_adamw),
    ("adamw", {"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-4, "correct_bias": False},
     ref_adamw),
]

# (name, kwargs, argument): constructing must raise ValueError naming the argument and the value.
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("sgd", {"momentum": -0.1}, "momentum"),
    ("sgd", {"dampening": -0.5}, "dampening"),
    ("sgd", {"dampening": 1.5}, "dampening"),
    ("sgd", {"nesterov": True, "momentum": 0.0}, "momentum"),
    ("sgd", {"nesterov": True, "momentum": 0.9, "dampening": 0.1}, "dampening"),
    ("sgd", {"learning_rate": -0.1}, "learning_rate"),
    ("sgd", {"wd": -1e-4}, "wd"),
    ("sgd", {"clip_gradient": 0.0}, "clip_gradient"),
    ("sgd", {"begin_num_update": -1}, "begin_num_update"),
    ("nag", {"momentum": -0.9}, "momentum"),
    ("nag", {"learning_rate": -1.0}, "learning_rate"),
    ("adam", {"beta1": 1.0}, "beta1"),
    ("adam", {"beta2": -0.1}, "beta2"),
    ("adam", {"epsilon": 0.0}, "epsilon"),
    ("adam", {"wd": -0.1}, "wd"),
    ("adamw", {"beta1": -0.5}, "beta1"),
    ("adamw", {"beta2": 1.0}, "beta2"),
    ("adamw", {"epsilon": -1e-6}, "epsilon"),
    ("adamw", {"learning_rate": -0.001}, "learning_rate"),
]
