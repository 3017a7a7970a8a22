"""One MPI rank of tests/test_grad_reads_overlap_dist.py: one emulated GPU per process, kvstore 'dist_sync' (NCCL).

Usage: ``python tests/grad_reads_overlap_worker.py MODE OUT_DIR``

MODE 'sums': trains two equal MLPs side by side on this rank's own data, the first eagerly, the second
hybridized as CUDA graphs, clipping the summed gradients by their global norm the way MXNet scripts do:
``trainer.allreduce_grads()``, ``gluon.utils.clip_global_norm`` over ``Parameter.grad()``, then
``trainer.update(batch_size)``. After every step the two networks must hold the same bits.
MODE 'step': the hybridized MLP alone, clipping between ``backward`` and ``trainer.step``: once the step's
graph sums the gradients, the clip reads this process's own, and a warning says so.
Writes to ``OUT_DIR/rank{r}.json`` the norms of every step, the Trainer's replayed steps or updates and the
warnings raised.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

import mxlite as mx
from mxlite.comm.mpi import mpi_module

STEPS = 8
BATCH = 6


def _mlp() -> mx.nn.HybridSequential:
    net = mx.nn.HybridSequential()
    net.add(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(5, in_units=16))
    return net


def main(mode: str, out_dir: str) -> None:
    rank = mpi_module().COMM_WORLD.Get_rank()
    device = mx.gpu(0)
    nets, trainers = [], []
    for graphed in (False, True) if mode == "sums" else (True,):
        mx.random.seed(3)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=device)
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        nets.append(net)
        trainers.append(mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync",
                                   bucket_bytes=512))
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(100 + rank)
    norms: list[list[float]] = [[] for _ in nets]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            x = mx.array(rng.standard_normal((BATCH, 12)).astype(np.float32), device=device)
            y = mx.array(rng.integers(0, 5, BATCH).astype(np.float32), device=device)
            for which in range(len(nets)):
                with mx.autograd.record():
                    loss = loss_fn(nets[which](x), y)
                loss.backward()
                if mode == "sums":
                    trainers[which].allreduce_grads()
                grads = [p.grad(device) for p in nets[which].collect_params().values()]
                norms[which].append(mx.gluon.utils.clip_global_norm(grads, 0.5))
                if mode == "sums":
                    trainers[which].update(BATCH)
                else:
                    trainers[which].step(BATCH)
            for pe, pg in zip(nets[0].collect_params().values(), nets[-1].collect_params().values()):
                assert pe.data(device).asnumpy().tobytes() == pg.data(device).asnumpy().tobytes(), (step, pe.label)
    assert mode != "sums" or norms[0] == norms[1], norms
    result = {"norms": norms[-1], "replays": trainers[-1]._step_graphs.replays,
              "warnings": sorted({str(w.message) for w in caught})}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
