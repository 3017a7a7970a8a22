"""Data parallelism: batch splitting rules and 1-vs-N-device equivalence of training."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mxlite as mx


# -- splitting --------------------------------------------------------------------------------
def test_even_split_sizes_and_contents():
    x = np.arange(12).reshape(6, 2)
    parts = mx.split_data(x, 3)
    assert [p.shape[0] for p in parts] == [2, 2, 2]
    np.testing.assert_array_equal(np.concatenate(parts), x)


def test_uneven_split_gives_remainder_to_first_as_mxnet():
    assert mx.parallel.slice_sizes(10, 3, even_split=False) == [4, 3, 3]  # numpy.array_split's sizes


def test_even_split_rejects_indivisible_batch():
    with pytest.raises(ValueError, match="evenly split"):
        mx.split_data(np.zeros((10, 2)), 3)


def test_workload_split_rounds_and_gives_remainder_to_last():
    # round(1*10/4)=2 (banker's rounding of 2.5), round(1*10/4)=2, remainder 6
    assert mx.parallel.slice_sizes(10, 3, workload=[1, 1, 2]) == [2, 2, 6]
    assert mx.parallel.slice_sizes(12, 2, workload=[1, 2]) == [4, 8]


def test_workload_split_rejects_empty_slice():
    with pytest.raises(ValueError, match="at least one sample"):
        mx.parallel.slice_sizes(4, 3, workload=[1, 1, 10])


def test_workload_length_must_match_devices():
    with pytest.raises(ValueError, match="3 entries for 2 devices"):
        mx.parallel.slice_sizes(10, 2, workload=[1, 1, 1])


@given(batch=st.integers(1, 500), weights=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=6))
def test_workload_sizes_property(batch, weights):
    try:
        sizes = mx.parallel.slice_sizes(batch, len(weights), workload=weights)
    except ValueError as err:
        assert "at least one sample" in str(err)
        return
    assert sum(sizes) == batch and all(s > 0 for s in sizes)
    total = sum(weights)
    for w, s in zip(weights[:-1], sizes[:-1]):
        assert s == round(w * batch / total)


def test_split_and_load_places_slices_on_devices():
    devs = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    parts = mx.split_and_load(np.arange(9, dtype=np.float32), devs)
    assert [p.device for p in parts] == devs
    np.testing.assert_array_equal(parts[2].asnumpy(), [6, 7, 8])


def test_split_and_load_along_axis_1():
    parts = mx.split_and_load(np.zeros((3, 4)), [mx.cpu(0), mx.cpu(1)], batch_axis=1)
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]


def test_gluon_utils_spelling():
    assert mx.gluon.utils.split_and_load is mx.split_and_load


# -- equivalence of 1, 2 and 3 devices ---------------------------------------------------------
def _train(devices, optimizer, opt_params, workload=None, steps=20, batch=12, check_mirrors=False):
    mx.random.seed(42)
    rng = np.random.default_rng(7)
    x_all = rng.normal(size=(max(steps, 1), batch, 5))
    y_all = rng.integers(0, 3, size=(max(steps, 1), batch))
    net = mx.nn.Sequential(mx.nn.Dense(8, activation="tanh", dtype="float64"),
                           mx.nn.Dense(3, dtype="float64"))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), optimizer, opt_params)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    net(mx.array(x_all[0][:1], devices[0]))  # finishes the deferred initialisation
    for step in range(steps):
        even = workload is None
        xs = mx.split_and_load(x_all[step], devices, even_split=even, workload=workload)
        ys = mx.split_and_load(y_all[step], devices, even_split=even, workload=workload)
        with mx.autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(batch)
        if check_mirrors:
            for name, p in net.collect_params().items():
                first = p.list_data()[0].asnumpy()
                for mirror in p.list_data()[1:]:
                    np.testing.assert_array_equal(mirror.asnumpy(), first, err_msg=f"{name} after step {step}")
    return {k: p.data(devices[0]).asnumpy() for k, p in net.collect_params().items()}


@pytest.mark.parametrize("optimizer,params", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}),
    ("adam", {"learning_rate": 0.01}),
])
@pytest.mark.parametrize("devices,workload", [
    ([mx.cpu(0), mx.cpu(1)], None),
    ([mx.cpu(0), mx.cpu(1), mx.cpu(2)], None),
    ([mx.cpu(0), mx.cpu(1)], [1, 2]),
    ([mx.cpu(0), mx.cpu(1), mx.cpu(2)], [3, 1, 2]),
])
def test_n_devices_equal_one_device(optimizer, params, devices, workload):
    reference = _train([mx.cpu(0)], optimizer, params)
    got = _train(devices, optimizer, params, workload=workload)
    for name in reference:
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-6, atol=1e-9, err_msg=name)
    # and the parameters did move
    initial = _train([mx.cpu(0)], optimizer, params, steps=0)
    assert any(np.abs(reference[k] - initial[k]).max() > 1e-3 for k in reference)


def test_mirrors_identical_after_every_step():
    _train([mx.cpu(0), mx.cpu(1), mx.cpu(2)], "adam", {"learning_rate": 0.01}, check_mirrors=True)


# -- executor ----------------------------------------------------------------------------------
def test_data_parallel_executor_matches_manual_loop():
    devices = [mx.cpu(0), mx.cpu(1)]
    mx.random.seed(3)
    net = mx.nn.Sequential(mx.nn.Dense(6, activation="relu", dtype="float64"), mx.nn.Dense(3, dtype="float64"))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    acc = mx.metric.Accuracy()
    executor = mx.DataParallelExecutor(net, mx.loss.SoftmaxCrossEntropyLoss(), devices, trainer=trainer,
                                       workload=[1, 3], metric=acc)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)), rng.integers(0, 3, size=8)
    total = executor.forward_backward(x, y)
    assert [o.shape[0] for o in executor.last_outputs] == [2, 6]
    assert acc.num_inst == 8 and np.isfinite(total) and total > 0
    executor.step(8)
    params = executor.get_params()
    for name, p in net.collect_params().items():
        np.testing.assert_array_equal(params[name], p.data(devices[1]).asnumpy())
