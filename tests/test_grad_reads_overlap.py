"""Gradients read between ``backward()`` and ``trainer.step()`` while the overlapped all-reduce may still run.

With ``Trainer(overlap=True)`` (the default) each bucket of gradients is summed on the GPUs' communication
streams while backward goes on. Every public read of a gradient (``Parameter.grad``, ``list_grad``, the
mirror's ``.grad``, ``gluon.utils.clip_global_norm`` on gradients fetched earlier, ``zero_grad``) first makes
the reading stream wait for those sums, so it sees the sum, never a half-written buffer; the emulated GPUs
raise on the race a real GPU would run into. With ``overlap=False`` each device keeps its own gradient until
``allreduce_grads()``/``step()``, as in MXNet (docs/mxnet-differences.md).
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.comm import buckets
from mxlite.comm.nccl import NcclWork

pytestmark = [pytest.mark.gpu, pytest.mark.requires_gpus(2)]

BATCH = 4


def _devices():
    return [mx.gpu(0), mx.gpu(1)]


def _model(overlap, seed=5):
    """A small MLP on both GPUs and its SGD Trainer; small buckets, so backward launches several sums."""
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(8, in_units=6, activation="relu"), mx.nn.Dense(4, in_units=8))
    net.initialize(mx.init.Xavier(), device=_devices())
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, bucket_bytes=64, overlap=overlap)
    return net, trainer


def _backward(net, seed=6):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, 6)).astype(np.float32)
    with mx.autograd.record():
        losses = [(net(part) ** 2).sum() for part in mx.split_and_load(x, _devices())]
    mx.autograd.backward(losses)


def _summed_reference():
    """Every parameter's summed gradient (NumPy), from a twin without overlap summed by allreduce_grads()."""
    net, trainer = _model(overlap=False)
    _backward(net)
    local = [[g.asnumpy() for g in p.list_grad()] for p in net.collect_params().values()]
    trainer.allreduce_grads()
    return local, [p.list_grad()[0].asnumpy() for p in net.collect_params().values()]


def _weights(net):
    return [p.list_data()[0].asnumpy() for p in net.collect_params().values()]


def test_grads_read_after_backward_are_the_sums_on_every_device():
    _, sums = _summed_reference()
    net, trainer = _model(overlap=True)
    _backward(net)
    params = list(net.collect_params().values())
    for p, expected in zip(params, sums):
        for device in _devices():
            assert p.grad(device).asnumpy().tobytes() == expected.tobytes(), (p.label, device)
    for p, expected in zip(params, sums):
        assert [g.asnumpy().tobytes() for g in p.list_grad()] == [expected.tobytes()] * 2, p.label
    trainer.step(BATCH)  # the sums read above are the ones the update used
    assert not buckets.reductions_in_flight()


def test_a_mirrors_grad_attribute_is_the_sum_after_backward():
    _, sums = _summed_reference()
    net, _ = _model(overlap=True)
    _backward(net)
    for p, expected in zip(net.collect_params().values(), sums):
        for device in _devices():
            assert p.data(device).grad.asnumpy().tobytes() == expected.tobytes(), (p.label, device)


def test_clip_global_norm_on_gradients_fetched_before_backward_clips_the_sums():
    """MXNet's loop: grads fetched once, clipped after every backward, then step; equal, bit for bit, to summing
    first (allreduce_grads), clipping the sums and updating, without overlap."""
    twin, twin_trainer = _model(overlap=False)
    _backward(twin)
    twin_trainer.allreduce_grads()
    twin_norm = mx.gluon.utils.clip_global_norm([g for p in twin.collect_params().values() for g in p.list_grad()],
                                                0.1)
    twin_trainer.update(BATCH)

    net, trainer = _model(overlap=True)
    grads = [p.grad(device) for p in net.collect_params().values() for device in _devices()]  # before backward
    _backward(net)
    norm = mx.gluon.utils.clip_global_norm(grads, 0.1)
    trainer.step(BATCH)
    assert norm == twin_norm and norm > 0.1
    assert [w.tobytes() for w in _weights(net)] == [w.tobytes() for w in _weights(twin)]


def test_without_overlap_each_device_keeps_its_own_gradient_until_step():
    local, _ = _summed_reference()
    net, trainer = _model(overlap=False)
    _backward(net)
    for p, expected in zip(net.collect_params().values(), local):
        assert [p.grad(d).asnumpy().tobytes() for d in _devices()] == [e.tobytes() for e in expected], p.label
    trainer.step(BATCH)


def test_zero_grad_between_backward_and_step_waits_for_the_sums():
    net, _ = _model(overlap=True)
    _backward(net)
    net.collect_params().zero_grad()  # writes the buffers the all-reduce reads and writes
    for p in net.collect_params().values():
        assert all(not g.asnumpy().any() for g in p.list_grad()), p.label


def test_reads_wait_only_while_sums_are_in_flight(monkeypatch):
    waits = []
    original = NcclWork.wait
    monkeypatch.setattr(NcclWork, "wait", lambda self: (waits.append(self), original(self))[1])
    net, trainer = _model(overlap=True)
    params = list(net.collect_params().values())
    _backward(net)
    assert buckets.reductions_in_flight()
    params[0].grad(mx.gpu(0))
    launched = len(waits)
    assert launched >= 2 and not buckets.reductions_in_flight()  # every bucket's sum, waited for once
    for p in params:
        p.list_grad()
    mx.gluon.utils.clip_global_norm([p.grad(mx.gpu(1)) for p in params], 1e6)
    trainer.step(BATCH)
    assert len(waits) == launched  # nothing was in flight any more: no further wait, not even in step
    for p in params:
        p.grad(mx.gpu(0))
    assert len(waits) == launched
