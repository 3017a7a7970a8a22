"""What a training step costs on the GPU path, counted by the emulated GPUs (2 of them).

On the 'nccl' path in the default configuration a ``Trainer.step``:

* makes no host synchronisation and copies nothing device-to-host;
* copies host-to-device only the per-parameter table of the fused update (learning rate, weight
  decay and two rule values: 16 bytes per parameter tensor), one copy per GPU, whatever the
  model's size;
* makes one NCCL call per bucket (with overlap off, so the calls fall inside the step);
* launches one optimizer kernel per arena and rule phase (LAMB and LARS: two).

With dynamic loss scaling (``mx.amp``) the step reads one flag: one synchronisation and one byte,
whatever the number of parameters, and it still catches an inf in any gradient.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx

pytestmark = [pytest.mark.gpu, pytest.mark.requires_gpus(2)]

TABLE_BYTES = 16  # HP = 4 float32 values per parameter tensor (mxlite/optimizer/_fused.py)


@pytest.fixture(autouse=True)
def _emulated():
    from mxlite._emulation import install  # noqa: PLC0415

    mx.num_gpus()  # the emulation is installed when GPUs are first looked for
    if install.emulated_gpu_count() < 2:
        pytest.skip("counts come from the GPU emulation (MXLITE_EMULATE_GPUS >= 2)")
    return install


def _counters():
    from mxlite._emulation import install  # noqa: PLC0415

    return install.counters()


def _reset():
    from mxlite._emulation import install  # noqa: PLC0415

    install.reset_counters()


def _setup(width: int, layers: int = 3, optimizer: str = "adam", kvstore: str = "nccl", amp: bool = False,
           **trainer_args):
    devices = [mx.gpu(0), mx.gpu(1)]
    mx.random.seed(0)
    net = mx.nn.Sequential(*[mx.nn.Dense(width, activation="relu") for _ in range(layers)], mx.nn.Dense(10))
    net.initialize(mx.init.Xavier(), device=devices)
    params = {"learning_rate": 1e-3, **({"momentum": 0.9} if optimizer in ("sgd", "lars") else {})}
    trainer = mx.Trainer(net.collect_params(), optimizer, params, kvstore=kvstore, **trainer_args)
    if amp:
        mx.amp.init_trainer(trainer)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 12)).astype(np.float32)
    y = rng.integers(0, 10, size=16).astype(np.float32)
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()

    def backward(bad: bool = False):
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
            if amp:
                with mx.amp.scale_loss(losses, trainer) as scaled:
                    losses = scaled
        mx.autograd.backward(losses)
        if bad:  # an inf in one gradient of one mirror: the sum carries it everywhere
            p = list(net.collect_params().values())[2]
            with mx.gpu(1):
                p.grad(mx.gpu(1))._data[0] = np.inf

    return net, trainer, backward


def _count_step(trainer, backward, steps: int = 2, bad: bool = False):
    for _ in range(2):  # warm-up: plans, tables and states are built once
        backward()
        trainer.step(16)
    backward(bad)
    _reset()
    trainer.step(16)
    return _counters()


@pytest.mark.parametrize("width", [8, 64, 300])
@pytest.mark.parametrize("overlap", [True, False])
def test_nccl_step_makes_no_host_round_trip_and_copies_only_the_table(width, overlap):
    net, trainer, backward = _setup(width, overlap=overlap)
    tensors = len(net.collect_params())
    counts = _count_step(trainer, backward)
    for gpu in (0, 1):
        c = counts[gpu]
        assert c["host_syncs"] == 0, c
        assert c["d2h_bytes"] == 0 and c["d2h_copies"] == 0, c
        assert c["h2d_copies"] == 1 and c["h2d_bytes"] == TABLE_BYTES * tensors, c
        assert c["kernel_launches"] == {"adam_update<float>": 1}, c
        assert c["p2p_copies"] == 0, c


@pytest.mark.parametrize("bucket_bytes", [4096, 1 << 20])
def test_one_nccl_call_per_bucket(bucket_bytes):
    net, trainer, backward = _setup(64, overlap=False, bucket_bytes=bucket_bytes)
    counts = _count_step(trainer, backward)
    buckets = sum(len(sync.buckets) for _, sync in trainer._syncs.values() if sync is not None)
    assert buckets >= (2 if bucket_bytes == 4096 else 1)
    grad_bytes = sum(4 * int(np.prod(p.shape)) for p in net.collect_params().values())
    for gpu in (0, 1):
        assert counts[gpu]["nccl_calls"] == {"allReduce": buckets}, counts[gpu]
        # Buckets are arena slices: the bytes sent are the gradients and their alignment padding.
        sent = counts[gpu]["nccl_bytes"]["float32"]
        assert grad_bytes <= sent <= grad_bytes + 4 * 16 * len(net.collect_params())


def test_overlapped_buckets_are_reduced_during_backward():
    net, trainer, backward = _setup(64, overlap=True)
    for _ in range(2):
        backward()
        trainer.step(16)
    _reset()
    backward()
    during_backward = _counters()
    trainer.step(16)
    assert during_backward[0]["nccl_calls"] == {"allReduce": 1}
    assert during_backward[0]["host_syncs"] == 0


@pytest.mark.parametrize("optimizer, kernels", [
    ("adam", {"adam_update<float>": 1}), ("sgd", {"sgd_update<float>": 1}),
    ("lamb", {"lamb_phase1<float>": 1, "lamb_phase2<float>": 1}),
    ("lars", {"lars_norms<float>": 1, "lars_update<float>": 1})])
def test_one_optimizer_launch_per_arena_and_rule_phase(optimizer, kernels):
    _, trainer, backward = _setup(32, optimizer=optimizer)
    counts = _count_step(trainer, backward)
    for gpu in (0, 1):
        assert counts[gpu]["kernel_launches"] == kernels
        assert counts[gpu]["host_syncs"] == 0 and counts[gpu]["d2h_bytes"] == 0


def test_device_kvstore_step_is_as_lean_as_nccl():
    net, trainer, backward = _setup(32, kvstore="device")
    counts = _count_step(trainer, backward)
    for gpu in (0, 1):
        assert counts[gpu]["host_syncs"] == 0 and counts[gpu]["d2h_bytes"] == 0
        assert counts[gpu]["h2d_bytes"] == TABLE_BYTES * len(net.collect_params())


@pytest.mark.parametrize("width", [8, 300])
def test_loss_scaling_reads_one_flag_per_step(width):
    _, trainer, backward = _setup(width, layers=4, amp=True, overlap=False)
    counts = _count_step(trainer, backward)
    assert counts[0]["host_syncs"] == 1 and counts[0]["d2h_copies"] == 1 and counts[0]["d2h_bytes"] == 1, counts[0]
    assert counts[1]["host_syncs"] == 0 and counts[1]["d2h_bytes"] == 0, counts[1]
    # The whole gradient run is checked in one reduction, whatever the number of parameters.
    assert counts[0]["ops"].get("isfinite") == 1, counts[0]["ops"]


def test_loss_scaling_still_skips_a_step_with_an_inf_gradient():
    net, trainer, backward = _setup(16, amp=True, overlap=False)
    for _ in range(2):
        backward()
        trainer.step(16)
    scale = trainer._amp_loss_scaler.loss_scale
    before = {k: p.data(mx.gpu(0)).asnumpy().copy() for k, p in net.collect_params().items()}
    backward(bad=True)
    trainer.step(16)
    after = {k: p.data(mx.gpu(0)).asnumpy() for k, p in net.collect_params().items()}
    assert trainer._amp_loss_scaler.loss_scale == scale / 2
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


def test_check_finite_reads_one_flag_and_names_the_parameter():
    net, trainer, backward = _setup(16, check_finite=True, overlap=False)
    counts = _count_step(trainer, backward)
    assert counts[0]["host_syncs"] == 1 and counts[0]["d2h_bytes"] == 1
    backward(bad=True)
    name = list(net.collect_params().values())[2].label
    with pytest.raises(FloatingPointError, match=name):
        trainer.step(16)
