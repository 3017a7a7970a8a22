"""GPU paths of the communication layer (skipped without CuPy and a GPU).

* NcclCommunicator in one process over every visible GPU (``initAll``) and in the
  multi-process form at world size 1 (the NCCL id made by rank 0 and broadcast over MPI):
  sum, average, broadcast, float16 buffers, a Work ordering the caller's stream;
* the Trainer on GPUs with kvstore 'nccl', 'device' and 'dist_sync' (world size 1), with and
  without a compression codec, gives the CPU Trainer's parameters.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from tests.training_helpers import random_backward

pytestmark = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


def _gpus():
    return [mx.gpu(i) for i in range(mx.num_gpus())]


def _communicators():
    from mxlite.comm import NcclCommunicator

    made = [("initAll", NcclCommunicator(_gpus()))]
    try:
        from mpi4py import MPI
    except ImportError:
        return made
    made.append(("mpi world 1", NcclCommunicator([mx.gpu(0)], mpi_comm=MPI.COMM_WORLD)))
    return made


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nccl_allreduce_average_and_broadcast(dtype):
    import cupy

    for name, comm in _communicators():
        n = len(comm.devices)
        bufs = []
        for i, d in enumerate(comm.devices):
            with d.use():
                bufs.append(cupy.full(1000, i + 1, dtype=dtype))
        comm.allreduce(bufs).wait()
        for b in bufs:
            np.testing.assert_array_equal(cupy.asnumpy(b), np.full(1000, n * (n + 1) / 2, dtype), err_msg=name)
        comm.allreduce(bufs, average=True).wait()
        for b in bufs:
            np.testing.assert_allclose(cupy.asnumpy(b), n * (n + 1) / 2, rtol=1e-3, err_msg=name)
        for i, (d, b) in enumerate(zip(comm.devices, bufs)):
            with d.use():
                b[...] = i + 7
        comm.broadcast(bufs, root=0)
        for b in bufs:
            np.testing.assert_array_equal(cupy.asnumpy(b), np.full(1000, 7, dtype), err_msg=name)
        comm.barrier()
        assert [g.tolist() for g in comm.allgather(bufs[0][:3])] == [[7.0] * 3] * comm.size


@needs_gpu
def test_the_work_orders_the_callers_stream_after_the_collective():
    import cupy

    from mxlite.comm import NcclCommunicator

    comm = NcclCommunicator([mx.gpu(0)])
    with mx.gpu(0).use():
        big = cupy.ones(1 << 24, np.float32)
        big *= 3  # queued on the caller's stream: the collective must see it
        work = comm.allreduce([big])
        work.wait()
        total = float(big.sum())  # queued after the wait on the caller's stream
    assert total == 3.0 * (1 << 24)


def _train(devices, kvstore, compression=None, steps=4):
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(64, activation="relu", in_units=20), mx.nn.Dense(10, in_units=64))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=kvstore,
                         compression_params=compression, bucket_bytes=4096)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        random_backward(net, devices, rng, 16, 20, 10)
        trainer.step(16)
    return {k: [d.asnumpy() for d in p.list_data()] for k, p in net.collect_params().items()}


@needs_gpu
@pytest.mark.parametrize("kvstore, compression", [
    ("nccl", None), ("device", None), ("device", {"type": "2bit", "threshold": 0.001}),
    ("device", {"type": "fp16"}), ("device", {"type": "bf16"}), ("device", {"type": "topk", "ratio": 0.1}),
])
def test_trainer_on_gpus_gives_the_cpu_parameters(kvstore, compression):
    gpus = _gpus()
    cpus = [mx.cpu(i) for i in range(len(gpus))]
    got = _train(gpus, kvstore, compression)
    want = _train(cpus, "device", compression)
    for k in want:
        for mirror in got[k]:
            np.testing.assert_array_equal(mirror, got[k][0], err_msg=f"GPU mirrors differ in {k}")
        if compression and compression["type"] in ("fp16", "bf16"):
            # On NCCL the wire is summed in half precision (the CPU devices sum float32(wire) * N), so
            # each step's gradient sum differs by up to N*u*sum|g| (u = 2^-11 / 2^-8, see
            # tests/test_narrow_wires.py for that bound on the sums themselves). Adam moves a weight by
            # at most about lr = 0.01 per step, in a direction that such a change of the gradient turns
            # by a relative 1e-2 at most where the gradient is not near 0: 1e-4 absolute.
            np.testing.assert_allclose(got[k][0], want[k][0], rtol=1e-2, atol=1e-4, err_msg=k)
        else:
            np.testing.assert_allclose(got[k][0], want[k][0], rtol=1e-4, atol=1e-5, err_msg=k)


@needs_gpu
def test_dist_sync_at_world_size_one_runs_the_multi_process_nccl_path():
    pytest.importorskip("mpi4py")
    got = _train([mx.gpu(0)], "dist_sync")
    want = _train([mx.cpu(0)], "device")
    for k in want:
        np.testing.assert_allclose(got[k][0], want[k][0], rtol=1e-4, atol=1e-5, err_msg=k)
