"""Communicators (in-process), gradient buckets and overlap with backward."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import comm
from mxlite.comm.buckets import GradientSync, plan_buckets

DEVICES = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]


# -- LocalCommunicator ------------------------------------------------------------------------------
def test_local_allreduce_sums_in_device_order_and_mirrors_get_the_same_bits():
    c = comm.LocalCommunicator(DEVICES)
    bufs = [np.full(4, v, np.float32) for v in (0.1, 0.2, 0.3)]
    c.allreduce(bufs)
    want = (np.float32(0.1) + np.float32(0.2)) + np.float32(0.3)
    for b in bufs:
        np.testing.assert_array_equal(b, np.full(4, want, np.float32))
    c.allreduce(bufs, average=True)
    np.testing.assert_allclose(bufs[0], want, rtol=1e-6)
    assert (c.rank, c.size, c.contributions) == (0, 1, 3)


def test_local_broadcast_and_allgather():
    c = comm.LocalCommunicator(DEVICES[:2])
    bufs = [np.arange(3.0), np.zeros(3)]
    c.broadcast(bufs)
    np.testing.assert_array_equal(bufs[1], [0.0, 1.0, 2.0])
    assert [g.tolist() for g in c.allgather(np.arange(2))] == [[0, 1]]
    with pytest.raises(ValueError, match="root 1"):
        c.broadcast(bufs, root=1)


def test_mismatched_buffers_are_rejected_naming_the_device():
    c = comm.LocalCommunicator(DEVICES[:2])
    with pytest.raises(ValueError, match=r"cpu\(1\) is float32\(3,\)"):
        c.allreduce([np.zeros(4, np.float32), np.zeros(3, np.float32)])
    with pytest.raises(ValueError, match="1 buffers for 2 devices"):
        c.allreduce([np.zeros(4)])
    with pytest.raises(ValueError, match="distinct"):
        comm.LocalCommunicator([mx.cpu(0), mx.cpu(0)])


def test_create_picks_by_kvstore_type():
    assert isinstance(comm.create("device", DEVICES), comm.LocalCommunicator)
    assert isinstance(comm.create("local", DEVICES[:1]), comm.LocalCommunicator)
    with pytest.raises(ValueError, match="not all GPUs"):
        comm.create("nccl", DEVICES)
    with pytest.raises(ValueError, match="unknown kvstore type 'ring'"):
        comm.create("ring", DEVICES)


# -- buckets ------------------------------------------------------------------------------------------
def _mlp(devices, sizes=(32, 32, 8), in_units=16, dtype="float32"):
    mx.random.seed(0)
    layers = []
    for n in sizes:
        layers.append(mx.nn.Dense(n, in_units=in_units, activation="relu", dtype=dtype))
        in_units = n
    net = mx.nn.Sequential(*layers)
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def test_buckets_are_zero_copy_slices_in_backward_order():
    net = _mlp(DEVICES[:2])
    params = list(net.collect_params().values())
    buckets = plan_buckets(params, threshold_bytes=10**9)
    assert len(buckets) == 1 and len(buckets[0].params) == len(params)
    # backward order: the last layer's gradients first
    assert [p.label for p in buckets[0].params[:2]] == ["2.bias", "2.weight"]
    for mirror, buf in enumerate(buckets[0].buffers()):
        arena = buckets[0].arenas[mirror]
        assert np.shares_memory(buf, arena.grad_buf)
        for p in params:
            assert np.shares_memory(buf, p.list_grad()[mirror]._data)


def test_threshold_groups_small_tensors_and_sends_large_ones_alone():
    net = _mlp(DEVICES[:1], sizes=(64, 4, 4))  # 1.weight: 64*16 floats = 4 KiB, the rest small
    params = list(net.collect_params().values())
    buckets = plan_buckets(params, threshold_bytes=1024)
    big = [b for b in buckets if any(p.label == "0.weight" for p in b.params)]
    assert len(big) == 1 and [p.label for p in big[0].params] == ["0.weight"]
    assert all(b.nbytes <= 1024 for b in buckets if b is not big[0])
    assert sum(len(b.params) for b in buckets) == len(params)
    assert len(plan_buckets(params, threshold_bytes=1)) == len(params)  # everything alone


def test_a_parameter_of_another_trainer_splits_the_bucket():
    net = _mlp(DEVICES[:1])
    params = list(net.collect_params().values())
    mine = [p for p in params if p.label != "1.weight"]
    buckets = plan_buckets(mine, threshold_bytes=10**9)
    assert len(buckets) == 2  # 1.weight lies between 1.bias and 0.bias in the gradient buffer
    covered = [(b.start[0], b.end[0]) for b in buckets]
    other = params[2].arena_slots()[0][1]
    assert all(e <= other.grad_offset or s >= other.grad_offset + other.span for s, e in covered)


# -- overlap --------------------------------------------------------------------------------------------
class CountingComm(comm.LocalCommunicator):
    def __init__(self, devices):
        super().__init__(devices)
        self.calls = []

    def allreduce(self, buffers, average=False):
        self.calls.append(buffers[0].size)
        return super().allreduce(buffers, average)


def _train(overlap, steps=5, bucket_bytes=2048, devices=DEVICES[:2], optimizer="adam"):
    net = _mlp(devices)
    trainer = mx.Trainer(net.collect_params(), optimizer, {"learning_rate": 0.01}, bucket_bytes=bucket_bytes,
                         overlap=overlap)
    loss_fn = mx.loss.L2Loss()
    rng = np.random.default_rng(0)
    early = []
    for _ in range(steps):
        x = rng.normal(size=(12, 16)).astype(np.float32)
        y = rng.normal(size=(12, 8)).astype(np.float32)
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        sync = next(s for _, s in trainer._syncs.values())
        early.append(sum(b.reduced for b in sync.buckets))
        trainer.step(12)
    return net, trainer, early


def test_overlap_reduces_buckets_during_backward_with_identical_results():
    with_overlap, trainer, early = _train(True)
    without, _, early_off = _train(False)
    sync = next(s for _, s in trainer._syncs.values())
    assert len(sync.buckets) > 2 and all(n == len(sync.buckets) for n in early)  # all reduced by backward
    assert early_off == [0] * len(early_off)
    for (k, p), q in zip(with_overlap.collect_params().items(), without.collect_params().values()):
        for a, b in zip(p.list_data(), q.list_data()):
            np.testing.assert_array_equal(a.asnumpy(), b.asnumpy(), err_msg=k)


def test_each_bucket_is_reduced_once_per_step():
    net = _mlp(DEVICES[:2])
    c = CountingComm(DEVICES[:2])
    sync = GradientSync(c, list(net.collect_params().values()), threshold_bytes=2048)
    x = mx.split_and_load(np.ones((4, 16), np.float32), DEVICES[:2])
    with mx.autograd.record():
        losses = [net(a).sum() for a in x]
    mx.autograd.backward(losses)
    assert len(c.calls) == len(sync.buckets)  # all during backward
    sync.allreduce_grads()
    assert len(c.calls) == len(sync.buckets)  # nothing left to do


def test_a_partial_second_backward_after_an_early_reduction_is_an_error():
    net = _mlp(DEVICES[:2], sizes=(8, 8))
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, bucket_bytes=10**9)
    x = mx.split_and_load(np.ones((4, 16), np.float32), DEVICES[:2])
    with mx.autograd.record():
        losses = [net(a).sum() for a in x]
    mx.autograd.backward(losses)
    with mx.autograd.record():  # only the first layer: its gradients are rewritten, the others are not
        partial = [net[0](a).sum() for a in x]
    mx.autograd.backward(partial)
    with pytest.raises(RuntimeError, match=r"rewrote the gradients of \['0.bias', '0.weight'\]"):
        trainer.step(4, ignore_stale_grad=True)


def test_a_full_second_backward_is_reduced_again():
    net = _mlp(DEVICES[:2], sizes=(8, 8))
    twin = _mlp(DEVICES[:2], sizes=(8, 8))
    trainers = [mx.Trainer(n.collect_params(), "sgd", {"learning_rate": 0.1}) for n in (net, twin)]
    x = mx.split_and_load(np.ones((4, 16), np.float32), DEVICES[:2])
    for n, t, passes in ((net, trainers[0], 2), (twin, trainers[1], 1)):
        for _ in range(passes):
            with mx.autograd.record():
                losses = [n(a).sum() for a in x]
            mx.autograd.backward(losses)
        t.step(4)
    for p, q in zip(net.collect_params().values(), twin.collect_params().values()):
        np.testing.assert_array_equal(p.data().asnumpy(), q.data().asnumpy())


def test_gradient_accumulation_turns_overlap_off_and_sums_at_step():
    net = _mlp(DEVICES[:2], sizes=(8, 8))
    for p in net.collect_params().values():
        p.grad_req = "add"
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = mx.split_and_load(np.ones((4, 16), np.float32), DEVICES[:2])
    for _ in range(2):
        with mx.autograd.record():
            losses = [net(a).sum() for a in x]
        mx.autograd.backward(losses)
    sync = next(s for _, s in trainer._syncs.values())
    assert not any(b.reduced for b in sync.buckets)
    g = [p.list_grad()[0].asnumpy().copy() + p.list_grad()[1].asnumpy() for p in net.collect_params().values()]
    trainer.allreduce_grads()
    for p, want in zip(net.collect_params().values(), g):
        for grad in p.list_grad():
            np.testing.assert_allclose(grad.asnumpy(), want, rtol=1e-6)
