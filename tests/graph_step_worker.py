"""One MPI rank of tests/test_graph_step_dist.py: one emulated GPU per process, kvstore 'dist_sync' (NCCL).

Usage: ``python tests/graph_step_worker.py MODEL OVERLAP OUT_DIR [FAIL_ON]`` (MODEL 'mlp' or 'cnn_bn'; OVERLAP
'1' or '0'; FAIL_ON: a rank whose step captures fail, as if its step did something a graph cannot record)

Trains two equal networks side by side for ``STEPS`` steps on this rank's own data: the first eagerly, the
second hybridized with both static flags, so that after a few steps the Trainer's step (the buckets'
all-reduces and the fused update) is one CUDA graph. After every step the two must hold the same bits.
Writes to ``OUT_DIR/rank{r}.json`` the emulated GPU's counts for each step of the captured network (forward,
backward and ``trainer.step`` together), the collectives issued from the host (``NcclCommunicator`` calls),
the Trainer's replays and the warnings raised.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

import mxlite as mx
from mxlite._emulation import install as emu
from mxlite.comm.mpi import mpi_module
from mxlite.comm.nccl import NcclCommunicator
from mxlite.device import graphs as device_graphs

STEPS = 20


def _cnn_bn() -> mx.nn.HybridSequential:
    net = mx.nn.HybridSequential()
    net.add(mx.nn.Conv2D(4, 3, padding=1, in_channels=2), mx.nn.BatchNorm(in_channels=4), mx.nn.Activation("relu"),
            mx.nn.MaxPool2D(2), mx.nn.Dropout(0.3), mx.nn.Dense(5, in_units=4 * 4 * 4))
    return net


def _mlp() -> mx.nn.HybridSequential:
    net = mx.nn.HybridSequential()
    net.add(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(16, activation="relu", in_units=16),
            mx.nn.Dense(5, in_units=16))
    return net


MODELS = {  # name -> (make, input shape, optimizer, its parameters)
    "mlp": (_mlp, (6, 12), "adam", {"learning_rate": 0.01,
                                    "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=3, factor=0.7)}),
    "cnn_bn": (_cnn_bn, (6, 2, 8, 8), "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}),
}


def _count_host_collectives() -> list[int]:
    """A counter of the collectives ``NcclCommunicator`` issues from the host (a graph's replays are not calls)."""
    calls = [0]
    for name in ("allreduce", "allgather", "broadcast"):
        original = getattr(NcclCommunicator, name)

        def counted(self, *args, _original=original, **kwargs):
            calls[0] += 1
            return _original(self, *args, **kwargs)

        setattr(NcclCommunicator, name, counted)
    return calls


def _fail_step_captures() -> None:
    """Every capture of a Trainer's step on this rank fails after its collectives were recorded, in the update,
    as one that read a value on the host there would."""
    from mxlite.gluon import _graphs  # noqa: PLC0415

    original = _graphs._launch

    def launch(updates):
        if device_graphs.capturing():
            raise RuntimeError("D2H copy during stream capture (this rank's test double)")
        return original(updates)

    _graphs._launch = launch


def main(model: str, overlap: bool, out_dir: str, fail_on: int | None) -> None:
    rank = mpi_module().COMM_WORLD.Get_rank()
    host_collectives = _count_host_collectives()
    if rank == fail_on:
        _fail_step_captures()
    make, shape, optimizer, params = MODELS[model]
    device = mx.gpu(0)
    nets, trainers = [], []
    for graphed in (False, True):
        mx.random.seed(3)  # the same start on every rank (rank 0's values are broadcast anyway)
        net = make()
        net.initialize(mx.init.Xavier(), device=device)
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        nets.append(net)
        # Small buckets: the MLP's gradients travel as several all-reduces.
        trainers.append(mx.Trainer(net.collect_params(), optimizer, dict(params), kvstore="dist_sync",
                                   overlap=overlap, bucket_bytes=2048))
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(100 + rank)
    counts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            x = mx.array(rng.standard_normal(shape).astype(np.float32), device=device)
            y = mx.array(rng.integers(0, 5, shape[0]).astype(np.float32), device=device)
            for which in (1, 0):  # the captured network first, then the eager one with the same dropout draws
                mx.random.seed(300 + step)
                emu.reset_counters()
                host_collectives[0] = 0
                with mx.autograd.record():
                    loss = loss_fn(nets[which](x), y)
                loss.backward()
                trainers[which].step(shape[0])
                if which == 1:
                    c = emu.counters()[0]
                    counts.append({"graph_launches": c["graph_launches"], "host_syncs": c["host_syncs"],
                                   "kernel_launches": sum(c["kernel_launches"].values()),
                                   "nccl_calls": sum(c["nccl_calls"].values()),
                                   "h2d_copies": c["h2d_copies"], "d2h_copies": c["d2h_copies"],
                                   "host_collectives": host_collectives[0]})
            for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
                assert pe.data(device).asnumpy().tobytes() == pg.data(device).asnumpy().tobytes(), (step, pe.label)
    result = {"counts": counts, "replays": trainers[1]._step_graphs.replays,
              "step_graphs": [g["label"] for g in trainers[1]._step_graphs.info()],
              "warnings": sorted({str(w.message) for w in caught})}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None)
