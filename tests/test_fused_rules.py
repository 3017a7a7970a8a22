"""Every fused rule's arena update (the NumPy twin on CPU) against the float64 references.

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
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.optimizer._fused_rules import fused_rule
from mxlite.store import Arena
from tests.test_optimizer_rules_a import PARAMS, RULES, SETTINGS, _data, _expected, _make, _rule_id

FLOAT32 = {"rtol": 1e-5, "atol": 5e-6}

FUSED = [e for e in RULES if fused_rule(_make(e[0], e[1], "plain"), np.float32) is not None]


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
                                             "lamb", "lars", "signum", "ftrl"}


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
