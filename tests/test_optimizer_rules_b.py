"""Rules RMSProp, AdaGrad, AdaDelta, LAMB, LARS, Signum and Ftrl against float64 references.

Every entry of ``optimizer_registry_b.RULES`` runs 100 steps on seeded random data through
``mx.optimizer.create`` + ``get_updater``, in two settings: "plain" (no weight decay, no
rescale or clipping, constant rate) and "full" (wd, rescale_grad, clip_gradient, lr_mult and
wd_mult from ``param_dict``, and a ``FactorScheduler``). The result must match the
reference to rtol 1e-10 in float64 and rtol 1e-5 in float32 (the atol only covers entries
that end near 0). Single-step checks with hand-derived values pin the choices where
frameworks differ (where ε sits in RMSProp, LAMB/LARS fallbacks, LARS exclusions).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer import adadelta, adagrad, ftrl, lamb, lars, rmsprop, signum
from mxlite.optimizer.lr_scheduler import FactorScheduler
from tests.optimizer_registry_b import REFERENCES, RULES

CLASSES = {"rmsprop": rmsprop.RMSProp, "adagrad": adagrad.AdaGrad, "adadelta": adadelta.AdaDelta,
           "lamb": lamb.LAMB, "lars": lars.LARS, "signum": signum.Signum, "ftrl": ftrl.Ftrl}

SHAPE = (7, 5)
STEPS = 100
SCHED_STEP, SCHED_FACTOR = 25, 0.6  # four rate levels over 100 updates
TOLERANCES = {np.float64: {"rtol": 1e-10, "atol": 1e-12}, np.float32: {"rtol": 1e-5, "atol": 1e-6}}

SETTINGS = {
    "plain": {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None, "lr_mult": 1.0, "wd_mult": 1.0,
              "schedule": False},
    # rescale 0.5 and clip 0.8 clip about a sixth of the gradients (N(0.3, 1) before rescaling).
    "full": {"wd": 0.02, "rescale_grad": 0.5, "clip_gradient": 0.8, "lr_mult": 0.7, "wd_mult": 1.5,
             "schedule": True},
}


def _rule_id(entry) -> str:
    name, kwargs, _ = entry
    return name + "(" + ",".join(f"{k}={v}" for k, v in kwargs.items() if k != "learning_rate") + ")"


def _data(seed: int = 0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(SHAPE).astype(dtype)
    grads = [(rng.standard_normal(SHAPE) + 0.3).astype(dtype) for _ in range(STEPS)]
    return w0, grads


def _make(name, kwargs, *, wd, rescale_grad, clip_gradient, lr_mult, wd_mult, schedule, param_name="weight"):
    lr = kwargs["learning_rate"]
    sched = FactorScheduler(step=SCHED_STEP, factor=SCHED_FACTOR, base_lr=lr) if schedule else None
    param = SimpleNamespace(lr_mult=lr_mult, wd_mult=wd_mult, name=param_name)
    return mx.optimizer.create(name, wd=wd, rescale_grad=rescale_grad, clip_gradient=clip_gradient,
                               lr_scheduler=sched, param_dict={0: param}, **kwargs)


def _lr_fn(lr: float, schedule: bool):
    # FactorScheduler in closed form: the first decay applies at update step + 1.
    if not schedule:
        return lambda t: lr
    return lambda t: lr * SCHED_FACTOR ** ((t - 1) // SCHED_STEP)


def _run(opt, w0, grads):
    w = w0.copy()
    updater = mx.optimizer.get_updater(opt)
    for g in grads:
        updater(0, g, w)
    return w


def _reference(ref, kwargs, w0, grads, setting, **extra):
    s = dict(setting)
    schedule = s.pop("schedule")
    return ref(w0.astype(np.float64), [g.astype(np.float64) for g in grads],
               lr_fn=_lr_fn(kwargs["learning_rate"], schedule), **s, **kwargs, **extra)


# -- every registry entry against its reference ----------------------------------------------------
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("entry", RULES, ids=[_rule_id(e) for e in RULES])
def test_rule_matches_reference(entry, dtype, setting):
    name, kwargs, ref = entry
    w0, grads = _data(dtype=dtype)
    grads_before = [g.copy() for g in grads]
    opt = _make(name, kwargs, **SETTINGS[setting])
    w = _run(opt, w0, grads)
    assert w.dtype == dtype
    expected = _reference(ref, kwargs, w0, grads, SETTINGS[setting])
    np.testing.assert_allclose(w, expected, **TOLERANCES[dtype])
    assert np.abs(expected - w0).max() > 1e-3, "the run should move the weights"
    for g, g0 in zip(grads, grads_before):  # the rule must not write into the gradient
        np.testing.assert_array_equal(g, g0)


def test_registry_covers_every_rule_and_flag():
    assert {name for name, _, _ in RULES} == set(CLASSES) == set(REFERENCES)
    flags = {(name, key) for name, kwargs, _ in RULES for key in kwargs}
    for flag in [("rmsprop", "centered"), ("rmsprop", "clip_weights"), ("lamb", "lower_bound"),
                 ("lamb", "upper_bound"), ("lamb", "bias_correction"), ("lars", "momentum"),
                 ("signum", "wd_lh"), ("ftrl", "lamda1")]:
        assert flag in flags


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_registered_and_created_by_name(name):
    assert name in mx.optimizer.registered()
    opt = mx.optimizer.create(name.upper())
    assert type(opt) is CLASSES[name]


@pytest.mark.parametrize("entry", RULES, ids=[_rule_id(e) for e in RULES])
def test_update_path_equals_updater_path(entry):
    """``opt.create_state`` + ``opt.update`` on two indices gives the updater's result."""
    name, kwargs, _ = entry
    w0, grads = _data(seed=1)
    full = SETTINGS["full"]
    ref_w = _run(_make(name, kwargs, **full), w0, grads[:20])
    opt = _make(name, kwargs, **full)
    opt.param_dict[1] = opt.param_dict[0]
    weights = [w0.copy(), w0.copy()]
    states = [opt.create_state(i, w) for i, w in enumerate(weights)]
    for g in grads[:20]:
        opt.update([0, 1], weights, [g, g.copy()], states)
    np.testing.assert_array_equal(weights[0], ref_w)
    np.testing.assert_array_equal(weights[1], ref_w)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_state_follows_weight_dtype_and_shape(name):
    kwargs = {"momentum": 0.9} if name == "lars" else {}
    opt = mx.optimizer.create(name, **kwargs)
    w = np.zeros(SHAPE, dtype=np.float32)
    state = opt.create_state(0, w)
    arrays = state if isinstance(state, tuple) else (state,)
    for a in arrays:
        assert isinstance(a, np.ndarray) and a.shape == SHAPE and a.dtype == np.float32
        assert not np.shares_memory(a, w)
    assert len(arrays) == {"rmsprop": 1, "adagrad": 1, "adadelta": 2, "lamb": 2, "lars": 1,
                           "signum": 1, "ftrl": 2}[name]


def test_stateless_variants():
    assert mx.optimizer.create("signum", momentum=0.0).create_state(0, np.ones(3)) is None
    assert mx.optimizer.create("lars").create_state(0, np.ones(3)) is None
    assert len(mx.optimizer.create("rmsprop", centered=True).create_state(0, np.ones(3))) == 3


def test_defaults_are_mxnet_master():
    o = mx.optimizer.create("rmsprop")
    assert (o.lr, o.rho, o.momentum, o.epsilon, o.centered, o.clip_weights) == (0.001, 0.9, 0.9, 1e-8, False, None)
    o = mx.optimizer.create("adagrad")
    assert (o.lr, o.epsilon) == (0.01, 1e-6)
    o = mx.optimizer.create("adadelta")
    assert (o.lr, o.rho, o.epsilon) == (1.0, 0.9, 1e-6)
    o = mx.optimizer.create("lamb")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.lower_bound, o.upper_bound, o.bias_correction) == \
        (0.001, 0.9, 0.999, 1e-6, None, None, True)
    o = mx.optimizer.create("lars")
    assert (o.lr, o.momentum, o.eta, o.epsilon) == (0.1, 0.0, 0.001, 1e-8)
    o = mx.optimizer.create("signum")
    assert (o.lr, o.momentum, o.wd_lh) == (0.01, 0.9, 0.0)
    o = mx.optimizer.create("ftrl")
    assert (o.lr, o.lamda1, o.beta) == (0.1, 0.01, 1.0)


# -- integration with the base class: multi-precision, saved states, row-sparse gradients ------------
@pytest.mark.parametrize("entry", RULES, ids=[_rule_id(e) for e in RULES])
def test_saved_states_resume_the_run(entry):
    """50 steps, save states and optimizer, rebuild, load, 50 more == 100 uninterrupted steps."""
    name, kwargs, _ = entry
    w0, grads = _data()
    full = SETTINGS["full"]
    expected = _run(_make(name, kwargs, **full), w0, grads)
    first = mx.optimizer.get_updater(_make(name, kwargs, **full))
    w = w0.copy()
    for g in grads[:50]:
        first(0, g, w)
    blob = first.get_states(dump_optimizer=True)
    second = mx.optimizer.get_updater(_make(name, kwargs, **full))
    second.set_states(blob)
    for g in grads[50:]:
        second(0, g, w)
    np.testing.assert_array_equal(w, expected)


@pytest.mark.parametrize("entry", RULES, ids=[_rule_id(e) for e in RULES])
def test_multi_precision_float16_follows_float32(entry):
    """float16 weights with multi_precision=True step a float32 master: close to the float32 run."""
    name, kwargs, _ = entry
    w0, grads = _data(dtype=np.float32)
    w0 = w0.astype(np.float16).astype(np.float32)  # start both runs from the same values
    full = SETTINGS["full"]
    expected = _run(_make(name, kwargs, **full), w0, grads[:30])
    opt = _make(name, {**kwargs, "multi_precision": True}, **full)
    w16 = _run(opt, w0.astype(np.float16), [g.astype(np.float16) for g in grads[:30]])
    assert w16.dtype == np.float16
    # float16 gradients (rel. error 5e-4) feed the float32 master; the final cast rounds once.
    np.testing.assert_allclose(w16.astype(np.float32), expected, rtol=5e-3, atol=5e-3)


def test_lars_row_sparse_gradient_is_densified():
    """lazy_update=True must not restrict the trust-ratio norms to the present rows."""
    rows = np.array([1, 4])
    w0, grads = _data(seed=4)
    dense = [np.zeros(SHAPE) for _ in range(5)]
    for d, g in zip(dense, grads):
        d[rows] = g[rows]
    kwargs = {"learning_rate": 0.5, "eta": 0.01, "momentum": 0.9}
    expected = _run(mx.optimizer.create("lars", **kwargs), w0, dense)
    opt = mx.optimizer.create("lars", lazy_update=True, **kwargs)
    w = w0.copy()
    updater = mx.optimizer.get_updater(opt)
    for d in dense:
        updater(0, mx.sparse.row_sparse_array((d[rows], rows), shape=SHAPE, dtype=np.float64), w)
    np.testing.assert_allclose(w, expected, rtol=1e-12, atol=1e-14)


# -- hand-derived single steps ------------------------------------------------------------------------
def _one_step(name, w0, g, **kwargs):
    opt = mx.optimizer.create(name, **kwargs)
    w = np.array(w0, dtype=np.float64)
    mx.optimizer.get_updater(opt)(0, np.array(g, dtype=np.float64), w)
    return w


def test_rmsprop_epsilon_outside_the_root_plain_inside_centered():
    # MXNet 2.x, plain: w −= lr·G/(√n + ε). n = (1 − ρ)·G² = 1e-9: √1e-9 + 1e-8 ≈ 3.1633e-5
    # (MXNet 1.x's √(n + ε) ≈ 1.0488e-4 would step 3.3 times less).
    w = _one_step("rmsprop", [1.0], [1e-4], learning_rate=0.1, rho=0.9, epsilon=1e-8)
    assert w[0] == pytest.approx(1.0 - 0.1 * 1e-4 / (math.sqrt(0.1 * 1e-8) + 1e-8), rel=1e-14)
    # centered, first step: n − ḡ² = 0.1·G² − 0.01·G² = 0.09·G²; Δ = −lr·G/√(0.09·G² + ε).
    w = _one_step("rmsprop", [1.0], [2.0], learning_rate=0.1, rho=0.9, centered=True, epsilon=1e-8)
    assert w[0] == pytest.approx(1.0 - 0.1 * 2.0 / math.sqrt(0.09 * 4.0 + 1e-8), rel=1e-14)


def test_rmsprop_clip_weights_bounds_the_weights():
    w0, grads = _data(seed=2)
    opt = mx.optimizer.create("rmsprop", learning_rate=0.05, clip_weights=0.3)
    w = _run(opt, w0, grads[:10])
    assert np.abs(w).max() <= 0.3 and np.isclose(np.abs(w).max(), 0.3)


def test_adagrad_first_step_is_sign_sized():
    # h = G², so the first step is lr·G/(|G| + ε).
    w = _one_step("adagrad", [0.0, 0.0], [3.0, -0.5], learning_rate=0.1, epsilon=1e-6)
    np.testing.assert_allclose(w, [-0.1 * 3.0 / (3.0 + 1e-6), 0.1 * 0.5 / (0.5 + 1e-6)], rtol=1e-14)


def test_adagrad_weight_decay_enters_the_history():
    # G = g + wd·w = 1 + 0.5·2 = 2, so h = 4 and w = 2 − lr·2/(2 + ε) (not lr·1/(1 + ε) − lr·wd·w).
    w = _one_step("adagrad", [2.0], [1.0], learning_rate=0.1, wd=0.5, epsilon=1e-6)
    assert w[0] == pytest.approx(2.0 - 0.1 * 2.0 / (2.0 + 1e-6), rel=1e-14)


def test_adadelta_first_step():
    # Eg = (1 − ρ)·G², d = √ε/√(Eg + ε)·G, w −= lr·d.
    w = _one_step("adadelta", [1.0], [2.0], learning_rate=1.0, rho=0.9, epsilon=1e-6)
    assert w[0] == pytest.approx(1.0 - math.sqrt(1e-6) / math.sqrt(0.4 + 1e-6) * 2.0, rel=1e-14)


def test_lamb_zero_weight_takes_ratio_one_and_bounds_apply():
    g = np.array([3.0, -4.0])
    u = g / (np.abs(g) + 1e-6)  # t = 1: m̂ = g, v̂ = g², u = g/(|g| + ε)
    w = _one_step("lamb", [0.0, 0.0], g, learning_rate=0.1)
    np.testing.assert_allclose(w, -0.1 * u, rtol=1e-14)  # ‖w‖ = 0: ratio 1
    w = _one_step("lamb", [0.0, 0.0], g, learning_rate=0.1, lower_bound=2.0)
    np.testing.assert_allclose(w, -0.1 * 2.0 / np.linalg.norm(u) * u, rtol=1e-14)  # r1 = 2
    w0 = np.array([30.0, 40.0])  # ‖w‖ = 50, clamped to 5
    w = _one_step("lamb", w0, g, learning_rate=0.1, upper_bound=5.0)
    np.testing.assert_allclose(w, w0 - 0.1 * 5.0 / np.linalg.norm(u) * u, rtol=1e-14)


def test_lamb_zero_update_takes_ratio_one():
    # g = 0 and wd = 0: u = 0, r2 = 0, the ratio falls back to 1 and the weight stays put.
    w = _one_step("lamb", [1.0, 2.0], [0.0, 0.0], learning_rate=0.1)
    np.testing.assert_array_equal(w, [1.0, 2.0])


def test_lamb_bounds_change_the_run():
    w0, grads = _data()
    base = _run(mx.optimizer.create("lamb", learning_rate=0.01), w0, grads)
    for bound in ({"lower_bound": 8.0}, {"upper_bound": 2.0}):
        bounded = _run(mx.optimizer.create("lamb", learning_rate=0.01, **bound), w0, grads)
        assert np.abs(bounded - base).max() > 1e-3, bound


@pytest.mark.parametrize("pname", ["bias", "dense0_bias", "gamma", "beta", "batchnorm0_gamma"])
def test_lars_excludes_bias_and_batchnorm_parameters(pname):
    w0, grads = _data(seed=3)
    setting = dict(SETTINGS["full"])
    kwargs = {"learning_rate": 0.05, "eta": 0.01, "momentum": 0.9}
    w = _run(_make("lars", kwargs, **setting, param_name=pname), w0, grads)
    expected = _reference(REFERENCES["lars"], kwargs, w0, grads, SETTINGS["full"], lars_excluded=True)
    np.testing.assert_allclose(w, expected, rtol=1e-10, atol=1e-12)
    trusted = _run(_make("lars", kwargs, **setting, param_name="weight"), w0, grads)
    assert np.abs(trusted - w).max() > 1e-3


def test_lars_param_idx2name_overrides_param_dict_name():
    w0, grads = _data(seed=3)
    kwargs = {"learning_rate": 0.05, "eta": 0.01}
    by_idx = mx.optimizer.create("lars", param_idx2name={0: "fc_bias"}, **kwargs)
    by_idx.param_dict[0] = SimpleNamespace(lr_mult=1.0, wd_mult=1.0, name="weight")
    w = _run(by_idx, w0, grads[:5])
    expected = _reference(REFERENCES["lars"], kwargs, w0, grads[:5], SETTINGS["plain"], lars_excluded=True)
    np.testing.assert_allclose(w, expected, rtol=1e-12)


def test_lars_zero_weight_uses_plain_lr_not_eta_lr():
    # ‖w‖ = 0: λ = 1, so the step is lr·G (not η·lr·G).
    w = _one_step("lars", [0.0, 0.0], [1.0, -2.0], learning_rate=0.1, eta=0.001)
    np.testing.assert_allclose(w, [-0.1, 0.2], rtol=1e-14)
    # otherwise λ = η‖w‖/(‖g‖ + wd‖w‖ + ε): ‖w‖ = 5, ‖g‖ = 5, wd = 0.2 -> λ = η·5/(5 + 1 + ε).
    w0, g = np.array([3.0, 4.0]), np.array([0.0, 5.0])
    w = _one_step("lars", w0, g, learning_rate=0.1, eta=0.5, wd=0.2, epsilon=1e-8)
    lam = 0.5 * 5.0 / (5.0 + 0.2 * 5.0 + 1e-8)
    np.testing.assert_allclose(w, w0 - 0.1 * lam * (g + 0.2 * w0), rtol=1e-14)


def test_lars_trust_ratio_uses_the_unclipped_gradient_norm():
    w0, g = np.array([3.0, 4.0]), np.array([0.0, 10.0])
    w = _one_step("lars", w0, g, learning_rate=0.1, eta=0.5, rescale_grad=0.5, clip_gradient=1.0)
    lam = 0.5 * 5.0 / (5.0 + 1e-8)  # ‖rescale·g‖ = 5 (not the clipped 1)
    np.testing.assert_allclose(w, w0 - 0.1 * lam * np.array([0.0, 1.0]), rtol=1e-14)


def test_signum_moves_every_coordinate_by_lr():
    w0 = np.array([1.0, -1.0, 0.5])
    w = _one_step("signum", w0, [0.3, -2.0, 1e-9], learning_rate=0.01)
    np.testing.assert_allclose(w, w0 - 0.01 * np.array([1.0, -1.0, 1.0]), rtol=1e-14)
    # signSGD with both decays: w = (1 − lr·(wd + wd_lh))·w − lr·sign(g)
    w = _one_step("signum", w0, [0.3, -2.0, 1e-9], learning_rate=0.01, momentum=0.0, wd=0.1, wd_lh=0.2)
    np.testing.assert_allclose(w, (1 - 0.01 * 0.3) * w0 - 0.01 * np.array([1.0, -1.0, 1.0]), rtol=1e-14)


def test_signum_wd_lh_is_decoupled_from_the_sign():
    # A huge wd_lh only shrinks w; the sign still follows g (not g + wd_lh·w).
    w = _one_step("signum", [1.0], [-1e-3], learning_rate=0.1, wd_lh=5.0)
    assert w[0] == pytest.approx((1 - 0.1 * 5.0) * 1.0 + 0.1, rel=1e-14)


def test_ftrl_first_step_and_l1_sparsity():
    # n = 0 -> σ = |g|/lr, z = g − |g|·w/lr; w = −(z − λ1·sign z)/((β + |g|)/lr + wd) if |z| > λ1 else 0.
    lr, l1, beta = 0.1, 0.5, 1.0
    w0, g = np.array([0.0, 0.0, 0.2]), np.array([2.0, 0.3, -1.0])
    w = _one_step("ftrl", w0, g, learning_rate=lr, lamda1=l1, beta=beta)
    z = g - np.abs(g) * w0 / lr  # [2, 0.3, 1.0]
    expected = np.where(np.abs(z) > l1, -(z - l1 * np.sign(z)) / ((beta + np.abs(g)) / lr), 0.0)
    np.testing.assert_allclose(w, expected, rtol=1e-14)
    assert w[1] == 0.0


def test_ftrl_zero_learning_rate_at_step_raises():
    opt = mx.optimizer.create("ftrl", param_dict={0: SimpleNamespace(lr_mult=0.0, wd_mult=1.0)})
    w = np.ones(3)
    with pytest.raises(ValueError, match=r"parameter 0 has lr 0\.0"):
        mx.optimizer.get_updater(opt)(0, np.ones(3), w)
    np.testing.assert_array_equal(w, np.ones(3))


# -- hyperparameter validation ------------------------------------------------------------------------
ERRORS = [
    ("rmsprop", {"rho": 1.0}, "rho"), ("rmsprop", {"rho": -0.1}, "rho"),
    ("rmsprop", {"momentum": -0.5}, "momentum"), ("rmsprop", {"epsilon": 0.0}, "epsilon"),
    ("rmsprop", {"epsilon": -1e-8}, "epsilon"), ("rmsprop", {"clip_weights": -1.0}, "clip_weights"),
    ("rmsprop", {"clip_weights": 0.0}, "clip_weights"),
    ("rmsprop", {"learning_rate": -0.1}, "learning_rate"), ("rmsprop", {"wd": -1e-3}, "wd"),
    ("adagrad", {"epsilon": 0.0}, "epsilon"), ("adagrad", {"epsilon": -1e-6}, "epsilon"),
    ("adagrad", {"learning_rate": -1.0}, "learning_rate"),
    ("adadelta", {"rho": 1.5}, "rho"), ("adadelta", {"rho": 1.0}, "rho"), ("adadelta", {"epsilon": 0.0}, "epsilon"),
    ("lamb", {"beta1": 1.0}, "beta1"), ("lamb", {"beta2": -0.1}, "beta2"), ("lamb", {"epsilon": 0.0}, "epsilon"),
    ("lamb", {"lower_bound": -1.0}, "lower_bound"), ("lamb", {"upper_bound": -2.0}, "upper_bound"),
    ("lamb", {"lower_bound": 3.0, "upper_bound": 2.0}, "lower_bound"), ("lamb", {"wd": -0.1}, "wd"),
    ("lars", {"momentum": -0.9}, "momentum"), ("lars", {"eta": -1.0}, "eta"), ("lars", {"epsilon": -1e-8}, "epsilon"),
    ("lars", {"learning_rate": -0.1}, "learning_rate"),
    ("signum", {"momentum": -0.1}, "momentum"), ("signum", {"wd_lh": -0.1}, "wd_lh"),
    ("signum", {"wd": -0.1}, "wd"),
    ("ftrl", {"learning_rate": 0.0}, "learning_rate"), ("ftrl", {"learning_rate": -0.1}, "learning_rate"),
    ("ftrl", {"lamda1": -0.01}, "lamda1"), ("ftrl", {"beta": -1.0}, "beta"),
]


@pytest.mark.parametrize("name,kwargs,arg", ERRORS, ids=[f"{n}-{a}={list(k.values())}" for n, k, a in ERRORS])
def test_bad_hyperparameter_raises_naming_it(name, kwargs, arg):
    value = kwargs[arg]
    with pytest.raises(ValueError, match=rf"{arg}\b.*{re.escape(str(value))}"):
        mx.optimizer.create(name, **kwargs)


def test_boundary_values_are_accepted():
    mx.optimizer.create("rmsprop", rho=0.0, momentum=0.0)
    mx.optimizer.create("adadelta", rho=0.0)
    mx.optimizer.create("lamb", beta1=0.0, beta2=0.0, lower_bound=0.0, upper_bound=0.0)
    mx.optimizer.create("lars", epsilon=0.0, eta=0.0)
    mx.optimizer.create("signum", momentum=0.0, wd_lh=0.0)
    mx.optimizer.create("ftrl", lamda1=0.0, beta=0.0)


# -- GPU (CuPy) twin against the NumPy twin -----------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("entry", RULES, ids=[_rule_id(e) for e in RULES])
def test_cupy_matches_numpy(entry):
    if mx.num_gpus() == 0:
        pytest.skip("needs CuPy and a CUDA GPU")
    import cupy

    name, kwargs, _ = entry
    w0, grads = _data()
    full = SETTINGS["full"]
    expected = _run(_make(name, kwargs, **full), w0, grads)
    w = cupy.asarray(w0)
    updater = mx.optimizer.get_updater(_make(name, kwargs, **full))
    for g in grads:
        updater(0, cupy.asarray(g), w)
    np.testing.assert_allclose(cupy.asnumpy(w), expected, rtol=1e-9, atol=1e-12)
