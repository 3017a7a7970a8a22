"""The CPU twins of the fused updates run each segment in chunks: results must be bit-identical to whole segments.

Every fused rule (the registries' fused-eligible entries, "full" setting: weight decay, rescale,
clipping, multipliers, a schedule) runs 5 updates over one arena of parameters larger than a chunk,
once with chunks of 7 elements (segments cut at odd places, a short last chunk) and once with one
chunk per segment; weights and every optimizer state must agree bit for bit, in float32 and in
float16 with float32 master weights. The rules with a hand-tuned chunk twin must also match their
own ``step`` (the generic twin) bit for bit, in both the "plain" and the "full" setting.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.optimizer import _fused
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.store import Arena
from tests.test_fused_rules import FUSED
from tests.test_optimizer_rules_a import _make, _rule_id

SHAPES = [(5, 13), (1,), (40,), (3, 3, 3)]


@pytest.fixture(autouse=True)
def numpy_twins(monkeypatch):
    """These tests are about the NumPy twins: CPU devices run the twins here, not the compiled kernels."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")


def make_updater(name, kwargs, setting, dtype, shapes, rng, multi_precision=False):
    """A registry rule's ArenaUpdater over one CPU arena of ``shapes``, weights uniform in [-1, 1): (updater, slots)."""
    opt = _make(name, kwargs, setting, multi_precision=multi_precision)
    arena = Arena(mx.cpu(0), dtype)
    slots = [arena.add(i, shape) for i, shape in enumerate(shapes)]
    for slot in slots:
        slot.data._data[...] = rng.uniform(-1, 1, slot.shape)
    return ArenaUpdater(opt, arena, 0), slots


def _run(name, kwargs, dtype, chunk, monkeypatch, multi_precision=False, setting="full"):
    monkeypatch.setattr(_fused, "TWIN_CHUNK", chunk)
    rng = np.random.default_rng(3)
    updater, slots = make_updater(name, kwargs, setting, dtype, SHAPES, rng, multi_precision)
    entries = list(enumerate(slots))
    for _ in range(5):
        for slot in slots:
            slot.grad._data[...] = rng.normal(size=slot.shape)
        updater.step(entries)
    states = [updater.get_state(s) for s in slots]
    return [s.data._data.copy() for s in slots], states


def _flat(state):
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [a for part in state for a in _flat(part)]
    if hasattr(state, "master"):
        return _flat(state.master) + _flat(state.state)
    return [np.array(state)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_chunked_twin_is_bit_identical_to_whole_segments(entry, dtype, monkeypatch):
    name, kwargs, _ = entry
    mp = dtype == "float16"
    w_chunked, s_chunked = _run(name, kwargs, np.dtype(dtype), 7, monkeypatch, mp)
    w_whole, s_whole = _run(name, kwargs, np.dtype(dtype), 10**9, monkeypatch, mp)
    for a, b in zip(w_chunked, w_whole):
        np.testing.assert_array_equal(a, b)
    for sa, sb in zip(s_chunked, s_whole):
        for a, b in zip(_flat(sa), _flat(sb), strict=True):
            np.testing.assert_array_equal(a, b)


TUNED = [e for e in FUSED if (rule := _fused.fused_rule(_make(e[0], e[1], "plain"), np.float32)) is not None
         and rule.chunk_twin is not None]


@pytest.mark.parametrize("setting", ["plain", "full"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("entry", TUNED, ids=[_rule_id(e) for e in TUNED])
def test_hand_tuned_chunk_twin_is_bit_identical_to_the_rules_step(entry, dtype, setting, monkeypatch):
    """A rule's hand-tuned chunk twin (``FusedRule.chunk_twin``) computes what its ``step`` computes, bit for bit.

    Only the rules that have one (the others' twin is their ``step`` itself)."""
    name, kwargs, _ = entry
    mp = dtype == "float16"
    fast = _run(name, kwargs, np.dtype(dtype), 7, monkeypatch, mp, setting)
    no_chunk_twins = {cls: dataclasses.replace(rule, chunk_twin=None) for cls, rule in _fused._RULES.items()}
    monkeypatch.setattr(_fused, "_RULES", no_chunk_twins)  # no hand-tuned twins: every rule runs its step
    generic = _run(name, kwargs, np.dtype(dtype), 7, monkeypatch, mp, setting)
    for a, b in zip(fast[0], generic[0]):
        assert a.tobytes() == b.tobytes()
    for sa, sb in zip(fast[1], generic[1]):
        for a, b in zip(_flat(sa), _flat(sb), strict=True):
            assert a.tobytes() == b.tobytes()
