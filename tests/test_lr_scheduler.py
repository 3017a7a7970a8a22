"""Tests of mx.lr_scheduler: hand-computed value tables, warm-up, errors, state round trip, properties.

The expected numbers are literals worked out by hand from the formulas in the module
docstrings (MXNet's boundary: a FactorScheduler decay applies once ``num_update > count + step``).
"""

from __future__ import annotations

import json
import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxlite.optimizer import Optimizer
from mxlite.optimizer import lr_scheduler as lrs


def _values(sched, updates):
    return [sched(n) for n in updates]


# -- FactorScheduler ---------------------------------------------------------------------

def test_factor_table_boundary_is_strictly_greater() -> None:
    sched = lrs.FactorScheduler(step=2, factor=0.5, base_lr=1)
    # n:           0    1    2    3    4     5     6      7      8      9
    assert _values(sched, range(10)) == [1, 1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.0625]
    assert sched.count == 8 and sched.base_lr == 0.0625


def test_factor_fresh_scheduler_catches_up_and_never_undoes() -> None:
    sched = lrs.FactorScheduler(step=3, factor=0.5, base_lr=2.0)
    assert sched(10) == 0.25          # 10 > 3, 6, 9: three decays at once
    assert sched.count == 9
    assert sched(1) == 0.25           # stateful: an earlier update does not restore the rate


def test_factor_stop_factor_lr_clamps_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    sched = lrs.FactorScheduler(step=1, factor=0.5, stop_factor_lr=0.2, base_lr=1)
    with caplog.at_level(logging.INFO, logger="mxlite.optimizer.lr_scheduler"):
        assert _values(sched, range(1, 7)) == [1, 0.5, 0.25, 0.2, 0.2, 0.2]
    messages = [r.getMessage() for r in caplog.records]
    assert "Update[2]: Change learning rate to 5.00000e-01" in messages
    assert "Update[4]: now learning rate arrived at 2.00000e-01, will not change in the future" in messages


def test_factor_clamp_can_raise_a_base_lr_below_the_floor() -> None:
    # MXNet quirk kept: the first decay of a rate already under stop_factor_lr lifts it to the floor.
    sched = lrs.FactorScheduler(step=1, factor=0.5, stop_factor_lr=0.1, base_lr=0.05)
    assert _values(sched, [1, 2]) == [0.05, 0.1]


def test_factor_linear_warmup_then_decays_counted_from_zero() -> None:
    sched = lrs.FactorScheduler(step=2, factor=0.5, base_lr=1, warmup_steps=4, warmup_begin_lr=0)
    # warm-up 0 + (1 - 0) * n / 4 for n < 4; at n = 4 the decay at 3 (4 > 0 + 2) is applied at once.
    assert _values(sched, range(7)) == [0, 0.25, 0.5, 0.75, 0.5, 0.25, 0.25]


def test_warmup_linear_nonzero_begin_and_constant() -> None:
    lin = lrs.FactorScheduler(step=10, base_lr=1, warmup_steps=2, warmup_begin_lr=0.5)
    assert _values(lin, [0, 1, 2]) == [0.5, 0.75, 1]
    const = lrs.FactorScheduler(step=10, base_lr=1, warmup_steps=3, warmup_begin_lr=0.1, warmup_mode="constant")
    assert _values(const, [0, 1, 2, 3]) == [0.1, 0.1, 0.1, 1]
    assert const.get_warmup_lr(2) == 0.1


def test_get_warmup_lr_outside_warmup_raises() -> None:
    sched = lrs.FactorScheduler(step=1, base_lr=1, warmup_steps=2)
    with pytest.raises(ValueError, match=r"num_update \(2\) must be below warmup_steps \(2\)"):
        sched.get_warmup_lr(2)


def test_warmup_target_is_fixed_at_construction_as_in_mxnet() -> None:
    sched = lrs.FactorScheduler(step=100, base_lr=1, warmup_steps=2, warmup_begin_lr=0)
    _optimizer(learning_rate=0.5, lr_scheduler=sched)        # sets sched.base_lr = 0.5
    assert sched.base_lr == 0.5
    assert _values(sched, [1, 2]) == [0.5, 0.5]             # warm-up still ramps to 1: 0 + 1 * 1 / 2


def test_optimizer_reads_the_schedule() -> None:
    sched = lrs.FactorScheduler(step=1, factor=0.5, base_lr=1)
    opt = _optimizer(learning_rate=4.0, lr_scheduler=sched)
    opt.num_update = 3
    assert opt.learning_rate == 1.0                          # 4 * 0.5 ** 2


# -- MultiFactorScheduler ----------------------------------------------------------------

def test_multifactor_table_and_state() -> None:
    sched = lrs.MultiFactorScheduler(step=[2, 5], factor=0.5, base_lr=1)
    # n:           0  1  2  3    4    5    6     7
    assert _values(sched, range(8)) == [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert (sched.cur_step_ind, sched.count) == (2, 5)


def test_multifactor_fresh_scheduler_catches_up() -> None:
    sched = lrs.MultiFactorScheduler(step=(1, 2, 3), factor=0.5, base_lr=1)
    assert sched(3) == 0.25                                  # 3 > 1 and 3 > 2, not 3 > 3
    assert (sched.cur_step_ind, sched.count) == (2, 2)
    assert sched(100) == 0.125 and sched(1) == 0.125


def test_multifactor_with_warmup() -> None:
    sched = lrs.MultiFactorScheduler(step=[3], factor=0.5, base_lr=1, warmup_steps=2, warmup_begin_lr=0.5)
    assert _values(sched, range(6)) == [0.5, 0.75, 1, 1, 0.5, 0.5]


# -- PolyScheduler / CosineScheduler -----------------------------------------------------

def test_poly_table() -> None:
    sched = lrs.PolyScheduler(max_update=4, base_lr=1, pwr=2)
    # (1 - n/4) ** 2
    assert _values(sched, range(7)) == [1, 0.5625, 0.25, 0.0625, 0, 0, 0]


def test_poly_final_lr_and_warmup() -> None:
    sched = lrs.PolyScheduler(max_update=4, base_lr=1.5, pwr=2, final_lr=0.5)
    assert _values(sched, range(6)) == [1.5, 1.0625, 0.75, 0.5625, 0.5, 0.5]
    warm = lrs.PolyScheduler(max_update=6, base_lr=1, pwr=1, warmup_steps=2, warmup_begin_lr=0)
    # warm-up n / 2, then 1 - (n - 2) / 4
    assert _values(warm, range(8)) == [0, 0.5, 1, 0.75, 0.5, 0.25, 0, 0]


def test_poly_past_max_update_on_a_fresh_scheduler_gives_final_lr() -> None:
    sched = lrs.PolyScheduler(max_update=10, base_lr=1, final_lr=0.25)
    assert sched(50) == 0.25 and sched.base_lr == 0.25


def test_poly_base_lr_assignment_does_not_move_the_decay_as_in_mxnet() -> None:
    sched = lrs.PolyScheduler(max_update=4, base_lr=1, pwr=1)
    _optimizer(learning_rate=8.0, lr_scheduler=sched)
    assert sched(2) == 0.5


def test_cosine_table() -> None:
    sched = lrs.CosineScheduler(max_update=4, base_lr=1)
    # (1 + cos(pi n / 4)) / 2 = 1, (2 + sqrt 2) / 4, 1/2, (2 - sqrt 2) / 4, 0
    expected = [1, 0.8535533905932737, 0.5, 0.14644660940672624, 0, 0]
    assert _values(sched, range(6)) == pytest.approx(expected, abs=1e-15)


def test_cosine_final_lr_and_warmup() -> None:
    sched = lrs.CosineScheduler(max_update=6, base_lr=3, final_lr=1, warmup_steps=2, warmup_begin_lr=1)
    # warm-up 1 + 2 n / 2; then 1 + 2 (1 + cos(pi (n - 2) / 4)) / 2
    expected = [1, 2, 3, 2.7071067811865475, 2, 1.2928932188134525, 1, 1]
    assert _values(sched, range(8)) == pytest.approx(expected, abs=1e-15)
    assert lrs.CosineScheduler(max_update=3, base_lr=1, final_lr=0.5)(99) == 0.5


# -- ExponentialDecay (SINGA) ------------------------------------------------------------

def test_exponential_decay_table() -> None:
    smooth = lrs.ExponentialDecay(init_value=1, decay_steps=2, decay_rate=0.25)
    # 0.25 ** (n / 2)
    assert _values(smooth, range(5)) == [1, 0.5, 0.25, 0.125, 0.0625]
    stairs = lrs.ExponentialDecay(init_value=2, decay_steps=2, decay_rate=0.25, staircase=True)
    # 2 * 0.25 ** (n // 2)
    assert _values(stairs, range(6)) == [2, 2, 0.5, 0.5, 0.125, 0.125]


def test_exponential_decay_base_lr_is_init_value() -> None:
    sched = lrs.ExponentialDecay(init_value=1, decay_steps=1, decay_rate=0.5)
    _optimizer(learning_rate=4.0, lr_scheduler=sched)
    assert sched.init_value == 4.0 and sched(2) == 1.0


# -- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "exc", "pattern"), [
    (lambda: lrs.FactorScheduler(step=1, base_lr=0.1, warmup_begin_lr=0.2), ValueError,
     r"base_lr \(0\.1\) has to be higher than warmup_begin_lr \(0\.2\)"),
    (lambda: lrs.FactorScheduler(step=1, warmup_steps=-1), ValueError, r"warmup_steps .* got -1"),
    (lambda: lrs.FactorScheduler(step=1, warmup_steps=2.5), TypeError, r"warmup_steps must be an integer, got 2\.5"),
    (lambda: lrs.FactorScheduler(step=1, warmup_mode="cosine"), ValueError, r"warmup_mode .* got 'cosine'"),
    (lambda: lrs.FactorScheduler(step=0), ValueError, r"step .* got 0"),
    (lambda: lrs.FactorScheduler(step=1, factor=1.5), ValueError, r"factor .* got 1\.5"),
    (lambda: lrs.MultiFactorScheduler(step=[]), ValueError, r"step .* got \[\]"),
    (lambda: lrs.MultiFactorScheduler(step=5), TypeError, r"step must be a list .* got 5"),
    (lambda: lrs.MultiFactorScheduler(step=[2, 2]), ValueError, r"step .* increasing .* got \[2, 2\]"),
    (lambda: lrs.MultiFactorScheduler(step=[0, 2]), ValueError, r"step .* got step\[0\] = 0"),
    (lambda: lrs.MultiFactorScheduler(step=[1], factor=2), ValueError, r"factor .* got 2"),
    (lambda: lrs.PolyScheduler(max_update=0), ValueError, r"max_update .* got 0"),
    (lambda: lrs.PolyScheduler(max_update=5.0), TypeError, r"max_update must be an integer, got 5\.0"),
    (lambda: lrs.PolyScheduler(max_update=5, warmup_steps=5), ValueError,
     r"max_update \(5\) must exceed warmup_steps \(5\)"),
    (lambda: lrs.PolyScheduler(max_update=5, pwr=-1), ValueError, r"pwr .* got -1"),
    (lambda: lrs.CosineScheduler(max_update=-3), ValueError, r"max_update .* got -3"),
    (lambda: lrs.CosineScheduler(max_update=2, warmup_steps=3), ValueError,
     r"max_update \(2\) must exceed warmup_steps \(3\)"),
    (lambda: lrs.ExponentialDecay(1, decay_steps=0, decay_rate=0.5), ValueError, r"decay_steps must be > 0, got 0"),
    (lambda: lrs.ExponentialDecay(1, decay_steps=1, decay_rate=-0.5), ValueError,
     r"decay_rate must be > 0, got -0\.5"),
])
def test_invalid_arguments_name_argument_and_value(make, exc, pattern) -> None:
    with pytest.raises(exc, match=pattern):
        make()


def test_base_class_is_abstract() -> None:
    with pytest.raises(NotImplementedError, match="LRScheduler must override"):
        lrs.LRScheduler()(1)


# -- state_dict --------------------------------------------------------------------------

# One registry drives the round-trip test: (constructor, kwargs).
_SCHEDULES = [
    (lrs.FactorScheduler, dict(step=3, factor=0.5, stop_factor_lr=0.01, base_lr=1, warmup_steps=2)),
    (lrs.MultiFactorScheduler, dict(step=[4, 7, 11], factor=0.3, base_lr=1, warmup_steps=3,
                                    warmup_mode="constant", warmup_begin_lr=0.1)),
    (lrs.PolyScheduler, dict(max_update=15, base_lr=1, pwr=3, final_lr=0.1, warmup_steps=2)),
    (lrs.CosineScheduler, dict(max_update=15, base_lr=1, final_lr=0.1, warmup_steps=2)),
    (lrs.ExponentialDecay, dict(init_value=1, decay_steps=4, decay_rate=0.5, staircase=True)),
]


@pytest.mark.parametrize(("klass", "kwargs"), _SCHEDULES, ids=[k.__name__ for k, _ in _SCHEDULES])
def test_state_dict_json_round_trip_continues_identically(klass, kwargs) -> None:
    reference = klass(**kwargs)
    _optimizer(learning_rate=0.5, lr_scheduler=reference)
    first = _values(reference, range(1, 9))
    state = json.loads(json.dumps(reference.state_dict()))
    assert state["type"] == klass.__name__

    resumed = klass(**kwargs)
    _optimizer(learning_rate=0.5, lr_scheduler=resumed)      # the Optimizer overwrites base_lr ...
    resumed.load_state_dict(state)                           # ... and the state restores the position
    assert resumed.state_dict() == reference.state_dict()
    assert _values(resumed, range(9, 20)) == _values(reference, range(9, 20))
    assert first  # the reference moved before saving


def test_state_dict_holds_position() -> None:
    sched = lrs.MultiFactorScheduler(step=[2, 5], factor=0.5, base_lr=1)
    sched(6)
    state = sched.state_dict()
    assert {k: state[k] for k in ("type", "base_lr", "cur_step_ind", "count", "step")} == {
        "type": "MultiFactorScheduler", "base_lr": 0.25, "cur_step_ind": 2, "count": 5, "step": [2, 5]}
    state["step"].append(9)                                  # a copy, not the live list
    assert sched.step == [2, 5]


def test_load_state_dict_rejects_other_class_and_keys() -> None:
    factor = lrs.FactorScheduler(step=2)
    with pytest.raises(ValueError, match="state_dict is for 'CosineScheduler'"):
        factor.load_state_dict(lrs.CosineScheduler(max_update=3).state_dict())
    state = factor.state_dict()
    del state["count"]
    state["extra"] = 1
    with pytest.raises(ValueError, match=r"missing \['count'\], unexpected \['extra'\]"):
        factor.load_state_dict(state)


# -- properties --------------------------------------------------------------------------

_decay_configs = st.integers(1, 300).flatmap(lambda max_update: st.tuples(
    st.just(max_update),
    st.integers(0, max_update - 1),                                   # warmup_steps
    st.floats(1e-6, 10.0),                                            # base_lr
    st.floats(0.0, 1.0),                                              # final_lr as a fraction of base_lr
    st.floats(0.0, 1.0),                                              # warmup_begin_lr as a fraction
    st.floats(0.1, 5.0),                                              # pwr
    st.sampled_from(["linear", "constant"]),
))


@settings(max_examples=200, deadline=None)
@given(config=_decay_configs, cosine=st.booleans())
def test_poly_and_cosine_stay_in_range_and_never_increase_after_warmup(config, cosine) -> None:
    max_update, warmup, base, final_frac, begin_frac, pwr, mode = config
    final, begin = base * final_frac, base * begin_frac
    common = dict(base_lr=base, final_lr=final, warmup_steps=warmup, warmup_begin_lr=begin, warmup_mode=mode)
    sched = (lrs.CosineScheduler(max_update, **common) if cosine
             else lrs.PolyScheduler(max_update, pwr=pwr, **common))
    values = _values(sched, range(max_update + 3))
    tol = 1e-12 * base
    for n, lr in enumerate(values):
        if n < warmup:
            assert begin - tol <= lr <= base + tol
        else:
            assert final - tol <= lr <= base + tol
    after = values[warmup:]
    assert after[0] == pytest.approx(base, rel=1e-12)
    assert all(b <= a + tol for a, b in zip(after, after[1:]))
    assert values[-1] == pytest.approx(final, rel=1e-9, abs=tol)
    if mode == "linear":
        assert all(a <= b + tol for a, b in zip(values[:warmup], values[1:warmup + 1]))


@settings(max_examples=200, deadline=None)
@given(step=st.integers(1, 20), factor=st.floats(0.05, 1.0), base=st.floats(1e-3, 10.0),
       n=st.integers(1, 200))
def test_factor_fresh_call_matches_stepwise_and_closed_form(step, factor, base, n) -> None:
    stepped = lrs.FactorScheduler(step=step, factor=factor, stop_factor_lr=0.0, base_lr=base)
    for k in range(1, n + 1):
        last = stepped(k)
    fresh = lrs.FactorScheduler(step=step, factor=factor, stop_factor_lr=0.0, base_lr=base)
    assert fresh(n) == last
    assert last == pytest.approx(base * factor ** ((n - 1) // step), rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(init=st.floats(1e-4, 10.0), steps=st.floats(0.5, 50.0), rate=st.floats(0.01, 1.0),
       n=st.integers(0, 500))
def test_exponential_decay_staircase_bounds_smooth(init, steps, rate, n) -> None:
    smooth = lrs.ExponentialDecay(init, steps, rate)(n)
    stairs = lrs.ExponentialDecay(init, steps, rate, staircase=True)(n)
    assert smooth <= stairs * (1 + 1e-12)                    # floor(x) <= x and rate <= 1
    assert stairs <= init * (1 + 1e-12)
    assert math.isfinite(smooth)


def _optimizer(**kwargs):
    """An Optimizer whose learning_rate differs from the scheduler's: MXNet 2.x warns and overrides."""
    with pytest.warns(UserWarning, match="overwritten by learning_rate"):
        return Optimizer(**kwargs)
