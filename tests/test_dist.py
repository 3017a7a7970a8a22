"""Real multi-process runs: ``mpiexec -n 2`` ranks on the CPU (mpi4py + the mpich wheel).

* 2 ranks training with ``kvstore='dist_sync'`` on halves of each batch, each passing its half to
  ``step``, end with the same parameters as one process training on 2 devices (float64, rtol
  1e-12) and as one process on one device with the whole batch (rtol 1e-6), identical on both
  ranks, although rank 1 starts from other initial values (rank 0's are broadcast). As in
  MXNet, the ranks' gradients are summed and divided by the local batch, so the one-process
  runs pass half the batch to ``step``; with ``average_over_workers=True`` they pass the whole
  batch. The same holds updating on the store, and with 2-bit compression (bit for bit
  against one process on 2 devices);
* ``Trainer.num_workers`` and the store's ``rank``/``num_workers`` are right from construction,
  before any step and with deferred parameters;
* MpiCommunicator's collectives give MXNet/MPI's results (sum, average with a float16 buffer
  whose sum would overflow in float16, broadcast from rank 1, allgather of unequal sizes);
* ``mxlite launch -n 2`` runs a script under MPI.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import mxlite as mx
from tests import deadlines
from tests.dist_worker import STEPS, VARIANTS, batch, net_for, one_process_batch
from tests.mpi_helpers import ROOT, mpirun_ok, needs_mpi

pytestmark = pytest.mark.mpi
WORKER = os.path.join(ROOT, "tests", "dist_worker.py")
_mpirun = mpirun_ok


def _single_process(devices, variant: str = "plain") -> dict[str, np.ndarray]:
    dtype, extra = VARIANTS[variant]
    extra = {k: v for k, v in extra.items() if k != "update_on_kvstore"}
    net = net_for(0, devices, dtype)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "wd": 1e-3}, **extra)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for step in range(STEPS):
        x, y = batch(step)
        x, y = x.astype(dtype), y.astype(dtype)
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(one_process_batch(variant))  # what 2 ranks passing their halves amount to
    return {k: p.data(mx.cpu(0)).asnumpy() for k, p in net.collect_params().items()}


@needs_mpi
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_ranks_train_like_one_process(tmp_path, variant):
    _mpirun(2, WORKER, "train", str(tmp_path), variant)
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    assert sorted(ranks[0]) == sorted(ranks[1])
    for k in ranks[0]:
        np.testing.assert_array_equal(ranks[1][k], ranks[0][k], err_msg=f"ranks differ in {k}")
    two_devices = _single_process([mx.cpu(0), mx.cpu(1)], variant)
    for k, v in two_devices.items():
        if variant == "2bit":  # same contributions, same residuals, same summation order
            np.testing.assert_array_equal(ranks[0][k], v, err_msg=k)
        else:
            np.testing.assert_allclose(ranks[0][k], v, rtol=1e-12, atol=1e-14, err_msg=k)
    if variant != "2bit":  # 2-bit compression depends on how the batch is split
        whole_batch = _single_process([mx.cpu(0)], variant)
        for k, v in whole_batch.items():
            np.testing.assert_allclose(ranks[0][k], v, rtol=1e-6, atol=1e-9, err_msg=k)


@needs_mpi
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["plain", "2bit"])
def test_two_ranks_on_one_gpu_each_train_like_one_process(tmp_path, variant):
    """One GPU per rank, GPU buffers over NCCL (the emulated GPUs' NCCL double over MPI where no GPU is
    present): the parameters of one process on two devices, as on the CPU path."""
    if mx.device.devices._emulated_gpus() == 0 and mx.num_gpus() < 1:
        pytest.skip("needs a GPU per rank (real, or MXLITE_EMULATE_GPUS)")
    gpus_per_rank = {"MXLITE_EMULATE_GPUS": "1"} if mx.device.devices._emulated_gpus() else {}
    result = _mpirun(2, WORKER, "train", str(tmp_path), variant, "gpu", **gpus_per_rank)
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    two_devices = _single_process([mx.cpu(0), mx.cpu(1)], variant)
    for k, v in two_devices.items():
        np.testing.assert_array_equal(ranks[1][k], ranks[0][k], err_msg=f"ranks differ in {k}")
        if variant == "2bit":  # same contributions, same residuals, same summation order
            np.testing.assert_array_equal(ranks[0][k], v, err_msg=k)
        else:
            np.testing.assert_allclose(ranks[0][k], v, rtol=1e-12, atol=1e-14, err_msg=k)
    if gpus_per_rank:
        assert "emulated on the CPU" in result.stderr


@needs_mpi
def test_sum_over_workers_is_mxnets_default_and_average_is_an_option(tmp_path):
    """SGD (lr 0.1) on w = 1; rank r's loss (r + 1)·w·2 over its 2 samples gives the gradient 2(r + 1).

    MXNet: w −= lr · (2 + 4) / 2 (the sum over ranks over the local batch) → 0.7, with
    ``update_on_kvstore`` too; ``average_over_workers=True``: w −= lr · (2 + 4) / (2 · 2) → 0.85.
    """
    _mpirun(2, WORKER, "sgd_step", str(tmp_path))
    for r in range(2):
        seen = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert seen["sum"] == pytest.approx(1.0 - 0.1 * 6.0 / 2, rel=1e-15)
        assert seen["sum_on_store"] == pytest.approx(1.0 - 0.1 * 6.0 / 2, rel=1e-15)
        assert seen["average"] == pytest.approx(1.0 - 0.1 * 6.0 / 4, rel=1e-15)
        assert seen["average_on_store"] == pytest.approx(1.0 - 0.1 * 6.0 / 4, rel=1e-15)


@needs_mpi
def test_num_workers_and_rank_are_right_from_construction(tmp_path):
    _mpirun(2, WORKER, "sizes", str(tmp_path))
    for r in range(2):
        seen = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert seen == {"kv": [r, 2], "trainer": 2, "trainer_kv": 2, "trainer_device": 1}


@needs_mpi
def test_ranks_with_different_parameters_get_an_error_naming_the_ranks(tmp_path):
    _mpirun(2, WORKER, "mismatch", str(tmp_path))
    messages = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert messages[0] == messages[1]
    assert "ranks disagree on the Trainer's parameters" in messages[0]
    assert "on rank 0" in messages[0] and "on rank 1" in messages[0] and "{shape [16]" in messages[0]


@needs_mpi
def test_two_ranks_resume_from_a_checkpoint_bit_for_bit(tmp_path):
    _mpirun(2, WORKER, "resume", str(tmp_path))
    assert sorted(os.listdir(tmp_path / "ckpt" / "step-00000003")) == [
        "manifest.json", "meta-rank0.json", "meta-rank1.json", "params.npz", "trainer-rank0.states",
        "trainer-rank1.states"]
    runs = {(r, kind): dict(np.load(tmp_path / f"rank{r}-{kind}.npz")) for r in range(2)
            for kind in ("straight", "resumed")}
    for k, want in runs[(0, "straight")].items():
        for key in runs:
            np.testing.assert_array_equal(runs[key][k], want, err_msg=f"{key} differs in {k}")


@needs_mpi
@pytest.mark.parametrize("case, expected", [
    ("shape", ["a collective call", "'collective #1'", "shape [[4]]} on rank 0", "shape [[5]]} on rank 1"]),
    ("op", ["a collective call", "{op allreduce", "on rank 0", "{op barrier", "on rank 1"]),
    ("drift", ["the parameter values after a step", "'1.bias'", "on rank 0", "on rank 1"]),
    ("clean", ["no error"]),
])
def test_debug_mode_names_the_odd_rank_out(tmp_path, case, expected):
    _mpirun(2, WORKER, "debug", str(tmp_path), case, MXLITE_DEBUG_COLLECTIVES="1")
    messages = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert messages[0] == messages[1]
    for part in expected:
        assert part in messages[0], messages[0]


@needs_mpi
def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(tmp_path):
    _mpirun(2, WORKER, "amp_overflow", str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for seen in ranks:
        assert seen["changed"] == [True, False, True]  # step 1 wrote nothing, on both ranks
        assert seen["scales"] == [2.0**16, 2.0**15, 2.0**15]
    assert ranks[0]["weight"] == ranks[1]["weight"]


@needs_mpi
@pytest.mark.parametrize("variant", ["plain", "on_store"])
def test_a_parameter_stale_on_one_rank_is_skipped_on_every_rank(tmp_path, variant):
    _mpirun(2, WORKER, "stale", str(tmp_path), variant)
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    for k in ranks[0]:
        np.testing.assert_array_equal(ranks[1][k], ranks[0][k], err_msg=f"ranks differ in {k}")


@needs_mpi
def test_mpi_collectives(tmp_path):
    _mpirun(2, WORKER, "collectives", str(tmp_path))
    for r in range(2):
        seen = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert seen["size"] == 2
        assert seen["sum"] == [[33.0] * 5] * 2  # (1 + 10) + (2 + 20) on both local devices
        assert seen["avg16"] == [[30000.0] * 3] * 2  # 60000 + 60000 overflows float16; the wire is float32
        assert seen["bcast"] == [[0.0, 2.0, 4.0, 6.0]] * 2  # rank 1's first buffer
        assert seen["gather"] == [[0, 1], [0, 1, 2]]


@needs_mpi
def test_mxlite_launch_runs_a_script_in_n_processes(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\n"
                      "open(f'{sys.argv[1]}/rank{c.rank}', 'w').write(f'{c.rank} of {c.size}')\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = deadlines.run([sys.executable, "-m", "mxlite", "launch", "-n", "2", str(script), str(tmp_path)],
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    # (each rank writes a file: the ranks' stdout lines may interleave)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["0 of 2", "1 of 2"]
