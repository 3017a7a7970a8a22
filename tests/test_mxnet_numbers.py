"""Where mxlite must give MXNet 2.x's numbers, with MXNet's formulas and values written out.

1. RMSProp, plain form: ``w −= lr·G/(sqrt(n) + ε)`` (MXNet 2.x's ``step`` and its C++
   ``RMSPropUpdateKernel``), through the Updater, the Trainer's CPU path and the fused GPU kernel;
   the centered form keeps ε inside the root.
2. ``split_data(..., even_split=False)``: the remainder goes to the first slices, as
   ``numpy.array_split`` (MXNet's ``test_split_data`` mirrored).
3. ``Optimizer(lr_scheduler=s)`` without a learning rate keeps ``s.base_lr`` (MXNet's
   ``test_learning_rate`` mirrored).
4. dist_sync sums over workers by default (the multi-process values are in ``tests/test_dist.py``:
   ``test_sum_over_workers_is_mxnets_default_and_average_is_an_option`` and
   ``test_num_workers_and_rank_are_right_from_construction``); here the single-process side.
5. Optimizers called directly with mxlite Tensors (MXNet's NDArrays): ``create_state``,
   ``create_state_multi_precision``, ``update`` and ``update_multi_precision``, as MXNet's
   ``compare_optimizer`` calls them in test_optimizer.py (test_sgd, test_nag, test_lars, test_lamb,
   test_adam, test_adamW, test_rms, test_adagrad, test_adadelta, test_ftrl, test_signum,
   test_signsgd).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer.lr_scheduler import FactorScheduler

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs a GPU (real, or MXLITE_EMULATE_GPUS)")


# -- 1. RMSProp -----------------------------------------------------------------------------------------
# lr 0.01, ρ 0.9, ε 1e-8, w = 1, gradients 1e-4 then 3e-4 (n stays below ε: the case where 1.x and 2.x differ).
#   step 1: n = 0.1·1e-8 = 1e-9;            w = 1 − 0.01·1e-4/(√1e-9 + 1e-8)        = 0.9683872202370383
#   step 2: n = 0.9·1e-9 + 0.1·9e-8 = 9.9e-9; w −= 0.01·3e-4/(√9.9e-9 + 1e-8)       = 0.9382391157777659
# MXNet 1.x's √(n + ε) would give 0.9904653741075441 after step 1: a step 3.3 times smaller.
RMS_GRADS = [1e-4, 3e-4]
RMS_PLAIN = [0.9683872202370383, 0.9382391157777659]


def test_rmsprop_plain_is_mxnet2s_formula_float64():
    opt = mx.optimizer.RMSProp(learning_rate=0.01, rho=0.9, epsilon=1e-8)
    updater = mx.optimizer.get_updater(opt)
    w = np.ones(3, np.float64)
    for g, want in zip(RMS_GRADS, RMS_PLAIN):
        updater(0, np.full(3, g), w)
        np.testing.assert_allclose(w, want, rtol=1e-15)
    assert abs(1.0 - RMS_PLAIN[0]) / abs(1.0 - 0.9904653741075441) > 3.3  # how far 1.x's form was


def test_rmsprop_centered_keeps_epsilon_inside_the_root():
    # ḡ = 0.1·G, n = 0.1·G², Δ = −lr·G/√(n − ḡ² + ε) = −0.01·1e-4/√(9e-10 + 1e-8); w = 1 + Δ.
    opt = mx.optimizer.RMSProp(learning_rate=0.01, rho=0.9, epsilon=1e-8, centered=True)
    w = np.ones(2, np.float64)
    mx.optimizer.get_updater(opt)(0, np.full(2, 1e-4), w)
    np.testing.assert_allclose(w, 1.0 - 0.01 * 1e-4 / math.sqrt(9e-10 + 1e-8), rtol=1e-14)
    np.testing.assert_allclose(w, 0.9904217371477885, rtol=1e-14)


def _trainer_rmsprop(device, centered=False):
    layer = mx.nn.Dense(4, in_units=1, use_bias=False)
    layer.initialize(mx.init.One(), device=device)
    trainer = mx.Trainer(layer.collect_params(), "rmsprop", {"learning_rate": 0.01, "centered": centered})
    x = mx.array(np.ones((1, 1), np.float32), device=device)
    seen = []
    for g in RMS_GRADS:
        with mx.autograd.record():
            loss = (layer(x) * g).sum()  # d loss / d w = g for every weight
        loss.backward()
        trainer.step(1)
        seen.append(layer.weight.data().asnumpy().copy())
    return seen


def test_rmsprop_plain_in_the_trainer_on_the_cpu():
    for got, want in zip(_trainer_rmsprop(mx.cpu(0)), RMS_PLAIN):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@gpu
@needs_gpu
def test_rmsprop_plain_fused_kernel_is_mxnet2s_formula():
    """The fused ``rmsprop_update`` kernel (real GPU, or the emulated one) gives 2.x's values."""
    for got, want in zip(_trainer_rmsprop(mx.gpu(0)), RMS_PLAIN):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    centered = _trainer_rmsprop(mx.gpu(0), centered=True)
    np.testing.assert_allclose(centered[0], 0.9904217371477885, rtol=1e-6)


# -- 2. split_data ------------------------------------------------------------------------------------------
def test_uneven_split_puts_the_remainder_first():
    x = np.arange(33)
    parts = mx.split_data(x, 4, even_split=False)
    assert [len(p) for p in parts] == [9, 8, 8, 8]  # MXNet 2.x and numpy.array_split
    for part, want in zip(parts, np.array_split(x, 4)):
        np.testing.assert_array_equal(part, want)
    assert mx.parallel.slice_sizes(10, 3, even_split=False) == [4, 3, 3]
    assert mx.parallel.slice_sizes(7, 5, even_split=False) == [2, 2, 1, 1, 1]


@pytest.mark.parametrize("num_slice,axis,even", [(8, 0, True), (3, 1, True), (4, 1, False), (15, 1, False)])
def test_split_data_mirrors_mxnets_test_split_data(num_slice, axis, even):
    x = mx.random.uniform(shape=(128, 33, 64))
    parts = mx.split_data(x, num_slice, batch_axis=axis, even_split=even)
    assert len(parts) == num_slice
    want = np.array_split(x.asnumpy(), num_slice, axis=axis)
    assert [p.shape for p in parts] == [w.shape for w in want]
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts], axis=axis), x.asnumpy())


def test_split_data_rejects_an_uneven_even_split():
    with pytest.raises(ValueError, match="evenly split"):
        mx.split_data(mx.random.uniform(shape=(128, 33, 64)), 4, batch_axis=1)


def test_split_and_load_gives_each_device_numpys_slices():
    x = np.arange(10.0)
    a, b, c = mx.split_and_load(x, [mx.cpu(0), mx.cpu(1), mx.cpu(2)], even_split=False)
    assert (a.asnumpy().tolist(), b.asnumpy().tolist(), c.asnumpy().tolist()) == (
        [0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0])


# -- 3. the scheduler's base_lr -------------------------------------------------------------------------------
def test_learning_rate_mirrors_mxnets_test_learning_rate():
    o1 = mx.optimizer.Optimizer(learning_rate=0.01)
    o1.set_learning_rate(0.2)
    assert o1.learning_rate == 0.2

    lr_s = FactorScheduler(step=1)
    with pytest.warns(UserWarning, match="overwritten"):
        o2 = mx.optimizer.Optimizer(lr_scheduler=lr_s, learning_rate=0.3)
    assert o2.learning_rate == 0.3
    o2.lr_scheduler.base_lr = 0.4
    assert o2.learning_rate == 0.4

    lr_s = FactorScheduler(step=1, base_lr=1024)
    o3 = mx.optimizer.Optimizer(lr_scheduler=lr_s)
    assert o3.learning_rate == 1024 and lr_s.base_lr == 1024
    assert mx.optimizer.Optimizer().learning_rate == 0.01  # no rate, no scheduler: MXNet's 0.01


def test_learning_rate_expect_user_warning():
    lr_s = FactorScheduler(step=1)
    with pytest.warns(UserWarning):
        o = mx.optimizer.Optimizer(lr_scheduler=lr_s, learning_rate=0.3)
    with pytest.raises(UserWarning):
        o.set_learning_rate(0.5)


def test_a_rule_keeps_its_own_default_rate_over_the_scheduler_as_mxnet():
    # MXNet's SGD defaults learning_rate=0.1 (not None), which overrides the scheduler's base_lr.
    sched = FactorScheduler(step=1, base_lr=1024)
    with pytest.warns(UserWarning, match="overwritten"):
        opt = mx.optimizer.SGD(lr_scheduler=sched)
    assert opt.learning_rate == 0.1


def test_a_scheduled_optimizer_without_rate_saves_and_loads():
    opt = mx.optimizer.Optimizer(lr_scheduler=FactorScheduler(step=2, factor=0.5, base_lr=3.0))
    again = mx.optimizer.Optimizer(lr_scheduler=FactorScheduler(step=2, factor=0.5, base_lr=3.0))
    again.load_state_dict(opt.state_dict())
    assert again.learning_rate == 3.0 and again.lr is None


# -- 4. dist_sync: one process -----------------------------------------------------------------------------
def test_average_over_workers_changes_nothing_in_one_process():
    results = []
    for average in (False, True):
        layer = mx.nn.Dense(1, in_units=1, use_bias=False, dtype="float64")
        layer.initialize(mx.init.One(), device=[mx.cpu(0), mx.cpu(1)])
        trainer = mx.Trainer(layer.collect_params(), "sgd", {"learning_rate": 0.1},
                             average_over_workers=average)
        assert trainer.num_workers == 1
        xs = mx.split_and_load(np.array([[1.0], [3.0]]), [mx.cpu(0), mx.cpu(1)])
        with mx.autograd.record():
            losses = [layer(x).sum() for x in xs]
        mx.autograd.backward(losses)
        trainer.step(2)
        results.append(float(layer.weight.data().asnumpy()[0, 0]))
    assert results == [pytest.approx(1.0 - 0.1 * 4.0 / 2, rel=1e-15)] * 2  # the devices' sum over the batch


def test_num_workers_is_one_for_a_deferred_model_without_dist():
    net = mx.nn.Dense(3)  # deferred
    net.initialize(device=mx.cpu(0))
    assert mx.Trainer(net.collect_params(), "sgd").num_workers == 1


# -- 5. optimizers called with Tensors --------------------------------------------------------------------
def _as_numpy(state):
    if isinstance(state, tuple):
        return tuple(_as_numpy(s) for s in state)
    return state.asnumpy() if isinstance(state, mx.Tensor) else state


def _compare_states(s1, s2, rtol=1e-7, atol=0.0):
    """``s1`` holds NumPy arrays (the raw path), ``s2`` Tensors (MXNet's compare_ndarray_tuple)."""
    if s1 is None or s2 is None:
        assert s1 is None and s2 is None
        return
    if isinstance(s1, tuple):
        assert isinstance(s2, tuple) and len(s1) == len(s2) and type(s1) is type(s2)
        for a, b in zip(s1, s2):
            _compare_states(a, b, rtol, atol)
        return
    assert isinstance(s2, mx.Tensor), f"a state made from a Tensor holds {type(s2).__name__}"
    np.testing.assert_allclose(s2.asnumpy(), s1, rtol=rtol, atol=atol)


def compare_optimizer(opt1, opt2, shapes, dtype, device=None):
    """MXNet's ``compare_optimizer`` (ntensors form): ``opt2`` is called with Tensors, ``opt1`` with the
    same values as NumPy arrays (mxlite's raw path, checked against float64 references elsewhere)."""
    device = device or mx.cpu(0)
    w2 = [mx.random.uniform(shape=s, dtype=dtype, device=device) for s in shapes]
    g2 = [mx.random.uniform(shape=s, dtype=dtype, device=device) for s in shapes]
    w1, g1 = [w.asnumpy() for w in w2], [g.asnumpy() for g in g2]
    state1 = [opt1.create_state_multi_precision(i, w1[i]) for i in range(len(shapes))]
    state2 = [opt2.create_state_multi_precision(i, w2[i]) for i in range(len(shapes))]
    for s1, s2 in zip(state1, state2):
        _compare_states(s1, s2)
    for _ in range(2):
        opt1.update_multi_precision(list(range(len(shapes))), w1, g1, state1)
        opt2.update_multi_precision(list(range(len(shapes))), w2, g2, state2)
    for s1, s2 in zip(state1, state2):
        _compare_states(s1, s2)
    for a, b in zip(w1, w2):
        assert isinstance(b, mx.Tensor) and b.dtype == np.dtype(dtype) and b.device == device
        np.testing.assert_array_equal(b.asnumpy(), a)


SHAPES = [(3, 4, 5), (10, 4), (7,)]
RULES = [
    ("SGD", [{}, {"momentum": 0.9}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("NAG", [{}, {"momentum": 0.9}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("LARS", [{}, {"eta": 0.01}], [{"momentum": 0.0}, {"momentum": 0.9}], [{}, {"rescale_grad": 0.14}],
     [{}, {"wd": 0.03}]),
    ("LAMB", [{}, {"beta1": 0.5}], [{"bias_correction": False}, {"bias_correction": True}],
     [{}, {"lower_bound": 1e-3, "upper_bound": 10}], [{}, {"wd": 0.03}]),
    ("Adam", [{}, {"beta1": 0.5}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("AdamW", [{}, {"beta2": 0.8}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("RMSProp", [{}, {"centered": True}], [{}, {"clip_weights": 0.6}], [{}, {"rescale_grad": 0.14}],
     [{}, {"wd": 0.03}]),
    ("AdaGrad", [{}, {"epsilon": 1e-5}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}],
     [{}, {"wd": 0.03}]),
    ("AdaDelta", [{}, {"rho": 0.8}], [{}, {"clip_gradient": 0.4}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("Ftrl", [{}, {"lamda1": 0.1}], [{}, {"beta": 0.5}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
    ("Signum", [{}, {"momentum": 0.0}], [{}, {"wd_lh": 0.01}], [{}, {"rescale_grad": 0.14}], [{}, {"wd": 0.03}]),
]


@pytest.mark.parametrize("name,options", [(r[0], r[1:]) for r in RULES], ids=[r[0] for r in RULES])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_optimizers_take_tensors_as_mxnets_compare_optimizer_calls_them(name, options, dtype):
    klass = getattr(mx.optimizer, name)
    for combo in itertools.product(*options):
        kwargs = {k: v for option in combo for k, v in option.items()}
        if dtype == "float16":
            kwargs["multi_precision"] = True  # as MXNet's tests: float16 only with master weights
        compare_optimizer(klass(use_fused_step=False, **kwargs), klass(use_fused_step=True, **kwargs),
                          SHAPES, dtype)


def test_update_on_tensors_is_sgds_formula():
    # SGD, lr 0.1, momentum 0.9, wd 0.1: G = 0.5 + 0.1·1 = 0.6; mom = −0.1·0.6 = −0.06; w = 0.94; then
    # G = 0.5 + 0.1·0.94 = 0.594; mom = 0.9·(−0.06) − 0.0594 = −0.1134; w = 0.8266.
    opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.1)
    w, g = mx.ones((2, 2), dtype="float64"), mx.full((2, 2), 0.5, dtype="float64")
    state = opt.create_state(0, w)
    assert isinstance(state, mx.Tensor) and state.shape == (2, 2)
    opt.update(0, w, g, state)
    np.testing.assert_allclose(w.asnumpy(), 0.94, rtol=1e-15)
    opt.update([0], [w], [g], [state])
    np.testing.assert_allclose(state.asnumpy(), -0.1134, rtol=1e-14)
    np.testing.assert_allclose(w.asnumpy(), 0.8266, rtol=1e-14)
    assert g.asnumpy().tolist() == [[0.5, 0.5], [0.5, 0.5]]  # the gradient is never written


def test_multi_precision_state_of_a_float16_tensor():
    opt = mx.optimizer.Adam(learning_rate=0.1, multi_precision=True)
    w = mx.ones((3,), dtype="float16")
    state = opt.create_state_multi_precision(0, w)
    master, (m, v) = state
    assert isinstance(state, mx.optimizer.MultiPrecisionState)
    assert all(isinstance(t, mx.Tensor) and t.dtype == np.float32 for t in (master, m, v))
    opt.update_multi_precision(0, w, mx.full((3,), 0.25, dtype="float16"), state)
    # Adam's first step moves every weight by lr (bias-corrected m/√v = 1): 1 − 0.1 = 0.9.
    np.testing.assert_allclose(master.asnumpy(), 0.9, rtol=1e-6)
    assert w.dtype == np.float16 and w.asnumpy().tolist() == [np.float16(0.9)] * 3


def test_updater_and_direct_calls_agree_on_tensors():
    w_direct, w_updater = mx.ones((4,)), mx.ones((4,))
    g = mx.full((4,), 0.3)
    direct = mx.optimizer.RMSProp(learning_rate=0.01)
    state = direct.create_state(0, w_direct)
    updater = mx.optimizer.get_updater(mx.optimizer.RMSProp(learning_rate=0.01))
    for _ in range(3):
        direct.update(0, w_direct, g, state)
        updater(0, g, w_updater)
    np.testing.assert_array_equal(w_direct.asnumpy(), w_updater.asnumpy())


@gpu
@needs_gpu
def test_optimizers_take_gpu_tensors():
    for name in ("SGD", "Adam", "RMSProp"):
        klass = getattr(mx.optimizer, name)
        compare_optimizer(klass(learning_rate=0.05), klass(learning_rate=0.05), SHAPES[:2], "float32",
                          device=mx.gpu(0))


@gpu
@pytest.mark.requires_gpus(2)
def test_optimizer_state_lives_on_the_weights_gpu():
    opt = mx.optimizer.Adam()
    state = opt.create_state(0, mx.ones((3,), device=mx.gpu(1)))  # not the default gpu(0)
    assert all(s.device == mx.gpu(1) for s in state)


# -- utilities -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check_isfinite", [True, False])
def test_global_norm_clip(check_isfinite):  # MXNet: test_gluon.py test_global_norm_clip
    import warnings

    x1, x2 = mx.ones((3, 3)), mx.ones((4, 4), device=mx.cpu(1))
    norm = mx.gluon.utils.clip_global_norm([x1, x2], 1.0, check_isfinite=check_isfinite)
    assert norm == 5.0  # sqrt(9 + 16)
    np.testing.assert_allclose(x1.asnumpy(), np.ones((3, 3)) / 5, rtol=1e-6)
    np.testing.assert_allclose(x2.asnumpy(), np.ones((4, 4)) / 5, rtol=1e-6)
    x3 = mx.array([1.0, 2.0, float("nan")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mx.gluon.utils.clip_global_norm([x1, x3], 2.0, check_isfinite=check_isfinite)
    assert len(caught) == check_isfinite
    small = mx.array([0.3, 0.4])
    assert mx.gluon.utils.clip_global_norm([small], 1.0) == pytest.approx(0.5)
    assert small.asnumpy().tolist() == pytest.approx([0.3, 0.4])  # below max_norm: unchanged
    with pytest.raises(ValueError, match="max_norm"):
        mx.gluon.utils.clip_global_norm([small], 0)


def test_kvstore_type_aliases():
    for alias, kind in (("local_allreduce_cpu", "local"), ("local_update_cpu", "local"),
                        ("local_allreduce_device", "device")):
        kv = mx.kv.create(alias)
        assert (kv.type, kv.kind, kv.rank, kv.num_workers) == (alias, kind, 0, 1)  # MXNet reports the alias
        kv.init(3, mx.ones((2,)))
        kv.push(3, [mx.ones((2,)), mx.ones((2,), device=mx.cpu(1))])
        out = mx.zeros((2,))
        kv.pull(3, out=out)
        assert out.asnumpy().tolist() == [2.0, 2.0]
    net = mx.nn.Dense(1, in_units=1)
    net.initialize(device=[mx.cpu(0), mx.cpu(1)])
    trainer = mx.Trainer(net.collect_params(), "sgd", kvstore="local_allreduce_device")
    assert trainer.num_workers == 1


def test_random_seed_takes_ctx():
    mx.random.seed(7, ctx=mx.cpu(0))
    a = mx.random.uniform(shape=(3,)).asnumpy()
    mx.random.seed(7, device=mx.cpu(0))
    assert mx.random.uniform(shape=(3,)).asnumpy().tolist() == a.tolist()
    mx.random.seed(7, ctx="all")
    with pytest.raises(ValueError, match="give the device once"):
        mx.random.seed(7, mx.cpu(0), ctx=mx.cpu(1))


def test_autograd_modes_are_mxnets():
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record():
        assert mx.autograd.is_recording() and mx.autograd.is_training()
        with mx.autograd.pause():
            assert not mx.autograd.is_recording()
        with mx.autograd.predict_mode():
            assert not mx.autograd.is_training()
    with mx.autograd.train_mode():
        assert mx.autograd.is_training()
