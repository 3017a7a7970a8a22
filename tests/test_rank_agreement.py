"""What every rank (and every captured step) must agree on, and the errors that name a disagreement.

* A captured ``Trainer.step`` is reused only for the kernel arguments it was captured with: a batch size or a
  hyper-parameter given as a NumPy scalar takes effect when it changes (one process, an emulated GPU).
* Sharded optimizer states leave alone what the update does not own: each device's BatchNorm running
  statistics stay its own, as without sharding.
* Two MPI ranks (tests/rank_agreement_worker.py), one emulated GPU each, the step captured with its NCCL
  all-reduces: an uneven last batch on one rank, or ``mx.device.graphs.clear()`` on one rank, train on bit for
  bit as eagerly (no rank captures while another replays).
* Two MPI ranks of CPU devices: Trainers that disagree on ``shard_optimizer_states``, the optimizer, a
  hyper-parameter or a ``grad_req`` raise the same error on every rank at their creation, naming the setting
  and the ranks; a learning rate changed on one rank only is named at the next steps (changed on every rank, it
  trains on); ``save_states`` of sharded states called by rank 0 alone ends the job with an error saying why.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import mxlite as mx
from tests.mpi_helpers import ROOT, mpirun, mpirun_ok, needs_mpi
from tests.test_graph_step import _assert_same, _devices, _pair, _train_step, emu  # noqa: F401 - emu: a fixture

WORKER = os.path.join(ROOT, "tests", "rank_agreement_worker.py")


# -- one process -----------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_numpy_batch_sizes_and_hyper_parameters_reach_the_captured_step(emu):  # noqa: F811 - the fixture
    devices = _devices(1)
    (eager, t_eager), (graphed, t_graphed) = _pair(devices, "sgd", "device")
    rng = np.random.default_rng(12)
    for step in range(14):
        x = rng.standard_normal((4, 12)).astype(np.float32)
        y = rng.integers(0, 5, 4).astype(np.float32)
        if step == 9:  # a NumPy momentum, changed: a kernel argument
            for t in (t_eager, t_graphed):
                t.optimizer.momentum = np.float32(0.5)
        if step == 11:
            for t in (t_eager, t_graphed):
                t.optimizer.momentum = np.float32(0.25)
        # the same batch, counted as another number of samples (a NumPy integer, as len() of an array gives)
        batch = np.int64(4 if step < 5 else 8)
        for net, t in ((graphed, t_graphed), (eager, t_eager)):
            xs, ys = mx.array(x, device=devices[0]), mx.array(y, device=devices[0])
            with mx.autograd.record():
                loss = mx.loss.SoftmaxCrossEntropyLoss()(net(xs), ys)
            loss.backward()
            t.step(batch)
        _assert_same(eager, graphed, devices, step)
    # signatures: batch 4; batch 8 (steps 5-8); momentum 0.5 (9-10); momentum 0.25 (11-13): each warms up once
    assert t_graphed._step_graphs.replays == 2 + 2 + 0 + 1


def _bn_net(devices):
    mx.random.seed(5)
    net = mx.nn.Sequential(mx.nn.Dense(8, in_units=6), mx.nn.BatchNorm(in_channels=8), mx.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def _bn_train(kind: str, shard: bool, steps: int = 3):
    devices = [mx.cpu(0), mx.cpu(1)] if kind == "cpu" else _devices(2)
    net = _bn_net(devices)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01},
                         kvstore="device" if kind == "cpu" else "nccl", shard_optimizer_states=shard)
    rng = np.random.default_rng(3)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        x = mx.array((rng.standard_normal((8, 6)) * np.arange(1, 9)[:, None]).astype(np.float32))
        y = mx.array(rng.integers(0, 3, 8).astype(np.float32))
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(8)
    return {name: [p.data(d).asnumpy() for d in devices] for name, p in net.collect_params().items()}


@pytest.mark.parametrize("kind", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_sharded_states_keep_each_devices_batch_norm_statistics(kind):
    plain, sharded = _bn_train(kind, False), _bn_train(kind, True)
    stats = [name for name in plain if "running" in name]
    assert stats
    for name in stats:  # each device's own statistics (its half of the batch), as without sharding
        assert not np.array_equal(plain[name][0], plain[name][1]), name
        for d in range(2):
            assert sharded[name][d].tobytes() == plain[name][d].tobytes(), (name, d)
    for name in plain:
        for d in range(2):
            assert sharded[name][d].tobytes() == plain[name][d].tobytes(), (name, d)


# -- two MPI ranks -----------------------------------------------------------------------------------------------
def _ranks_json(tmp_path):
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.mpi
@pytest.mark.gpu
@needs_mpi
@pytest.mark.parametrize("mode", ["uneven", "clear"])
def test_a_step_one_rank_cannot_replay_runs_eagerly_while_the_others_replay(tmp_path, mode):
    """No rank captures its step's collectives while another replays them: the job neither hangs nor stops
    (the emulated NCCL refuses such a capture, which would leave a GPU waiting), and trains as eagerly."""
    if not mx.device.devices._emulated_gpus():
        pytest.skip("sets one emulated GPU per rank")
    mpirun_ok(2, WORKER, mode, str(tmp_path), timeout=240, MXLITE_EMULATE_GPUS="1")
    replays = [r["replays"] for r in _ranks_json(tmp_path)]
    if mode == "uneven":
        # captured at step 3 (steps 1-2: the blocks' capture and the step's warm-up, agreed); then rank 0
        # replays every step while rank 1 runs its short last batches (steps 4, 9, 14, 19) eagerly; the
        # ranks' periodic agreements (every 5 steps here: steps 8, 13, 18) find both able to replay
        assert replays[0][-1] == 16
        assert replays[1][-1] == 16 - 4
    else:
        # rank 1's graphs are dropped at step 8; the ranks agree at step 8 (every 5 steps here) that they run
        # eagerly, then at step 9 that they capture again: both replay from step 10 on
        assert replays[0] == replays[1]
        assert replays[0][7:11] == [4, 4, 4, 5] and replays[0][-1] == 14


@pytest.mark.mpi
@needs_mpi
def test_trainers_that_differ_across_ranks_get_the_same_error_naming_the_setting(tmp_path):
    mpirun_ok(2, WORKER, "settings", str(tmp_path), timeout=120)
    errors = [r["errors"] for r in _ranks_json(tmp_path)]
    assert errors[0] == errors[1]  # every rank raises the same error, at the Trainer's creation
    settings = "ranks disagree on the Trainer's settings: "
    assert errors[0]["sharding"] == settings + "'shard_optimizer_states' is true on rank 0 and false on rank 1"
    assert errors[0]["optimizer"] == settings + "'optimizer' is Adam on rank 0 and SGD on rank 1"
    assert errors[0]["learning_rate"] == settings + "'optimizer.lr' is 0.01 on rank 0 and 0.02 on rank 1"
    assert errors[0]["momentum"] == settings + "'optimizer.momentum' is 0.9 on rank 0 and 0.8 on rank 1"
    described = "{{shape [16, 6], dtype float32, grad_req {}, stype default, lr_mult 1.0, wd_mult 1.0}}"
    frozen = (f"ranks disagree on the Trainer's parameters: '0.weight' is {described.format('write')} on rank 0 "
              f"and {described.format('null')} on rank 1")
    assert errors[0]["grad_req"] == frozen and errors[0]["grad_req_sharded"] == frozen
    # each rank freezing another layer during training: named before the step's first collective
    later = ("ranks disagree on the parameters whose gradients the Trainer sums: '0.weight' is {grad_req null} on "
             "rank 0 and {grad_req write} on rank 1")
    assert errors[0]["frozen_later_False"] == later and errors[0]["frozen_later_True"] == later


@pytest.mark.mpi
@needs_mpi
def test_a_learning_rate_changed_on_one_rank_only_is_named(tmp_path):
    result = mpirun(2, WORKER, "lr_alone", str(tmp_path), timeout=120)
    message = ("ranks disagree on the optimizer's hyper-parameters at step 4: 'optimizer.lr' is 0.05 on rank 0 and "
               "0.1 on rank 1")
    assert result.returncode != 0 and message in result.stderr, result.stdout + result.stderr
    assert json.loads((tmp_path / "rank1.json").read_text())["error"] == message  # the rank that found it


@pytest.mark.mpi
@needs_mpi
def test_a_learning_rate_changed_on_one_rank_at_the_last_step_is_named_by_the_checkpoint(tmp_path):
    result = mpirun(2, WORKER, "lr_last", str(tmp_path), timeout=120)
    # named by checkpoint.save on every rank (or, if rank 0's message came in time, by rank 1's last step)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "'optimizer.lr' is 0.05 on rank 0 and 0.1 on rank 1" in result.stderr, result.stderr
    errors = [json.loads((tmp_path / f"rank{r}.json").read_text())["error"] for r in range(2)
              if (tmp_path / f"rank{r}.json").exists()]
    assert any(e.startswith("ranks disagree on the optimizer's hyper-parameters at ") for e in errors), errors
    assert not (tmp_path / "ckpt" / "latest").exists()


@pytest.mark.mpi
@needs_mpi
def test_hyper_parameters_changed_on_every_rank_together_train_on(tmp_path):
    mpirun_ok(2, WORKER, "lr_together", str(tmp_path), timeout=120)
    ranks = _ranks_json(tmp_path)
    assert ranks[0]["error"] is None and ranks[1]["error"] is None
    assert ranks[0]["weights"] == ranks[1]["weights"]


@pytest.mark.mpi
@needs_mpi
def test_a_batch_size_changed_on_one_rank_keeps_the_first_factor_as_mxnets_store(tmp_path):
    mpirun_ok(2, WORKER, "batch", str(tmp_path), timeout=120)
    ranks = _ranks_json(tmp_path)
    # default (MXNet updates on its store, whose one optimizer keeps the first factor): the ranks stay alike
    default = [r["default"] for r in ranks]
    assert default[0]["error"] is None and default[0]["weights"] == default[1]["weights"]
    assert default[0]["warnings"] == []
    assert len(default[1]["warnings"]) == 2  # the change to 4, and back to 6
    assert default[1]["warnings"][0].startswith("Possible change in the `batch_size` from previous `step` detected.")
    assert "batch_size 4 on this rank; the gradient is still divided by 6" in default[1]["warnings"][0]
    # update_on_kvstore=False: each rank divides the sum by its own batch size (MXNet's workers do too)
    local = [r["local"] for r in ranks]
    assert local[0]["weights"] != local[1]["weights"] and local[1]["warnings"] == []
    # the first step's batch sizes differ: the same error on every rank, before any update
    message = ("ranks disagree on the batch size of the first step (with several workers on a 'dist_*' kvstore "
               "every step divides the summed gradient by it, as MXNet's store): 'batch_size' is 6.0 on rank 0 "
               "and 4.0 on rank 1")
    assert ranks[0]["first"]["error"] == message and ranks[1]["first"]["error"] == message


@pytest.mark.mpi
@needs_mpi
def test_sharded_save_states_on_rank_0_alone_ends_the_job_naming_the_cause(tmp_path):
    # the other rank's next collective would wait as long (4 s) for rank 0: this error comes first (2 s)
    result = mpirun(2, WORKER, "save_alone", str(tmp_path), timeout=120, MXLITE_COLLECTIVE_TIMEOUT="4")
    message = ("Trainer.save_states is a collective call: rank 0 called it, rank 1 did not within 2 s; with "
               "shard_optimizer_states each process holds a part of the optimizer states, so every rank must call "
               "save_states")
    assert result.returncode != 0 and message in result.stderr, result.stdout + result.stderr
    assert json.loads((tmp_path / "rank0.json").read_text())["error"].startswith(message)
