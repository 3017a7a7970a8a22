"""Nadam, AdaBelief, FTML, SGLD, DCASGD and LANS: hand-derived single steps (values written out), SGLD's
noise, and direct calls with Tensors as MXNet's tests make them. The 100-step float64/float32/float16
reference runs, save/restore and argument checks run through ``tests/optimizer_registry_c.py`` in
``tests/test_optimizer_rules_a.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer import SGLD
from tests.optimizer_registry import _scaled


def _one_step(name, w0, g, **kwargs):
    w = np.array(w0, dtype=np.float64)
    mx.optimizer.get_updater(mx.optimizer.create(name, **kwargs))(0, np.array(g, dtype=np.float64), w)
    return w


def test_nadam_first_step_by_hand():
    # t = 1, β1 = 0.9, sd = 0.004: μ1 = 0.9·(1 − 0.5·0.96^0.004), μ2 likewise with 0.008; S1 = μ1.
    mu1 = 0.9 * (1 - 0.5 * 0.96**0.004)
    mu2 = 0.9 * (1 - 0.5 * 0.96**0.008)
    g, lr = 2.0, 0.1
    m, v = 0.1 * g, 0.001 * g * g
    m_bar = mu1 * m / (1 - mu1 * mu2) + (1 - mu1) * g / (1 - mu1)
    expected = 1.0 - lr * m_bar / (math.sqrt(v / 0.001) + 1e-8)
    assert _one_step("nadam", [1.0], [g], learning_rate=lr)[0] == pytest.approx(expected, rel=1e-14)
    assert mu1 == pytest.approx(0.4500735, abs=1e-7)


def test_nadam_schedule_is_per_parameter():
    """Two parameters updated together follow the one-parameter run each (MXNet shares S between them)."""
    rng = np.random.default_rng(0)
    grads = rng.standard_normal((20, 2, 3))
    together = [np.ones(3), np.ones(3)]
    upd = mx.optimizer.get_updater(mx.optimizer.create("nadam", learning_rate=0.01))
    for g in grads:
        upd([0, 1], [g[0], g[1]], together)
    for k in (0, 1):
        alone = np.ones(3)
        single = mx.optimizer.get_updater(mx.optimizer.create("nadam", learning_rate=0.01))
        for g in grads:
            single(0, g[k], alone)
        np.testing.assert_array_equal(together[k], alone)


def test_adabelief_first_step_by_hand():
    # m = 0.1·G, s = 0.001·(G − m)² + ε, lr_t = lr·√0.001/0.1; wd enters before clipping.
    g, w0, wd, lr, eps = 3.0, 2.0, 0.5, 0.1, 1e-6
    G = min(g + wd * w0, 2.5)  # clip_gradient = 2.5 cuts 4.0
    m = 0.1 * G
    s = 0.001 * (G - m) ** 2 + eps
    expected = w0 - lr * math.sqrt(0.001) / 0.1 * m / (math.sqrt(s) + eps)
    w = _one_step("adabelief", [w0], [g], learning_rate=lr, wd=wd, clip_gradient=2.5)
    assert w[0] == pytest.approx(expected, rel=1e-14)


def test_ftml_first_step_by_hand():
    # v = 0.001·G², d = (1 − 0.6)/lr·(√(v/0.001) + ε), σ = d, z = 0.4·G − σ·w, w = −z/d.
    g, w0, lr = 2.0, 1.0, 0.0025
    d = 0.4 / lr * (abs(g) + 1e-8)
    z = 0.4 * g - d * w0
    assert _one_step("ftml", [w0], [g])[0] == pytest.approx(-z / d, rel=1e-14)
    assert -z / d == pytest.approx(w0 - lr * g / (abs(g) + 1e-8), rel=1e-12)  # FTML's first step is a sign step


def test_dcasgd_with_tensors_as_mxnet_calls_it():
    """MXNet's style: create_state on an NDArray, then update(index, weight, grad, state)."""
    opt = mx.optimizer.create("dcasgd", learning_rate=0.1, momentum=0.9, lamda=0.04)
    weight = mx.array(np.array([1.0, -2.0], np.float32))
    state = opt.create_state(0, weight)
    mom, prev = state
    assert isinstance(mom, mx.Tensor) and isinstance(prev, mx.Tensor)
    for g in ([0.5, 1.0], [1.0, -1.0]):
        w_before = weight.asnumpy().astype(np.float64)
        prev_before = prev.asnumpy().astype(np.float64)
        mom_before = mom.asnumpy().astype(np.float64)
        opt.update(0, weight, mx.array(np.array(g, np.float32)), state)
        G = np.array(g)
        D = G + 0.04 * G * G * (w_before - prev_before)
        expected_mom = 0.9 * mom_before - 0.1 * D
        np.testing.assert_allclose(mom.asnumpy(), expected_mom, rtol=1e-6)
        np.testing.assert_allclose(weight.asnumpy(), w_before + expected_mom, rtol=1e-6)
        np.testing.assert_allclose(prev.asnumpy(), w_before, rtol=1e-6)
    assert opt.create_state(0, weight)[0] is not None
    assert mx.optimizer.create("dcasgd").create_state(0, weight)[0] is None  # no momentum: no buffer


def test_lans_zero_gradient_stays_finite():
    w = _one_step("lans", [1.0, 2.0], [0.0, 0.0], learning_rate=0.1, wd=0.01)
    assert np.isfinite(w).all()


def test_sgld_without_noise_matches_reference(monkeypatch):
    monkeypatch.setattr(SGLD, "_noise", lambda self, xp, shape, dtype, index=0, count=1: np.zeros(shape, dtype))
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3))
    grads = rng.standard_normal((50, 4, 3))
    w = w0.copy()
    upd = mx.optimizer.get_updater(mx.optimizer.create("sgld", learning_rate=0.05, wd=0.01, rescale_grad=0.5,
                                                       clip_gradient=0.4))
    for g in grads:
        upd(0, g, w)
    ref = w0.copy()
    for g in grads:
        ref = ref - 0.05 / 2 * (_scaled(g, 0.5, 0.4) + 0.01 * ref)
    np.testing.assert_allclose(w, ref, rtol=1e-12)


def test_sgld_noise_has_the_langevin_variance_and_follows_the_seed():
    lr = 0.04
    w = np.zeros(200_000)
    mx.random.seed(11)
    mx.optimizer.get_updater(mx.optimizer.create("sgld", learning_rate=lr))(0, np.zeros_like(w), w)
    assert abs(w.mean()) < 5 * math.sqrt(lr / w.size)
    assert w.std() == pytest.approx(math.sqrt(lr), rel=0.01)
    again = np.zeros(200_000)
    mx.random.seed(11)
    mx.optimizer.get_updater(mx.optimizer.create("sgld", learning_rate=lr))(0, np.zeros_like(again), again)
    np.testing.assert_array_equal(w, again)


def test_defaults_are_mxnets():
    o = mx.optimizer.create("nadam")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.schedule_decay) == (0.001, 0.9, 0.999, 1e-8, 0.004)
    o = mx.optimizer.create("adabelief")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.correct_bias) == (0.001, 0.9, 0.999, 1e-6, True)
    o = mx.optimizer.create("ftml")
    assert (o.lr, o.beta1, o.beta2, o.epsilon) == (0.0025, 0.6, 0.999, 1e-8)
    assert mx.optimizer.create("sgld").lr == 0.1
    o = mx.optimizer.create("dcasgd")
    assert (o.lr, o.momentum, o.lamda) == (0.1, 0.0, 0.04)
    o = mx.optimizer.create("lans")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.lower_bound, o.upper_bound) == (0.001, 0.9, 0.999, 1e-6, None, None)


def test_sgld_mirrors_draw_the_same_noise():
    """Two mirrors of one parameter (two devices) updated with the same gradient stay identical;
    another parameter or another step draws other noise."""
    opt = mx.optimizer.create("sgld", learning_rate=0.01)
    a, b, other = np.zeros(50), np.zeros(50), np.zeros(50)
    g = np.ones(50)
    opt.set_current_mirror(0)
    opt.update(0, a, g, None)
    opt.update(1, other, g, None)
    opt.set_current_mirror(1)  # the mirror on the second device: its own count table, the same step
    opt.update(0, b, g, None)
    opt.set_current_mirror(0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)
    before = a.copy()
    opt.update(0, a, g, None)
    assert not np.allclose(a - before, before)
