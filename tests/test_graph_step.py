"""The Trainer's step as CUDA graphs: with every block captured, the fused update is captured too.

On the emulated GPUs (real ones when present): a model whose blocks are hybridized with
``static_alloc=True, static_shape=True`` trains bit for bit as eagerly while ``Trainer.step`` replays one
graph per device; the learning rate, its schedule and the update counts reach the replayed kernels through
the per-parameter table written before each replay; whatever makes the step need the host keeps it eager,
with one warning naming the reason (docs/graphs.md, "The Trainer's step as a graph").
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx

pytestmark = pytest.mark.gpu

_NOTICE = "Trainer.step runs eagerly"


@pytest.fixture
def emu():
    """The emulation's counters (graph launches and host syncs are counted there); skipped on real GPUs."""
    from mxlite._emulation import install  # noqa: PLC0415

    return install if mx.num_gpus() and install.emulated_gpu_count() else pytest.skip("needs the GPU emulation")


def _mlp():
    return mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(5, in_units=16))


def _devices(gpus):
    if mx.num_gpus() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    return [mx.gpu(i) for i in range(gpus)]


def _optimizer(name):
    if name == "adam":  # a learning-rate schedule: the rate changes at every step
        return "adam", {"learning_rate": 0.01, "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)}
    if name == "lamb":  # two launches per arena, per-parameter norms summed in a buffer made inside the capture
        return "lamb", {"learning_rate": 0.01}
    if name == "sgd":
        return "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}
    return name, {"learning_rate": 0.01}


def _pair(devices, optimizer, kvstore, **trainer_kwargs):
    """(eager net, trainer), (hybridized net, trainer): equal networks and optimizers."""
    out = []
    for graphed in (False, True):
        mx.random.seed(3)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=devices)
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        name, params = _optimizer(optimizer)
        out.append((net, mx.Trainer(net.collect_params(), name, params, kvstore=kvstore, **trainer_kwargs)))
    return out


def _train_step(net, trainer, x, y, devices):
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    with mx.autograd.record():
        losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
    mx.autograd.backward(losses)
    trainer.step(x.shape[0])


def _assert_same(eager, graphed, devices, step=None):
    for pe, pg in zip(eager.collect_params().values(), graphed.collect_params().values()):
        for d in devices:
            assert pe.data(d).asnumpy().tobytes() == pg.data(d).asnumpy().tobytes(), (step, pe.label)


def _batch(rng, n):
    return (rng.standard_normal((n, 12)).astype(np.float32), rng.integers(0, 5, n).astype(np.float32))


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "lamb"])
@pytest.mark.parametrize("gpus,kvstore", [(1, "device"), (1, "nccl"), (2, "device"), (2, "nccl")])
def test_captured_step_is_bit_identical_to_eager(emu, optimizer, gpus, kvstore):
    devices = _devices(gpus)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, optimizer, kvstore)
    rng = np.random.default_rng(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: everything is captured
        for step in range(20):
            x, y = _batch(rng, 4 * gpus)
            if step == 10 and optimizer == "sgd":  # a new rate reaches the replayed kernels through the table
                for t in (t_eager, t_graphed):
                    t.set_learning_rate(0.02)
            emu.reset_counters()
            _train_step(graphed, t_graphed, x, y, devices)
            counts = emu.counters()[0]
            _train_step(eager, t_eager, x, y, devices)
            _assert_same(eager, graphed, devices, step)
            # step 0: all eager; 1: the blocks captured, the step's warm-up; then forward + backward + one
            # step graph on this device
            assert counts["graph_launches"] == [0, 2, 3][min(step, 2)], step
            if step >= 2:
                assert counts["host_syncs"] == 0 and counts["d2h_copies"] == 0, step
    assert t_graphed._step_graphs.replays == 17
    assert t_graphed.learning_rate == t_eager.learning_rate
    info = t_graphed._step_graphs.info()
    assert len(info) == gpus and {i["device"] for i in info} == {str(d) for d in devices}
    assert all(i["launches"] == 18 for i in info)


@pytest.mark.parametrize("kvstore", ["device", "nccl"])
def test_without_overlap_the_sums_precede_the_replayed_update(emu, kvstore):
    """overlap=False: every bucket is summed in step, before the graphs of the update are launched."""
    devices = _devices(2)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "sgd", kvstore, overlap=False)
    rng = np.random.default_rng(11)
    for step in range(6):
        x, y = _batch(rng, 8)
        _train_step(graphed, t_graphed, x, y, devices)
        _train_step(eager, t_eager, x, y, devices)
        _assert_same(eager, graphed, devices, step)
    assert t_graphed._step_graphs.replays == 3


def test_a_replayed_step_is_one_graph_launch_and_no_host_sync(emu):
    devices = _devices(1)
    _, (net, trainer) = _pair(devices, "adam", "device")
    rng = np.random.default_rng(1)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for _ in range(4):
        x, y = (mx.array(a, device=devices[0]) for a in _batch(rng, 4))
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        emu.reset_counters()
        trainer.step(4)
        counts = emu.counters()[0]
    assert counts["graph_launches"] == 1 and counts["host_syncs"] == 0 and counts["d2h_copies"] == 0
    assert counts["kernel_launches"] == {}  # the fused update runs inside the graph
    assert counts["h2d_copies"] == 1  # the per-parameter table (rates, bias corrections), written before the replay


def test_the_schedule_and_a_new_rate_take_effect_on_replay(emu):
    devices = _devices(1)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "sgd", "device")
    rng = np.random.default_rng(2)
    for step in range(8):
        x, y = _batch(rng, 4)
        for t in (t_eager, t_graphed):
            t.set_learning_rate(0.01 * (step + 1))  # every step another rate, never a new capture
        _train_step(graphed, t_graphed, x, y, devices)
        _train_step(eager, t_eager, x, y, devices)
    _assert_same(eager, graphed, devices)
    assert t_graphed._step_graphs.replays == 5 and len(t_graphed._step_graphs.info()) == 1


def test_a_new_batch_size_is_a_new_signature(emu):
    devices = _devices(1)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "adam", "device")
    rng = np.random.default_rng(3)
    for step in range(9):
        x, y = _batch(rng, 4)
        scale = 4 if step < 5 else 8  # rescale_grad is a kernel argument: captured again after one eager step
        for net, t in ((graphed, t_graphed), (eager, t_eager)):
            xs, ys = mx.array(x, device=devices[0]), mx.array(y, device=devices[0])
            with mx.autograd.record():
                loss = mx.loss.SoftmaxCrossEntropyLoss()(net(xs), ys)
            loss.backward()
            t.step(scale)
    _assert_same(eager, graphed, devices)
    assert len(t_graphed._step_graphs.info()) == 2 and t_graphed._step_graphs.replays == 2 + 2


_REFUSALS = {
    "update_on_kvstore": (2, "device", {"update_on_kvstore": True}, "update_on_kvstore"),
    "partial_sync": (2, "device", {"partial_sync": True}, "partial_sync"),
    "compression": (2, "device", {"compression_params": {"type": "fp16"}}, "gradient compression 'fp16'"),
    "sharded": (2, "nccl", {"shard_optimizer_states": True}, "shard_optimizer_states"),
    "check_finite": (1, "device", {"check_finite": True}, "check_finite"),
    "amp": (1, "device", {}, "dynamic loss scaling"),
    "sgld": (1, "device", {}, "without a fused update"),  # the per-parameter path
}


@pytest.mark.parametrize("case", sorted(_REFUSALS))
def test_each_reason_keeps_the_step_eager_with_one_notice(emu, case):
    gpus, kvstore, kwargs, words = _REFUSALS[case]
    devices = _devices(gpus)
    _, (net, trainer) = _pair(devices, "sgld" if case == "sgld" else "adam", kvstore, **kwargs)
    if case == "amp":
        mx.amp.init_trainer(trainer)
    rng = np.random.default_rng(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            x, y = _batch(rng, 4 * gpus)
            emu.reset_counters()
            _train_step(net, trainer, x, y, devices)
    notices = [w for w in caught if _NOTICE in str(w.message)]
    assert len(notices) == 1 and words in str(notices[0].message), [str(w.message) for w in notices]
    assert notices[0].filename == __file__  # the warning points at the caller of trainer.step
    assert emu.counters()[0]["graph_launches"] == 2  # the blocks' graphs only
    assert trainer._step_graphs.replays == 0


def test_an_eager_model_gets_no_notice_and_no_step_graph(emu):
    devices = _devices(1)
    (net, trainer), _ = _pair(devices, "adam", "device", check_finite=True)
    rng = np.random.default_rng(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            _train_step(net, trainer, *_batch(rng, 4), devices)
    assert trainer._step_graphs.replays == 0 and trainer._step_graphs.info() == []


def test_step_graphs_follow_the_blocks_and_a_cleared_graph_is_captured_again(emu):
    from mxlite.device import graphs as dgraphs  # noqa: PLC0415

    devices = _devices(1)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "adam", "device")
    rng = np.random.default_rng(7)
    for step in range(10):
        if step == 4:
            dgraphs.clear()  # every graph dropped: blocks and step run eagerly once, then are captured again
        if step == 7:
            graphed.hybridize(False)  # the blocks run eagerly: so does the step, and its graphs are released
        x, y = _batch(rng, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the blocks' notice about dropped graphs
            _train_step(graphed, t_graphed, x, y, devices)
        _train_step(eager, t_eager, x, y, devices)
        _assert_same(eager, graphed, devices, step)
        if step == 6:
            assert len(t_graphed._step_graphs.info()) == 1
    assert t_graphed._step_graphs.info() == []


def test_saved_and_loaded_states_continue_bit_for_bit(emu, tmp_path):
    devices = _devices(1)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "adam", "device")
    rng = np.random.default_rng(8)
    for step in range(12):
        if step == 6:  # update counts live on the host: the file is right, and a load starts a new signature
            for name, t in (("e", t_eager), ("g", t_graphed)):
                t.save_states(str(tmp_path / name))
                t.load_states(str(tmp_path / name))
            assert (tmp_path / "e").read_bytes() == (tmp_path / "g").read_bytes()
        x, y = _batch(rng, 4)
        _train_step(graphed, t_graphed, x, y, devices)
        _train_step(eager, t_eager, x, y, devices)
        _assert_same(eager, graphed, devices, step)
    assert t_graphed._step_graphs.replays == 3 + 4  # steps 3-5; 6 warm-up of the new updaters, 7 capture, 8-11


def test_half_precision_weights_with_master_copies(emu):
    devices = _devices(1)
    pairs = []
    for graphed in (False, True):
        mx.random.seed(9)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=devices)
        net.cast("float16")
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        pairs.append((net, mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "multi_precision": True})))
    (eager, t_eager), (graphed, t_graphed) = pairs
    rng = np.random.default_rng(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(6):
            x = rng.standard_normal((4, 12)).astype(np.float16)
            for net, t in ((graphed, t_graphed), (eager, t_eager)):
                with mx.autograd.record():
                    loss = (net(mx.array(x, device=devices[0])) ** 2).mean()
                loss.backward()
                t.step(4)
            _assert_same(eager, graphed, devices, step)
    assert t_graphed._step_graphs.replays == 3
