"""Every fused rule's arena update on CPU (the compiled kernels and the NumPy twins) against the float64 references.

Each fused-eligible entry of the rule registries (``tests/optimizer_registry*.py``) runs 100
steps through an :class:`~mxlite.optimizer._arena.ArenaUpdater` over one arena holding the
registry's two parameters, in the "plain" and "full" settings of
``tests/test_optimizer_rules_a.py`` (wd, rescale_grad, clip_gradient, lr_mult/wd_mult from
``param_dict`` and a FactorScheduler). float32 weights must match the reference to rtol 1e-5
and atol 5e-6 (a 100-step float32 random walk of roundings on weights up to 2.4 in magnitude:
sqrt(100) x ulp(2.4) = 2.4e-6, doubled; the twins order some operations differently from the
per-parameter rules, which meet 1e-6 by a narrower margin);
float16 weights with ``multi_precision`` keep a float32 master that does, and hold its rounded
copy. The arena's alignment padding must stay zero.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.optimizer._fused import fused_rule
from mxlite.store import Arena
from tests.test_optimizer_rules_a import PARAMS, RULES, SETTINGS, _data, _expected, _make, _rule_id

FLOAT32 = {"rtol": 1e-5, "atol": 5e-6}

FUSED = [e for e in RULES if fused_rule(_make(e[0], e[1], "plain"), np.float32) is not None]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def cpu_update(request, monkeypatch):
    """Each test runs with the kernels compiled for the host and with the NumPy twins."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, request.param)
    return request.param


def _arena_run(opt, dtype, w0, grads):
    """100 fused steps over one arena; returns (weights as float64, updater, slots)."""
    arena = Arena(mx.cpu(0), dtype)
    slots = [arena.add(i, shape) for i, (shape, *_) in enumerate(PARAMS)]
    for slot, w in zip(slots, w0):
        slot.data._data[...] = w
    updater = ArenaUpdater(opt, arena, 0)
    entries = list(enumerate(slots))
    for step in grads:
        for slot, g in zip(slots, step):
            slot.grad._data[...] = g
        updater.step(entries)
    live = np.zeros(arena.used, dtype=bool)
    for s in slots:
        live[s.offset: s.offset + s.size] = True
    assert not arena.data[~live].any(), "alignment padding must stay zero"
    return [s.data._data.astype(np.float64) for s in slots], updater, slots


def test_every_rule_module_has_a_fused_entry():
    assert {e[0].lower() for e in FUSED} >= {"sgd", "nag", "adam", "adamw", "rmsprop", "adagrad", "adadelta",
                                             "lamb", "lars", "signum", "ftrl", "nadam", "adabelief"}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_fused_float32_matches_reference(entry, setting):
    name, kwargs, _ = entry
    w0, grads = _data(dtype=np.float32)
    got, _, _ = _arena_run(_make(name, kwargs, setting), np.float32, w0, grads)
    for w, expected, start in zip(got, _expected(entry, w0, grads, setting), w0):
        np.testing.assert_allclose(w, expected, **FLOAT32)
        assert np.abs(expected - start).max() > 1e-3, "the run should move the weights"


@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_fused_float16_multi_precision_matches_reference(entry):
    name, kwargs, _ = entry
    w0, grads = _data(seed=1, dtype=np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, updater, slots = _arena_run(_make(name, kwargs, "full", multi_precision=True), np.float16, w0, grads)
    for w, slot, expected in zip(got, slots, _expected(entry, w0, grads, "full")):
        master = updater.get_state(slot).master
        np.testing.assert_allclose(master, expected, **FLOAT32)
        np.testing.assert_array_equal(w, master.astype(np.float16).astype(np.float64))


def test_nadam_schedule_follows_each_parameters_own_count():
    """A parameter left out of some updates (stale) keeps its own momentum schedule S_t in the fused
    update, as on the per-parameter path: the table row and the chunked twin advance it once per update."""
    rng = np.random.default_rng(5)
    shapes = [(4, 3), (5,)]
    w0 = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    schedule = [(0, 1), (0,), (0, 1), (1,), (0, 1)]  # which parameters each update touches
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in schedule]

    fused_opt = mx.optimizer.Nadam(learning_rate=0.05, schedule_decay=0.1, wd=1e-3)
    assert fused_rule(fused_opt, np.float32) is not None
    arena = Arena(mx.cpu(0), np.float32)
    slots = [arena.add(i, s) for i, s in enumerate(shapes)]
    for slot, w in zip(slots, w0):
        slot.data._data[...] = w
    updater = ArenaUpdater(fused_opt, arena, 0)

    ref_opt = mx.optimizer.Nadam(learning_rate=0.05, schedule_decay=0.1, wd=1e-3)
    ref_w = [w.copy() for w in w0]
    ref_states = [ref_opt.create_state(i, w) for i, w in enumerate(ref_w)]
    for which, step in zip(schedule, grads):
        for i in which:
            slots[i].grad._data[...] = step[i]
            ref_opt.update(i, ref_w[i], step[i], ref_states[i])
        updater.step([(i, slots[i]) for i in which])
    for slot, w in zip(slots, ref_w):
        np.testing.assert_allclose(slot.data._data, w, rtol=1e-6, atol=1e-7)
