"""The Optimizer base class and the Updater: counts, rates, multipliers, registry, hook contract,
multi-precision states and the safe state format."""

from __future__ import annotations

import io
import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer import MultiPrecisionState, Optimizer
from mxlite.optimizer import optimizer as optimizer_module
from mxlite.optimizer.lr_scheduler import FactorScheduler, MultiFactorScheduler


class _Recorder:
    """A schedule that records the num_update it is asked for and returns a fixed rate."""

    def __init__(self, base_lr: float = 0.1) -> None:
        self.base_lr = base_lr
        self.calls: list[int] = []

    def __call__(self, num_update: int) -> float:
        self.calls.append(num_update)
        return self.base_lr


class _Plain(Optimizer):
    """w −= lr·G, stateless: exercises the base class alone."""

    def step(self, index, weight, grad, state, count):
        weight -= self._get_lr(index) * self._effective_grad(np, grad, weight, self._get_wd(index))


@pytest.fixture
def scratch_registry():
    """Undo registrations made by a test."""
    saved = dict(optimizer_module._REGISTRY)
    yield
    optimizer_module._REGISTRY.clear()
    optimizer_module._REGISTRY.update(saved)


# -- update counts --------------------------------------------------------------------------------------
def test_count_starts_at_begin_num_update_and_is_incremented_before_the_rate_is_read():
    sched = _Recorder()
    opt = _Plain(learning_rate=0.1, lr_scheduler=sched, begin_num_update=5)
    assert opt.num_update == 5
    opt.update(0, np.ones(2), np.ones(2), None)
    assert opt._index_update_count == {0: 6}
    assert sched.calls == [6]  # the first update asks for begin_num_update + 1
    assert opt.num_update == 6


def test_num_update_is_the_largest_count_over_indices():
    sched = _Recorder()
    opt = _Plain(learning_rate=0.1, lr_scheduler=sched)
    for _ in range(3):
        opt.update(0, np.ones(1), np.ones(1), None)
    opt.update(1, np.ones(1), np.ones(1), None)
    assert opt._index_update_count == {0: 3, 1: 1}
    assert opt.num_update == 3
    assert sched.calls == [1, 2, 3, 3]  # index 1's first update still reads the rate at 3


def test_each_device_mirror_has_its_own_count_table():
    opt = _Plain(learning_rate=0.1)
    for slot in (0, 1):
        opt.set_current_mirror(slot)
        opt.update([0, 1], [np.ones(1), np.ones(1)], [np.ones(1), np.ones(1)], [None, None])
    opt.set_current_mirror(0)
    assert opt._all_index_update_counts == {0: {0: 1, 1: 1}, 1: {0: 1, 1: 1}}
    assert opt.num_update == 1


def test_count_drives_adam_bias_correction_from_begin_num_update():
    a = mx.optimizer.create("adam", learning_rate=0.1, begin_num_update=9)
    b = mx.optimizer.create("adam", learning_rate=0.1)
    wa, wb = np.ones(3), np.ones(3)
    sa, sb = a.create_state(0, wa), b.create_state(0, wb)
    for _ in range(9):  # bring b to count 9 with zero gradients (m = v = 0 stay, w stays)
        b.update(0, wb, np.zeros(3), sb)
    a.update(0, wa, np.full(3, 0.5), sa)
    b.update(0, wb, np.full(3, 0.5), sb)
    np.testing.assert_array_equal(wa, wb)


# -- learning rate ----------------------------------------------------------------------------------------
def test_set_learning_rate_with_a_scheduler_raises_user_warning():
    opt = _Plain(learning_rate=0.1, lr_scheduler=FactorScheduler(step=10, base_lr=0.1))
    with pytest.raises(UserWarning, match="LRScheduler"):
        opt.set_learning_rate(0.5)
    assert opt.learning_rate == 0.1


def test_set_learning_rate_without_a_scheduler():
    opt = _Plain(learning_rate=0.1)
    opt.set_learning_rate(0.25)
    assert opt.learning_rate == 0.25
    with pytest.raises(ValueError, match="learning_rate must be >= 0, got -1"):
        opt.set_learning_rate(-1)


def test_learning_rate_none_takes_the_schedulers_or_001():
    assert _Plain(learning_rate=None).learning_rate == 0.01
    sched = FactorScheduler(step=10, base_lr=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # None does not override the scheduler's base_lr
        opt = _Plain(learning_rate=None, lr_scheduler=sched)
    assert opt.learning_rate == 0.3 and sched.base_lr == 0.3


def test_learning_rate_overrides_the_schedulers_base_lr_with_a_warning():
    sched = FactorScheduler(step=10, base_lr=0.3)
    with pytest.warns(UserWarning, match="overwritten by learning_rate"):
        _Plain(learning_rate=0.5, lr_scheduler=sched)
    assert sched.base_lr == 0.5


# -- multipliers ---------------------------------------------------------------------------------------
def test_param_dict_multipliers_apply():
    params = {0: SimpleNamespace(lr_mult=0.5, wd_mult=2.0)}
    opt = _Plain(learning_rate=0.2, wd=0.1, param_dict=params)
    assert opt._get_lr(0) == pytest.approx(0.1) and opt._get_wd(0) == pytest.approx(0.2)
    assert opt._get_lr(1) == 0.2 and opt._get_wd(1) == 0.1


def test_set_lr_mult_and_set_wd_mult_take_precedence_over_param_dict():
    params = {0: SimpleNamespace(lr_mult=0.5, wd_mult=2.0), 1: SimpleNamespace(lr_mult=0.5, wd_mult=2.0)}
    opt = _Plain(learning_rate=0.2, wd=0.1, param_dict=params)
    opt.set_lr_mult({0: 3.0})
    opt.set_wd_mult({0: 0.0})
    assert opt._get_lr(0) == pytest.approx(0.6) and opt._get_wd(0) == 0.0
    assert opt._get_lr(1) == pytest.approx(0.1) and opt._get_wd(1) == pytest.approx(0.2)
    w = np.ones(2)
    opt.update(0, w, np.full(2, 0.5), None)
    np.testing.assert_allclose(w, 1 - 0.6 * 0.5)  # no weight decay on index 0


# -- registry ----------------------------------------------------------------------------------------
def test_create_is_case_insensitive_and_passes_instances_through():
    assert type(mx.optimizer.create("SGD")) is mx.optimizer.SGD
    assert type(mx.optimizer.create("AdamW", learning_rate=0.1)) is mx.optimizer.AdamW
    assert type(Optimizer.create_optimizer("nAg")) is mx.optimizer.NAG
    opt = mx.optimizer.SGD()
    assert mx.optimizer.create(opt) is opt
    with pytest.raises(ValueError, match="optimizer_params must be empty"):
        mx.optimizer.create(opt, learning_rate=0.1)


def test_create_unknown_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown optimizer 'nosuch'; registered: .*adam, adamw.*nag.*sgd"):
        mx.optimizer.create("nosuch")


def test_register_and_override_warning(scratch_registry):
    @mx.optimizer.register
    class MyRule(_Plain):
        pass

    assert "myrule" in mx.optimizer.registered()
    assert type(mx.optimizer.create("MYRULE", learning_rate=0.3)) is MyRule

    with pytest.warns(UserWarning, match="'myrule' is being overridden"):
        @Optimizer.register
        class myrule(_Plain):  # noqa: N801 - same lower-case name on purpose
            pass

    assert type(mx.optimizer.create("myrule")) is myrule


# -- the hook contract ---------------------------------------------------------------------------------
class _HookRule(Optimizer):
    """State through ``_create_state``: a momentum buffer."""

    def _create_state(self, index, weight):
        return np.zeros_like(weight)

    def step(self, index, weight, grad, state, count):
        state *= 0.5
        state += grad
        weight -= self._get_lr(index) * state


class _MXNetStyleRule(Optimizer):
    """The same rule written against MXNet's hook name ``create_state``."""

    def create_state(self, index, weight):
        return np.zeros_like(weight)

    step = _HookRule.step


class _SuperCallingRule(mx.optimizer.SGD):
    """An MXNet-style override that calls the parent's create_state and wraps its state."""

    def create_state(self, index, weight):
        return (super().create_state(index, weight), np.full_like(weight, 7.0))

    def step(self, index, weight, grad, state, count):
        super().step(index, weight, grad, state[0], count)


def test_both_hook_names_give_multi_precision_states():
    for cls in (_HookRule, _MXNetStyleRule):
        opt = cls(learning_rate=0.1, multi_precision=True)
        w16 = np.array([1.0, 2.0], np.float16)
        state = opt.create_state(0, w16)
        assert isinstance(state, MultiPrecisionState)
        assert state.master.dtype == np.float32 and state.state.dtype == np.float32
        np.testing.assert_array_equal(state.master, w16.astype(np.float32))
        assert state[0] is state.master and state[1] is state.state  # MXNet's indexing
        plain = opt.create_state(0, np.ones(2, np.float32))
        assert isinstance(plain, np.ndarray) and plain.dtype == np.float32
        assert opt.create_state_multi_precision(0, w16).master.dtype == np.float32


def test_a_hook_calling_super_create_state_does_not_recurse():
    opt = _SuperCallingRule(learning_rate=0.1, momentum=0.9, multi_precision=True)
    state = opt.create_state(0, np.ones(3, np.float16))
    assert isinstance(state, MultiPrecisionState)
    mom, extra = state.state
    assert mom.dtype == np.float32 and (extra == 7).all()
    w = np.ones(3, np.float16)
    opt.update(0, w, np.full(3, 0.5, np.float16), state)
    np.testing.assert_allclose(w, 1 - 0.1 * 0.5, rtol=1e-3)


def test_defining_both_hooks_is_rejected():
    with pytest.raises(TypeError, match="defines both create_state and _create_state"):
        class _Both(Optimizer):  # noqa: F841 - the class statement itself raises
            def create_state(self, index, weight):
                return None

            def _create_state(self, index, weight):
                return None


def test_base_step_is_abstract():
    with pytest.raises(NotImplementedError, match="must implement step"):
        Optimizer().update(0, np.ones(1), np.ones(1), None)


def test_trainer_uses_multi_precision_for_float16_parameters():
    p = mx.nn.Parameter("w", shape=(3,), dtype="float16")
    p.initialize(mx.init.Constant([1.0, 2.0, 3.0]), device=[mx.cpu(0)])
    trainer = mx.Trainer([p], "sgd", {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True})
    for _ in range(3):
        with mx.autograd.record():
            loss = (p.data() * mx.array([1.0, -1.0, 0.5], mx.cpu(0), "float16")).sum()
        loss.backward()
        trainer.step(1)
    # float16 SGD takes the fused arena path: its float32 master weights live in the arena updater
    (updater,) = trainer._arena_updaters.values()
    _, slot = p.arena_slots()[0]
    master = updater._states["master"][slot.offset: slot.offset + slot.size]
    g = np.array([1.0, -1.0, 0.5])
    w, mom = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    for _ in range(3):
        mom = 0.9 * mom - 0.1 * g
        w = w + mom
    np.testing.assert_allclose(master, w, rtol=1e-6)
    np.testing.assert_array_equal(p.data().asnumpy(), master.astype(np.float16))


def test_per_parameter_trainer_path_keeps_multi_precision_state():
    class PlainSGD(mx.optimizer.SGD):
        """A subclass: no fused kernel, so the Trainer's per-parameter path runs."""

    p = mx.nn.Parameter("w", shape=(3,), dtype="float16")
    p.initialize(mx.init.Constant([1.0, 2.0, 3.0]), device=[mx.cpu(0)])
    trainer = mx.Trainer([p], PlainSGD(learning_rate=0.1, momentum=0.9, multi_precision=True))
    with mx.autograd.record():
        loss = (p.data() * mx.array([1.0, -1.0, 0.5], mx.cpu(0), "float16")).sum()
    loss.backward()
    trainer.step(1)
    state = trainer._states[(0, 0)]
    assert isinstance(state, MultiPrecisionState)
    np.testing.assert_allclose(state.master, [0.9, 2.1, 2.95], rtol=1e-6)


# -- hyperparameter validation ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"learning_rate": -0.1}, "learning_rate must be >= 0, got -0.1"),
    ({"wd": -1.0}, "wd must be >= 0, got -1.0"),
    ({"clip_gradient": 0.0}, "clip_gradient must be > 0 or None, got 0.0"),
    ({"begin_num_update": -2}, "begin_num_update must be an integer >= 0, got -2"),
    ({"begin_num_update": 1.5}, "begin_num_update must be an integer >= 0, got 1.5"),
])
def test_base_arguments_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _Plain(**kwargs)


# -- the Updater ----------------------------------------------------------------------------------------
def test_updater_lists_equal_single_calls_and_accept_tensors():
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal(4), rng.standard_normal((2, 3))]
    grads = [[rng.standard_normal(w.shape) for w in w0] for _ in range(5)]
    a = mx.optimizer.get_updater(mx.optimizer.create("adam", learning_rate=0.1))
    b = mx.optimizer.get_updater(mx.optimizer.create("adam", learning_rate=0.1))
    wa = [w.copy() for w in w0]
    wb = [mx.array(w, mx.cpu(0), "float64") for w in w0]
    for step in grads:
        a([0, 1], step, wa)
        for i in (0, 1):
            b(i, mx.array(step[i], mx.cpu(0), "float64"), wb[i])
    for x, y in zip(wa, wb):
        np.testing.assert_array_equal(x, y.asnumpy())
    assert a.optimizer._all_index_update_counts == {0: {0: 5, 1: 5}}


def test_updater_rejects_lists_of_different_lengths():
    upd = mx.optimizer.get_updater(mx.optimizer.create("sgd"))
    with pytest.raises(ValueError, match="2 indices, 1 grads, 2 weights"):
        upd([0, 1], [np.ones(1)], [np.ones(1), np.ones(1)])


def test_updater_counts_per_device_id_and_restores_the_current_table():
    opt = mx.optimizer.create("sgd")
    upd = mx.optimizer.get_updater(opt)
    upd(0, mx.array([1.0], mx.cpu(1)), mx.array([1.0], mx.cpu(1)))
    assert opt._all_index_update_counts == {0: {}, 1: {0: 1}}
    assert opt._index_update_count is opt._all_index_update_counts[0]


def test_states_round_trip_keeps_structure_dtypes_and_keys():
    opt = mx.optimizer.create("adam", learning_rate=0.1, multi_precision=True)
    upd = mx.optimizer.get_updater(opt)
    upd.states = {
        3: (np.arange(4.0), np.ones((2, 2), np.float32)),
        "emb": MultiPrecisionState(np.ones(3, np.float32), (np.zeros(3, np.float32), np.ones(3, np.float32))),
        7: None,
        8: [np.array([1, 2], np.int64), None, 2.5],
        9: np.array(4.0),
    }
    blob = upd.get_states()
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        assert {"3/0", "3/1", "str:emb/0", "str:emb/1/0", "str:emb/1/1", "8/0", "9", "__manifest__"} \
            == set(archive.files)
    other = mx.optimizer.get_updater(mx.optimizer.create("adam"))
    other.set_states(blob)
    assert set(other.states) == {3, "emb", 7, 8, 9}
    assert isinstance(other.states["emb"], MultiPrecisionState) and isinstance(other.states[3], tuple)
    assert other.states[7] is None and isinstance(other.states[8], list) and other.states[8][1:] == [None, 2.5]
    for key in (3, "emb"):
        for got, want in zip(_leaves(other.states[key]), _leaves(upd.states[key])):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    assert other.states[9].shape == () and other.states_synced == dict.fromkeys(other.states, False)


def _leaves(state):
    if isinstance(state, (tuple, list)):
        return [leaf for s in state for leaf in _leaves(s)]
    return [state]


def test_set_states_without_optimizer_section_keeps_the_optimizer():
    opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9)
    upd = mx.optimizer.get_updater(opt)
    upd(0, np.ones(2), np.ones(2))
    blob = upd.get_states()
    fresh = mx.optimizer.create("sgd", learning_rate=0.7, momentum=0.9)
    upd2 = mx.optimizer.get_updater(fresh)
    upd2.set_states(blob)
    assert fresh.lr == 0.7 and fresh.num_update == 0
    np.testing.assert_array_equal(upd2.states[0], upd.states[0])


def test_optimizer_section_restores_values_counts_and_schedule():
    sched = MultiFactorScheduler(step=[2, 4], factor=0.5, base_lr=0.4)
    opt = mx.optimizer.create("sgd", learning_rate=0.4, momentum=0.9, wd=0.01, lr_scheduler=sched)
    opt.set_lr_mult({0: 2.0, "bias": 0.5})
    upd = mx.optimizer.get_updater(opt)
    for _ in range(3):
        upd(0, np.ones(2), np.ones(2))
    blob = upd.get_states(dump_optimizer=True)
    restored = mx.optimizer.create("sgd", learning_rate=0.4, lr_scheduler=MultiFactorScheduler(step=[2, 4],
                                                                                               base_lr=0.4))
    mx.optimizer.get_updater(restored).set_states(blob)
    assert (restored.momentum, restored.wd, restored.num_update) == (0.9, 0.01, 3)
    assert restored.lr_mult == {0: 2.0, "bias": 0.5}
    assert restored._all_index_update_counts == {0: {0: 3}}
    assert restored.lr_scheduler.cur_step_ind == sched.cur_step_ind == 1
    assert restored.lr_scheduler.factor == 0.5 and restored.learning_rate == opt.learning_rate


@pytest.mark.parametrize("make,match", [
    (lambda: mx.optimizer.create("adam"), "state is for 'SGD'"),
    (lambda: mx.optimizer.create("sgd", lr_scheduler=FactorScheduler(step=3, base_lr=0.1)),
     "saved with lr_scheduler None"),
])
def test_optimizer_section_must_fit_the_optimizer(make, match):
    upd = mx.optimizer.get_updater(mx.optimizer.create("sgd", momentum=0.9))
    upd(0, np.ones(2), np.ones(2))
    blob = upd.get_states(dump_optimizer=True)
    target = mx.optimizer.get_updater(make())
    before = dict(vars(target.optimizer))
    with pytest.raises(ValueError, match=match):
        target.set_states(blob)
    assert target.states == {} and vars(target.optimizer).keys() == before.keys()


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _manifest(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), np.uint8)


_GOOD_HEADER = {"format": "mxlite.updater.states", "version": 1}


@pytest.mark.parametrize("blob", [
    b"",
    b"garbage bytes, not an archive",
    b"PK\x03\x04 truncated zip",
    _npz(a=np.ones(2)),                                                   # no manifest
    _npz(__manifest__=np.frombuffer(b"{not json", np.uint8)),
    _npz(__manifest__=np.ones(3)),                                        # manifest not bytes
    _npz(__manifest__=_manifest({"format": "other", "version": 1, "states": []})),
    _npz(__manifest__=_manifest({**_GOOD_HEADER, "version": 99, "states": []})),
    _npz(__manifest__=_manifest({**_GOOD_HEADER, "states": [[0, {"array": "0"}]]})),  # array missing
    _npz(__manifest__=_manifest({**_GOOD_HEADER, "states": [[0, {"bogus": 1}]]})),
    _npz(__manifest__=_manifest({**_GOOD_HEADER, "states": [[[1], None]]})),        # bad index
    _npz(__manifest__=_manifest({**_GOOD_HEADER, "states": [[0, {"array": "__manifest__"}]]})),
    _npz(__manifest__=_manifest(_GOOD_HEADER), o=np.array([{"x": 1}], dtype=object)),  # pickled object
], ids=lambda b: f"{len(b)}B")
def test_garbage_state_bytes_raise_value_error_and_change_nothing(blob):
    upd = mx.optimizer.get_updater(mx.optimizer.create("sgd", momentum=0.9))
    upd(0, np.ones(2), np.ones(2))
    states = dict(upd.states)
    with pytest.raises(ValueError, match="cannot read optimizer states"):
        upd.set_states(blob)
    assert upd.states == states


def test_truncated_state_bytes_raise_value_error():
    upd = mx.optimizer.get_updater(mx.optimizer.create("adam"))
    upd(0, np.ones(4), np.ones(4))
    blob = upd.get_states(dump_optimizer=True)
    for cut in (10, len(blob) // 2, len(blob) - 5):
        with pytest.raises(ValueError, match="cannot read optimizer states"):
            upd.set_states(blob[:cut])


def test_set_states_rejects_non_bytes_and_get_states_unsupported_leaves():
    upd = mx.optimizer.get_updater(mx.optimizer.create("sgd"))
    with pytest.raises(TypeError, match="expects the bytes"):
        upd.set_states("not bytes")
    upd.states = {0: object()}
    with pytest.raises(TypeError, match="cannot be saved"):
        upd.get_states()
    upd.states = {(0, 1): None}
    with pytest.raises(TypeError, match="must be an int or a str"):
        upd.get_states()
