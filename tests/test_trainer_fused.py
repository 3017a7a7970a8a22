"""The Trainer's fused path: one update per (arena, device mirror), equal to the per-parameter path."""

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.optimizer import _fused, adam

DEVICES = [mx.cpu(0), mx.cpu(1)]


def _run(optimizer, steps=8, dtype="float32", devices=DEVICES, grow_after=None, seed=0):
    mx.random.seed(seed)
    rng = np.random.default_rng(seed)
    net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu", dtype=dtype), mx.nn.Dense(5, dtype=dtype))
    net.initialize(mx.init.Xavier(), device=devices)
    net.collect_params()["1.bias"].lr_mult = 0.5
    net.collect_params()["0.weight"].wd_mult = 2.0
    trainer = mx.Trainer(net.collect_params(), optimizer)  # created before the arena exists
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for step in range(steps):
        if step == grow_after:
            net.add(mx.nn.Dense(5, in_units=5, dtype=dtype))  # arena grows: states must follow
            net.initialize(mx.init.Xavier(), device=devices)
            trainer = _rebuild(trainer, net)
        x = rng.normal(size=(8, 6)).astype(dtype)
        y = rng.integers(0, 5, size=8)
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(8)
    return net, trainer


def _rebuild(trainer, net):
    """Keep the optimizer (and the fused state) but train the grown parameter set."""
    trainer._params = list(dict.fromkeys([*trainer._params, *net.collect_params().values()]))
    trainer._optimizer.param_dict = dict(enumerate(trainer._params))
    return trainer


def _values(net):
    return {k: [d.asnumpy().astype(np.float64) for d in p.list_data()] for k, p in net.collect_params().items()}


def _per_parameter(opt_class):
    """A subclass with the same rule: not an exact fused class, so it takes the per-parameter path."""
    return type("PerParam" + opt_class.__name__, (opt_class,), {})


# Every fused rule in the forms its kernel implements, with weight decay and clipping.
FUSED = [
    ("SGD", dict(learning_rate=0.1, momentum=0.9, wd=1e-3, clip_gradient=0.5)),
    ("SGD", dict(learning_rate=0.1)),
    ("NAG", dict(learning_rate=0.1, momentum=0.9, wd=1e-3)),
    ("NAG", dict(learning_rate=0.1, momentum=0.0)),
    ("Adam", dict(learning_rate=0.01, wd=1e-3)),
    ("AdamW", dict(learning_rate=0.01, wd=0.1, clip_gradient=0.5)),
    ("AdamW", dict(learning_rate=0.01, wd=0.1, correct_bias=False)),
    ("RMSProp", dict(learning_rate=0.01, wd=1e-3)),
    ("RMSProp", dict(learning_rate=0.01, centered=True, momentum=0.9, clip_weights=0.3)),
    ("AdaGrad", dict(learning_rate=0.1, wd=1e-3)),
    ("AdaDelta", dict(learning_rate=1.0, rho=0.9, wd=1e-3)),
    ("Signum", dict(learning_rate=0.01, momentum=0.9, wd=1e-3, wd_lh=0.01)),
    ("Signum", dict(learning_rate=0.01, momentum=0.0, wd=1e-3, wd_lh=0.01)),
    ("Ftrl", dict(learning_rate=0.1, lamda1=0.01, beta=1.0, wd=1e-3)),
    ("LAMB", dict(learning_rate=0.01, wd=1e-2, lower_bound=0.1, upper_bound=10.0)),
    ("LAMB", dict(learning_rate=0.01, bias_correction=False)),
    ("LARS", dict(learning_rate=0.1, momentum=0.9, eta=0.01, wd=1e-3)),
    ("LARS", dict(learning_rate=0.1, momentum=0.0, eta=0.01)),
    ("Nadam", dict(learning_rate=0.01, wd=1e-3)),
    ("Nadam", dict(learning_rate=0.02, beta1=0.8, beta2=0.99, schedule_decay=0.1, clip_gradient=0.5)),
    ("AdaBelief", dict(learning_rate=0.01, wd=1e-3, clip_gradient=0.5)),
    ("AdaBelief", dict(learning_rate=0.01, beta1=0.8, epsilon=1e-4, correct_bias=False)),
]


@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_fused_equals_per_parameter_path(name, kwargs):
    opt_class = getattr(mx.optimizer, name)
    got, trainer = _run(opt_class(**kwargs))
    want, _ = _run(_per_parameter(opt_class)(**kwargs))
    assert trainer._arena_updaters and not trainer._states, "the fused path was not taken"
    for key, mirrors in _values(got).items():
        for m, w in zip(mirrors, _values(want)[key]):
            np.testing.assert_allclose(m, w, rtol=1e-5, atol=1e-6, err_msg=key)
        for m in mirrors[1:]:
            np.testing.assert_array_equal(m, mirrors[0])


def test_sgd_with_singa_nesterov_keeps_the_per_parameter_path():
    _, trainer = _run(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, nesterov=True), steps=1)
    assert not trainer._arena_updaters and trainer._states


def test_one_fused_update_per_arena_and_mirror(monkeypatch):
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")
    calls = []
    real = adam.adam_twin
    monkeypatch.setattr(adam, "adam_twin", lambda *a, **k: (calls.append(a[0]), real(*a, **k)))
    _run(mx.optimizer.Adam(learning_rate=0.01), steps=3)
    assert len(calls) == 3 * len(DEVICES)  # one per step per mirror: the model has one float32 arena
    assert all(len(plan.segments) == 4 for plan in calls)


@pytest.mark.parametrize("name", ["Signum", "LAMB"])
def test_generic_twin_runs_once_per_arena_and_mirror(monkeypatch, name):
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")
    calls = []
    real = _fused.step_segments
    monkeypatch.setattr(_fused, "step_segments", lambda *a, **k: (calls.append(a[1]), real(*a, **k)))
    _run(getattr(mx.optimizer, name)(learning_rate=0.01), steps=2)
    assert len(calls) == 2 * len(DEVICES) and all(len(plan.segments) == 4 for plan in calls)


@pytest.mark.parametrize("name, launches", [("Adam", 1), ("Signum", 1), ("LAMB", 2)])
def test_compiled_cpu_update_launches_once_per_arena_and_mirror(monkeypatch, name, launches):
    """CPU devices' default: the kernels built for the host, one launch (two for LAMB) per arena and mirror."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "compiled")
    calls = []
    real = _fused.Launcher.__call__
    monkeypatch.setattr(_fused.Launcher, "__call__",
                        lambda self, kernel, *a, **k: (calls.append((kernel, self.plan)), real(self, kernel, *a, **k)))
    _run(getattr(mx.optimizer, name)(learning_rate=0.01), steps=2)
    assert len(calls) == 2 * len(DEVICES) * launches and all(len(plan.segments) == 4 for _, plan in calls)


def test_state_follows_an_arena_that_grows_after_training_started():
    got, _ = _run(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9), steps=6, grow_after=3)
    want, _ = _run(_per_parameter(mx.optimizer.SGD)(learning_rate=0.1, momentum=0.9), steps=6, grow_after=3)
    for name, mirrors in _values(got).items():
        np.testing.assert_allclose(mirrors[0], _values(want)[name][0], rtol=1e-5, atol=1e-6, err_msg=name)


def test_float16_with_multi_precision_tracks_float32():
    half, _ = _run(mx.optimizer.SGD(learning_rate=0.05, momentum=0.9, multi_precision=True), dtype="float16")
    single, _ = _run(mx.optimizer.SGD(learning_rate=0.05, momentum=0.9), dtype="float32")
    for name, mirrors in _values(half).items():
        np.testing.assert_allclose(mirrors[0], _values(single)[name][0], rtol=0, atol=2e-2, err_msg=name)


def test_stale_parameters_are_left_out_of_the_fused_update():
    mx.random.seed(0)
    a = mx.nn.Dense(3, in_units=2)
    b = mx.nn.Dense(3, in_units=2)
    net = mx.nn.Sequential(a, b)
    net.initialize(device=mx.cpu(0))
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0})
    before = b.weight.data().asnumpy()
    with mx.autograd.record():
        loss = a(mx.ones((1, 2))).sum()  # b is not used: its gradient stays stale
    loss.backward()
    trainer.step(1, ignore_stale_grad=True)
    np.testing.assert_array_equal(b.weight.data().asnumpy(), before)
    assert not np.allclose(a.weight.data().asnumpy(), 0) and trainer._arena_updaters


def test_float64_keeps_the_per_parameter_path():
    _, trainer = _run(mx.optimizer.SGD(learning_rate=0.1), dtype="float64", steps=1)
    assert not trainer._arena_updaters and trainer._states
