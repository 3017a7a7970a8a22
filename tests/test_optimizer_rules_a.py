"""Every rule of the registries against its float64 reference, through the Updater.

``RULES`` is ``tests/optimizer_registry.py``'s list plus, when the file exists,
``tests/optimizer_registry_b.py``'s. Each entry runs 100 steps on seeded random data for two
parameters updated together (different shapes, lr_mult and wd_mult from ``param_dict``), in
two settings: "plain" (no weight decay, rescale or clipping, constant rate) and "full" (wd,
rescale_grad, clip_gradient, multipliers, and a ``FactorScheduler``). Checks:

* float64 weights match the reference to rtol 1e-10, float32 to rtol 1e-5 (the atol only
  covers entries that end near 0), and the rule never writes into the gradient;
* float16 weights with ``multi_precision=True``: the float32 master follows the reference to
  float32 precision and the float16 weight is the master rounded (so within float16's half ulp);
* 40 steps, ``get_states(dump_optimizer=True)``, a fresh optimizer and Updater,
  ``set_states``, 60 more steps: bit-identical to 100 uninterrupted steps;
* constructor arguments out of range raise ValueError naming the argument and the value.

SGD's and Adam's ``lazy_update`` with row-sparse gradients are checked at the end.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer.lr_scheduler import FactorScheduler
from tests import optimizer_registry as registry_a

_REGISTRIES = [registry_a]
for _extra in ("tests.optimizer_registry_b", "tests.optimizer_registry_c"):
    if importlib.util.find_spec(_extra) is not None:
        _REGISTRIES.append(importlib.import_module(_extra))

RULES = [entry for reg in _REGISTRIES for entry in reg.RULES]
INVALID = [entry for reg in _REGISTRIES for entry in getattr(reg, "INVALID", [])]

STEPS = 100
SCHED_STEP, SCHED_FACTOR = 25, 0.6  # four rate levels over 100 updates
# (shape, lr_mult, wd_mult, name) of the parameters updated together; names end in _weight
# so that rules looking at names (LARS) treat both as weights.
PARAMS = [((7, 5), 0.7, 1.5, "dense0_weight"), ((6,), 1.3, 0.5, "dense1_weight")]
TOLERANCES = {np.float64: {"rtol": 1e-10, "atol": 1e-12}, np.float32: {"rtol": 1e-5, "atol": 1e-6}}
SETTINGS = {
    "plain": {"wd": 0.0, "rescale_grad": 1.0, "clip_gradient": None, "multipliers": False, "schedule": False},
    # rescale 0.5 and clip 0.8 clip about a sixth of the gradients (N(0.3, 1) before rescaling).
    "full": {"wd": 0.02, "rescale_grad": 0.5, "clip_gradient": 0.8, "multipliers": True, "schedule": True},
}


def _rule_id(entry) -> str:
    name, kwargs, _ = entry
    return name + "(" + ",".join(f"{k}={v}" for k, v in kwargs.items() if k != "learning_rate") + ")"


RULE_IDS = [_rule_id(e) for e in RULES]


def _data(seed: int = 0, dtype=np.float64):
    """Initial weights and ``STEPS`` gradients per parameter, rounded to ``dtype``."""
    rng = np.random.default_rng(seed)
    w0 = [rng.standard_normal(shape).astype(dtype) for shape, *_ in PARAMS]
    grads = [[(rng.standard_normal(shape) + 0.3).astype(dtype) for shape, *_ in PARAMS] for _ in range(STEPS)]
    return w0, grads


def _multipliers(setting: str) -> list[tuple[float, float]]:
    return [(lr_m, wd_m) if SETTINGS[setting]["multipliers"] else (1.0, 1.0) for _, lr_m, wd_m, _ in PARAMS]


def _make(name, kwargs, setting, **extra):
    s = SETTINGS[setting]
    sched = FactorScheduler(step=SCHED_STEP, factor=SCHED_FACTOR, base_lr=kwargs["learning_rate"]) \
        if s["schedule"] else None
    param_dict = {i: SimpleNamespace(lr_mult=lr_m, wd_mult=wd_m, name=p[3])
                  for i, ((lr_m, wd_m), p) in enumerate(zip(_multipliers(setting), PARAMS))}
    return mx.optimizer.create(name, wd=s["wd"], rescale_grad=s["rescale_grad"], clip_gradient=s["clip_gradient"],
                               lr_scheduler=sched, param_dict=param_dict, **kwargs, **extra)


def _run(updater, weights, grads) -> None:
    indices = list(range(len(PARAMS)))
    for step_grads in grads:
        updater(indices, list(step_grads), weights)


def _expected(entry, w0, grads, setting) -> list[np.ndarray]:
    """The reference's final weights, in float64, from the same (rounded) data."""
    name, kwargs, ref = entry
    s = SETTINGS[setting]
    lr = kwargs["learning_rate"]
    lr_fn = (lambda t: lr * SCHED_FACTOR ** ((t - 1) // SCHED_STEP)) if s["schedule"] else (lambda t: lr)
    out = []
    for i, (lr_m, wd_m) in enumerate(_multipliers(setting)):
        out.append(ref(w0[i].astype(np.float64), [g[i].astype(np.float64) for g in grads], lr_fn=lr_fn,
                       wd=s["wd"], rescale_grad=s["rescale_grad"], clip_gradient=s["clip_gradient"],
                       lr_mult=lr_m, wd_mult=wd_m, **kwargs))
    return out


# -- every registry entry against its reference ----------------------------------------------------
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("entry", RULES, ids=RULE_IDS)
def test_rule_matches_reference(entry, dtype, setting):
    name, kwargs, _ = entry
    w0, grads = _data(dtype=dtype)
    grads_before = [[g.copy() for g in step] for step in grads]
    weights = [w.copy() for w in w0]
    _run(mx.optimizer.get_updater(_make(name, kwargs, setting)), weights, grads)
    for w, expected, start in zip(weights, _expected(entry, w0, grads, setting), w0):
        assert w.dtype == dtype
        np.testing.assert_allclose(w, expected, **TOLERANCES[dtype])
        assert np.abs(expected - start).max() > 1e-3, "the run should move the weights"
    for step, before in zip(grads, grads_before):  # the rule must not write into the gradient
        for g, g0 in zip(step, before):
            np.testing.assert_array_equal(g, g0)


@pytest.mark.parametrize("entry", RULES, ids=RULE_IDS)
def test_float16_multi_precision_follows_the_reference(entry):
    name, kwargs, _ = entry
    w0, grads = _data(seed=1, dtype=np.float16)
    weights = [w.copy() for w in w0]
    updater = mx.optimizer.get_updater(_make(name, kwargs, "full", multi_precision=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "accumulating with float16" warning under multi_precision
        _run(updater, weights, grads)
    for i, (w, expected) in enumerate(zip(weights, _expected(entry, w0, grads, "full"))):
        state = updater.states[i]
        assert isinstance(state, mx.optimizer.MultiPrecisionState)
        assert w.dtype == np.float16 and state.master.dtype == np.float32
        np.testing.assert_allclose(state.master, expected, **TOLERANCES[np.float32])
        np.testing.assert_array_equal(w, state.master.astype(np.float16))
        np.testing.assert_allclose(w, expected, rtol=1e-3, atol=1e-5)  # float16's half ulp is 4.9e-4


@pytest.mark.parametrize("mode", ["f32", "f16-multi-precision"])
@pytest.mark.parametrize("entry", RULES, ids=RULE_IDS)
def test_saved_states_continue_bit_identically(entry, mode):
    name, kwargs, _ = entry
    dtype, extra = (np.float32, {}) if mode == "f32" else (np.float16, {"multi_precision": True})
    w0, grads = _data(seed=2, dtype=dtype)
    straight = [w.copy() for w in w0]
    _run(mx.optimizer.get_updater(_make(name, kwargs, "full", **extra)), straight, grads)

    first = mx.optimizer.get_updater(_make(name, kwargs, "full", **extra))
    resumed = [w.copy() for w in w0]
    _run(first, resumed, grads[:40])
    blob = first.get_states(dump_optimizer=True)
    assert isinstance(blob, bytes)
    second = mx.optimizer.get_updater(_make(name, kwargs, "full", **extra))
    second.set_states(blob)
    _run(second, resumed, grads[40:])
    for a, b in zip(resumed, straight):
        np.testing.assert_array_equal(a, b)
    assert second.optimizer.num_update == first.optimizer.num_update + 60


def test_registries_cover_every_rule_module():
    covered = {name for name, _, _ in RULES} | {n for reg in _REGISTRIES for n in getattr(reg, "STOCHASTIC", ())}
    ours = {n for n in mx.optimizer.registered()
            if mx.optimizer.create(n).__class__.__module__.startswith("mxlite.optimizer.")}
    assert ours <= covered, f"rules without a registry entry: {sorted(ours - covered)}"
    for name in covered:  # every entry's reference is named after its rule
        assert name in mx.optimizer.registered()


# -- hyperparameter validation ------------------------------------------------------------------------
@pytest.mark.parametrize("name,kwargs,arg", INVALID, ids=[f"{n}-{a}={list(k.values())}" for n, k, a in INVALID])
def test_bad_hyperparameter_raises_naming_it(name, kwargs, arg):
    value = kwargs[arg]
    with pytest.raises(ValueError, match=rf"{arg}\b.*{re.escape(str(value))}"):
        mx.optimizer.create(name, **kwargs)


@pytest.mark.parametrize("name", sorted({name for name, _, _ in RULES}))
@pytest.mark.parametrize("arg,value", [("learning_rate", -0.5), ("wd", -0.01), ("clip_gradient", -1.0)])
def test_every_rule_rejects_bad_shared_arguments(name, arg, value):
    with pytest.raises(ValueError, match=rf"{arg}\b.*{re.escape(str(value))}"):
        mx.optimizer.create(name, **{arg: value})


def test_defaults_are_mxnet_master():
    o = mx.optimizer.create("sgd")
    assert (o.lr, o.momentum, o.lazy_update, o.dampening, o.nesterov) == (0.1, 0.0, False, 0.0, False)
    o = mx.optimizer.create("nag")
    assert (o.lr, o.momentum) == (0.1, 0.9)
    o = mx.optimizer.create("adam")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.lazy_update) == (0.001, 0.9, 0.999, 1e-8, False)
    o = mx.optimizer.create("adamw")
    assert (o.lr, o.beta1, o.beta2, o.epsilon, o.correct_bias) == (0.001, 0.9, 0.999, 1e-6, True)


# -- hand-derived single steps ------------------------------------------------------------------------
def _one_step(name, w0, g, **kwargs):
    w = np.array(w0, dtype=np.float64)
    mx.optimizer.get_updater(mx.optimizer.create(name, **kwargs))(0, np.array(g, dtype=np.float64), w)
    return w


def test_adamw_decay_is_decoupled_and_scaled_by_the_corrected_step():
    # t = 1: m = 0.1·g, v = 0.001·g², η = lr·√(1 − 0.999)/(1 − 0.9); the decay uses the old w.
    lr, wd, eps, g, w0 = 0.1, 0.5, 1e-6, 2.0, 3.0
    eta = lr * np.sqrt(1 - 0.999) / (1 - 0.9)
    step = 0.1 * g / (np.sqrt(0.001 * g * g) + eps)
    w = _one_step("adamw", [w0], [g], learning_rate=lr, wd=wd, epsilon=eps)
    assert w[0] == pytest.approx(w0 - eta * (step + wd * w0), rel=1e-14)
    w = _one_step("adamw", [w0], [g], learning_rate=lr, wd=wd, epsilon=eps, correct_bias=False)
    assert w[0] == pytest.approx(w0 - lr * (step + wd * w0), rel=1e-14)


def test_sgd_singa_form_first_steps():
    # buf starts at 0: step 1 moves by lr·(1−d)·G; Nesterov adds μ·buf to G.
    w = _one_step("sgd", [1.0], [2.0], learning_rate=0.1, momentum=0.9, dampening=0.25)
    assert w[0] == pytest.approx(1.0 - 0.1 * 0.75 * 2.0, rel=1e-15)
    w = _one_step("sgd", [1.0], [2.0], learning_rate=0.1, momentum=0.9, nesterov=True)
    assert w[0] == pytest.approx(1.0 - 0.1 * (2.0 + 0.9 * 2.0), rel=1e-15)


def test_sgd_forms_agree_at_constant_rate_without_dampening():
    """MXNet's velocity and SINGA's buffer give the same weights when lr is constant (mom = −lr·buf)."""
    w0, grads = _data(seed=3)
    runs = []
    for dampening in (0.0, 1e-300):  # 1 − 1e-300 == 1, but a nonzero dampening selects the SINGA form
        w = w0[0].copy()
        upd = mx.optimizer.get_updater(mx.optimizer.create("sgd", learning_rate=0.02, momentum=0.9, wd=0.01,
                                                           dampening=dampening))
        for step in grads[:30]:
            upd(0, step[0], w)
        runs.append(w)
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-12)
    assert not np.array_equal(runs[0], runs[1])  # the two forms did run different arithmetic


def test_nag_matches_mxnet_kernel_algebra():
    # nag_mom_update: w' = w + μ²·mom − (1+μ)·lr·G, mom' = μ·mom − lr·G (from mom = 0: two steps).
    mu, lr = 0.9, 0.1
    opt = mx.optimizer.create("nag", learning_rate=lr, momentum=mu)
    upd = mx.optimizer.get_updater(opt)
    w, mom, w_ref = np.array([1.0]), 0.0, 1.0
    for g in (2.0, -1.0):
        upd(0, np.array([g]), w)
        w_ref = w_ref + mu * mu * mom - (1 + mu) * lr * g
        mom = mu * mom - lr * g
        assert w[0] == pytest.approx(w_ref, rel=1e-14)


# -- row-sparse gradients -----------------------------------------------------------------------------
def _row_sparse(dense_rows: np.ndarray, rows: np.ndarray, shape) -> mx.sparse.RowSparseTensor:
    return mx.sparse.row_sparse_array((dense_rows, rows), shape=shape, dtype=dense_rows.dtype)


@pytest.mark.parametrize("entry", [e for e in registry_a.RULES if e[0] in ("sgd", "adam")],
                         ids=[_rule_id(e) for e in registry_a.RULES if e[0] in ("sgd", "adam")])
def test_lazy_update_moves_only_the_present_rows(entry):
    """The present rows follow the reference run on those rows; the others (weight and state) stay put."""
    name, kwargs, ref = entry
    rows = np.array([1, 4, 5])
    w0, grads = _data(seed=4)
    shape = w0[0].shape
    opt = _make(name, {**kwargs, "lazy_update": True}, "full")
    updater = mx.optimizer.get_updater(opt)
    w = w0[0].copy()
    for step in grads:
        updater(0, _row_sparse(step[0][rows], rows, shape), w)
    lr = kwargs["learning_rate"]
    expected = ref(w0[0][rows], [step[0][rows] for step in grads],
                   lr_fn=lambda t: lr * SCHED_FACTOR ** ((t - 1) // SCHED_STEP), wd=0.02, rescale_grad=0.5,
                   clip_gradient=0.8, lr_mult=PARAMS[0][1], wd_mult=PARAMS[0][2], **kwargs)
    np.testing.assert_allclose(w[rows], expected, rtol=1e-10, atol=1e-12)
    others = np.setdiff1d(np.arange(shape[0]), rows)
    np.testing.assert_array_equal(w[others], w0[0][others])  # no weight decay on absent rows
    state = updater.states[0]
    for s in (state if isinstance(state, tuple) else (state,)):
        if s is not None:
            assert not s[others].any()


def test_lazy_update_with_changing_rows_and_multi_precision():
    """Rows absent from a step keep weight, master and momentum; float16 rows are the rounded master."""
    shape = (6, 3)
    rng = np.random.default_rng(5)
    w = rng.standard_normal(shape).astype(np.float16)
    opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.1, lazy_update=True, multi_precision=True)
    updater = mx.optimizer.get_updater(opt)
    for rows in ([0, 2], [2, 3], [5]):
        rows = np.array(rows)
        before = (w.copy(), updater.states[0].master.copy(), updater.states[0].state.copy()) \
            if 0 in updater.states else None
        updater(0, _row_sparse(rng.standard_normal((len(rows), 3)).astype(np.float16), rows, shape), w)
        state = updater.states[0]
        np.testing.assert_array_equal(w, state.master.astype(np.float16))
        if before is not None:
            others = np.setdiff1d(np.arange(shape[0]), rows)
            for now, then in zip((w, state.master, state.state), before):
                np.testing.assert_array_equal(now[others], then[others])


@pytest.mark.parametrize("name,kwargs", [("sgd", {"momentum": 0.9}), ("adam", {}), ("nag", {})])
def test_row_sparse_gradient_without_lazy_update_is_densified(name, kwargs):
    rows = np.array([0, 3])
    w0, grads = _data(seed=6)
    shape = w0[0].shape
    dense_run, sparse_run = w0[0].copy(), w0[0].copy()
    dense_upd = mx.optimizer.get_updater(mx.optimizer.create(name, wd=0.1, **kwargs))
    sparse_upd = mx.optimizer.get_updater(mx.optimizer.create(name, wd=0.1, **kwargs))
    for step in grads[:10]:
        dense = np.zeros(shape)
        dense[rows] = step[0][rows]
        dense_upd(0, dense, dense_run)
        sparse_upd(0, _row_sparse(step[0][rows], rows, shape), sparse_run)
    np.testing.assert_array_equal(sparse_run, dense_run)
    assert (sparse_run != w0[0]).all()  # weight decay reached the absent rows too


# -- float16 without multi_precision -------------------------------------------------------------------
def test_float16_without_multi_precision_warns_once_and_stays_float16():
    opt = mx.optimizer.create("adam", learning_rate=0.01)
    updater = mx.optimizer.get_updater(opt)
    weights = [np.ones((3,), np.float16), np.ones((2, 2), np.float16)]
    with pytest.warns(UserWarning, match="multi_precision=True") as record:
        updater([0, 1], [np.full(3, 0.5, np.float16), np.full((2, 2), -0.5, np.float16)], weights)
    assert len([r for r in record if "multi_precision" in str(r.message)]) == 1
    for i, w in enumerate(weights):
        assert w.dtype == np.float16
        assert all(s.dtype == np.float16 for s in updater.states[i])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        updater([0, 1], [np.full(3, 0.5, np.float16), np.full((2, 2), -0.5, np.float16)], weights)


# -- GPU (CuPy) twin against the NumPy twin ------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("entry", registry_a.RULES, ids=[_rule_id(e) for e in registry_a.RULES])
def test_cupy_matches_numpy_and_states_move_to_the_gpu(entry):
    if mx.num_gpus() == 0:
        pytest.skip("needs CuPy and a CUDA GPU")
    import cupy

    name, kwargs, _ = entry
    w0, grads = _data(seed=7)
    expected = [w.copy() for w in w0]
    _run(mx.optimizer.get_updater(_make(name, kwargs, "full")), expected, grads)
    first = mx.optimizer.get_updater(_make(name, kwargs, "full"))
    weights = [cupy.asarray(w) for w in w0]
    _run(first, weights, [[cupy.asarray(g) for g in step] for step in grads[:50]])
    second = mx.optimizer.get_updater(_make(name, kwargs, "full"))
    second.set_states(first.get_states(dump_optimizer=True))  # NumPy states, moved at the next update
    _run(second, weights, [[cupy.asarray(g) for g in step] for step in grads[50:]])
    for w, e in zip(weights, expected):
        np.testing.assert_allclose(cupy.asnumpy(w), e, rtol=1e-9, atol=1e-12)
    for state in second.states.values():
        for s in (state if isinstance(state, tuple) else (state,)):
            assert s is None or isinstance(s, cupy.ndarray)
