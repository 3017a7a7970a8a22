"""The first Trainer: gradient sum over mirrors, rescaling, SGD/Adam values, stale gradients."""

import numpy as np
import pytest

import mxlite as mx


def _param(values, devices, name="w", **kw):
    p = mx.nn.Parameter(name, shape=np.shape(values), dtype="float64", **kw)
    p.initialize(mx.init.Constant(values), device=devices)
    return p


def _backward(p, grads_per_device):
    """Make backward write ``grads_per_device[i]`` into mirror i (via sum(w * g))."""
    with mx.autograd.record():
        heads = [(d * mx.array(g, d.device, "float64")).sum() for d, g in zip(p.list_data(), grads_per_device)]
    mx.autograd.backward(heads)


def test_sgd_step_sums_mirrors_and_rescales():
    devices = [mx.cpu(0), mx.cpu(1)]
    p = _param([1.0, 2.0], devices)
    trainer = mx.Trainer([p], "sgd", {"learning_rate": 0.5})
    _backward(p, [[1.0, 3.0], [3.0, 1.0]])
    trainer.step(batch_size=4)
    expected = np.array([1.0, 2.0]) - 0.5 * np.array([4.0, 4.0]) / 4
    for mirror in p.list_data():
        np.testing.assert_allclose(mirror.asnumpy(), expected)


def test_sgd_momentum_and_wd_match_mxnet_formula():
    p = _param([1.0, -2.0], [mx.cpu(0)])
    trainer = mx.Trainer([p], "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
    w, mom = np.array([1.0, -2.0]), np.zeros(2)
    for g in ([0.5, 0.1], [-0.2, 0.3], [0.0, 1.0]):
        _backward(p, [g])
        trainer.step(1)
        G = np.array(g) + 0.01 * w
        mom = 0.9 * mom - 0.1 * G
        w = w + mom
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-12)


def test_adam_matches_mxnet_formula():
    p = _param([0.3, -0.7], [mx.cpu(0)])
    trainer = mx.Trainer([p], "adam", {"learning_rate": 0.01, "wd": 0.1, "clip_gradient": 0.8})
    w, m, v = np.array([0.3, -0.7]), np.zeros(2), np.zeros(2)
    for t, g in enumerate(([2.0, 0.1], [-0.5, 0.3], [1.0, -3.0]), start=1):
        _backward(p, [g])
        trainer.step(2)
        G = np.clip(np.array(g) / 2, -0.8, 0.8) + 0.1 * w
        m = 0.9 * m + 0.1 * G
        v = 0.999 * v + 0.001 * G * G
        lr_t = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        w = w - lr_t * m / (np.sqrt(v) + 1e-8)
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-12)


def test_lr_mult_scales_the_step():
    p = _param([1.0], [mx.cpu(0)], lr_mult=0.5)
    trainer = mx.Trainer([p], "sgd", {"learning_rate": 1.0})
    _backward(p, [[1.0]])
    trainer.step(1)
    np.testing.assert_allclose(p.data().asnumpy(), [0.5])


def test_grad_req_add_accumulates_until_zero_grad():
    p = _param([0.0], [mx.cpu(0)], grad_req="add")
    _backward(p, [[1.5]])
    _backward(p, [[2.0]])
    np.testing.assert_allclose(p.grad().asnumpy(), [3.5])
    p.zero_grad()
    np.testing.assert_allclose(p.grad().asnumpy(), [0.0])


def test_stale_gradient_raises_naming_parameter_and_device():
    devices = [mx.cpu(0), mx.cpu(1)]
    p = _param([1.0], devices, name="stale_w")
    trainer = mx.Trainer([p], "sgd", {"learning_rate": 0.1})
    _backward(p, [[1.0], [1.0]])
    trainer.step(1)
    with pytest.raises(UserWarning, match=r"stale_w.*cpu\(0\)"):
        trainer.step(1)
    before = p.data().asnumpy()
    trainer.step(1, ignore_stale_grad=True)  # skipped, not re-applied
    np.testing.assert_array_equal(p.data().asnumpy(), before)


def test_learning_rate_property_and_setter():
    p = _param([1.0], [mx.cpu(0)])
    trainer = mx.Trainer({"w": p}, "sgd", {"learning_rate": 0.3})
    assert trainer.learning_rate == 0.3
    trainer.set_learning_rate(0.05)
    assert trainer.learning_rate == 0.05


@pytest.mark.parametrize("kwargs,match", [
    ({"optimizer": "nosuchopt"}, "unknown optimizer 'nosuchopt'.*adam.*sgd"),
    ({"optimizer": "sgd", "kvstore": "bogus"}, "unknown kvstore 'bogus'"),
    ({"optimizer": mx.optimizer.SGD(), "optimizer_params": {"learning_rate": 1.0}}, "optimizer_params"),
])
def test_bad_trainer_arguments(kwargs, match):
    p = _param([1.0], [mx.cpu(0)])
    with pytest.raises(ValueError, match=match):
        mx.Trainer([p], **kwargs)


def test_trainer_rejects_non_parameters_and_bad_batch_size():
    with pytest.raises(ValueError, match="expects Parameters"):
        mx.Trainer([np.zeros(2)], "sgd")
    p = _param([1.0], [mx.cpu(0)])
    trainer = mx.Trainer([p], "sgd")
    _backward(p, [[1.0]])
    with pytest.raises(ValueError, match="batch_size"):
        trainer.step(0)


def test_shared_parameter_updated_once():
    p = _param([1.0], [mx.cpu(0)])
    trainer = mx.Trainer({"a": p, "b": p}, "sgd", {"learning_rate": 1.0})
    _backward(p, [[1.0]])
    trainer.step(1)
    np.testing.assert_allclose(p.data().asnumpy(), [0.0])


def test_sparse_embedding_trains_like_dense_across_devices():
    devices = [mx.cpu(0), mx.cpu(1)]
    ids = np.array([[1, 3], [3, 0], [5, 1], [1, 1]])
    results = []
    for sparse in (False, True):
        mx.random.seed(0)
        emb = mx.nn.Embedding(6, 4, sparse_grad=sparse)
        emb.initialize(mx.init.Uniform(), device=devices)
        trainer = mx.Trainer(emb.collect_params(), "sgd", {"learning_rate": 0.5})
        xs = mx.split_and_load(ids, devices)
        with mx.autograd.record():
            outs = [(emb(x) * emb(x)).sum() for x in xs]
        mx.autograd.backward(outs)
        if sparse:
            assert isinstance(emb.weight.grad(devices[0]), mx.sparse.RowSparseTensor)
        trainer.step(4)
        results.append([d.asnumpy() for d in emb.weight.list_data()])
    for dense_mirror, sparse_mirror in zip(*results):
        np.testing.assert_allclose(sparse_mirror, dense_mirror, rtol=1e-6)
    np.testing.assert_array_equal(results[1][0], results[1][1])
