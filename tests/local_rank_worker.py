"""A rank of tests/test_local_rank.py (run under ``mpiexec -n 4`` with two emulated GPUs per rank).

Usage: ``python tests/local_rank_worker.py OUT_DIR``

``MXLITE_TEST_RANKS_PER_NODE=k`` (honoured by this worker only) simulates nodes of k ranks: the
node split becomes ``COMM_WORLD.Split(color=rank // k)`` instead of MPI's shared-memory split (all
ranks of the test share one machine). Each rank then picks its GPUs with ``mx.gpu_devices()``,
creates a 'dist_sync' KVStore, trains a small MLP for 3 steps on its own GPU and writes
``OUT_DIR/rank{r}.json`` (its rank, local rank, devices, the GPU its NCCL communicator used) and
``OUT_DIR/rank{r}.npz`` (the final parameters).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import mxlite as mx
import mxlite.device.topology as topology


def main(out: str) -> None:
    per_node = int(os.environ.get("MXLITE_TEST_RANKS_PER_NODE", "0"))
    if per_node:
        topology.node_communicator = lambda world: world.Split(color=world.Get_rank() // per_node,
                                                              key=world.Get_rank())
    devices = mx.gpu_devices()
    kv = mx.kv.create("dist_sync")
    rank = kv.rank
    mx.random.seed(rank)  # other initial values on every rank: the Trainer broadcasts rank 0's
    net = mx.nn.Sequential(mx.nn.Dense(8, activation="relu"), mx.nn.Dense(3))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=kv)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for step in range(3):
        rng = np.random.default_rng(100 * step + rank)
        x = mx.array(rng.normal(size=(4, 5)).astype(np.float32), device=devices[0])
        y = mx.array(rng.integers(0, 3, size=4).astype(np.float32), device=devices[0])
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(4)
    comm_devices = [str(d) for comm, _ in trainer._syncs.values() for d in comm.devices]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "size": kv.num_workers, "local_rank": kv.local_rank,
                   "local": list(topology.local_rank_and_size()), "devices": [str(d) for d in devices],
                   "comm_devices": comm_devices, "num_workers": trainer.num_workers}, f)
    np.savez(os.path.join(out, f"rank{rank}.npz"),
             **{k: p.data(devices[0]).asnumpy() for k, p in net.collect_params().items()})


if __name__ == "__main__":
    main(sys.argv[1])
