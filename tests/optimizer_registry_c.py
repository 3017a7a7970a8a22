"""Registry of the third group of update rules (Nadam, AdaBelief, FTML, DCASGD, LANS), each with a
float64 NumPy reference written from MXNet 2.x's ``step`` equations (see the rule modules' docstrings).

Same entry format and reference signature as ``tests/optimizer_registry.py``. SGLD adds random
noise, so it has no entry here (``STOCHASTIC``); ``tests/test_optimizer_new.py`` checks it with the
noise replaced and statistically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RULES", "INVALID", "STOCHASTIC"]

STOCHASTIC = {"sgld"}


def _scaled(g, rescale_grad, clip_gradient):
    out = np.asarray(g, dtype=np.float64) * rescale_grad
    if clip_gradient is not None:
        out = np.minimum(np.maximum(out, -clip_gradient), clip_gradient)
    return out


def ref_nadam(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, learning_rate=None,
              beta1=0.9, beta2=0.999, epsilon=1e-8, schedule_decay=0.004):
    w = np.array(w0, dtype=np.float64)
    m, v, sched = np.zeros_like(w), np.zeros_like(w), 1.0
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * schedule_decay))
        mu_n = beta1 * (1 - 0.5 * 0.96 ** ((t + 1) * schedule_decay))
        sched = sched * mu_t
        m = beta1 * m + (1 - beta1) * G
        v = beta2 * v + (1 - beta2) * G * G
        m_bar = mu_t * m / (1 - sched * mu_n) + (1 - mu_t) * G / (1 - sched)
        w = w - lr * m_bar / (np.sqrt(v / (1 - beta2**t)) + epsilon)
    return w


def ref_adabelief(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, learning_rate=None,
                  beta1=0.9, beta2=0.999, epsilon=1e-6, correct_bias=True):
    w = np.array(w0, dtype=np.float64)
    m, s = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = np.asarray(g, np.float64) * rescale_grad + wd * wd_mult * w  # decay before clipping
        if clip_gradient is not None:
            G = np.clip(G, -clip_gradient, clip_gradient)
        if correct_bias:
            lr = lr * np.sqrt(1 - beta2**t) / (1 - beta1**t)
        m = beta1 * m + (1 - beta1) * G
        s = beta2 * s + (1 - beta2) * (G - m) ** 2 + epsilon
        w = w - lr * m / (np.sqrt(s) + epsilon)
    return w


def ref_ftml(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, learning_rate=None,
             beta1=0.6, beta2=0.999, epsilon=1e-8):
    w = np.array(w0, dtype=np.float64)
    d, v, z = np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        v = beta2 * v + (1 - beta2) * G * G
        d_new = (1 - beta1**t) / lr * (np.sqrt(v / (1 - beta2**t)) + epsilon)
        sigma = d_new - beta1 * d
        z = beta1 * z + (1 - beta1) * G - sigma * w
        d = d_new
        w = -z / d
    return w


def ref_dcasgd(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, learning_rate=None,
               momentum=0.0, lamda=0.04):
    w = np.array(w0, dtype=np.float64)
    mom, prev = np.zeros_like(w), w.copy()
    for t, g in enumerate(grads, start=1):
        lr = lr_fn(t) * lr_mult
        G = _scaled(g, rescale_grad, clip_gradient) + wd * wd_mult * w
        D = G + lamda * G * G * (w - prev)
        mom = momentum * mom - lr * D if momentum else -lr * D
        prev = w
        w = w + mom
    return w


def ref_lans(w0, grads, *, lr_fn, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, learning_rate=None,
             beta1=0.9, beta2=0.999, epsilon=1e-6, lower_bound=None, upper_bound=None):
    w = np.array(w0, dtype=np.float64)
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        lr, wdm = lr_fn(t) * lr_mult, wd * wd_mult
        g = np.asarray(g, np.float64) * rescale_grad
        g = g / np.linalg.norm(g)
        if clip_gradient is not None:
            g = np.clip(g, -clip_gradient, clip_gradient)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        r1 = np.linalg.norm(w)
        if lower_bound is not None:
            r1 = max(r1, lower_bound)
        if upper_bound is not None:
            r1 = min(r1, upper_bound)
        u_m = (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + epsilon) + wdm * w
        u_g = g + wdm * w
        r_m = r1 / np.linalg.norm(u_m)
        r_g = r1 / np.linalg.norm(u_g)
        w = w - beta1 * lr * (r_m if r_m > 0 else 1.0) * u_m - (1 - beta1) * lr * (r_g if r_g > 0 else 1.0) * u_g
    return w


Reference = Callable[..., np.ndarray]
RULES: list[tuple[str, dict[str, Any], Reference]] = [
    ("nadam", {"learning_rate": 0.01}, ref_nadam),
    ("nadam", {"learning_rate": 0.02, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "schedule_decay": 0.1}, ref_nadam),
    ("adabelief", {"learning_rate": 0.01}, ref_adabelief),
    ("adabelief", {"learning_rate": 0.01, "beta1": 0.8, "epsilon": 1e-4, "correct_bias": False}, ref_adabelief),
    ("ftml", {"learning_rate": 0.01}, ref_ftml),
    ("ftml", {"learning_rate": 0.005, "beta1": 0.5, "beta2": 0.99, "epsilon": 1e-6}, ref_ftml),
    ("dcasgd", {"learning_rate": 0.05}, ref_dcasgd),
    ("dcasgd", {"learning_rate": 0.05, "momentum": 0.9, "lamda": 0.5}, ref_dcasgd),
    ("lans", {"learning_rate": 0.01}, ref_lans),
    ("lans", {"learning_rate": 0.01, "lower_bound": 0.5, "upper_bound": 2.0, "epsilon": 1e-4}, ref_lans),
]

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("nadam", {"beta1": 1.0}, "beta1"),
    ("nadam", {"schedule_decay": -0.1}, "schedule_decay"),
    ("adabelief", {"epsilon": 0.0}, "epsilon"),
    ("ftml", {"beta2": -0.5}, "beta2"),
    ("dcasgd", {"lamda": -1.0}, "lamda"),
    ("dcasgd", {"momentum": 1.5}, "momentum"),
    ("lans", {"lower_bound": -1.0}, "lower_bound"),
    ("lans", {"lower_bound": 3.0, "upper_bound": 2.0}, "lower_bound"),
]
