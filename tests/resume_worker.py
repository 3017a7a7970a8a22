"""A rank of the checkpoint-agreement tests (run by tests/test_resume_safety.py under ``mpiexec -n 2``).

Usage: ``python tests/resume_worker.py MODE OUT_DIR``

* ``odd_step``: rank r calls ``checkpoint.save`` with step 3 + r; each rank writes the error it
  got (or "no error") to ``OUT_DIR/rank{r}.txt``.
* ``hang_save``: rank 1 sleeps 60 s before ``checkpoint.save`` (the test sets
  ``MXLITE_COLLECTIVE_TIMEOUT``): rank 0 must end the job.
* ``hang_barrier``: rank 1 sleeps 60 s while rank 0 waits in ``KVStore.barrier()``.
* ``hang_nccl_id``: rank 1 sleeps 60 s while rank 0 broadcasts the NCCL unique id.
* ``load_fail``: both ranks save step 2; rank 1 damages its own trainer file; then every rank
  tries ``checkpoint.load`` and falls back to a fresh start when it fails (a common pattern).
  Each rank writes the error it got and a digest of its parameters to ``OUT_DIR/rank{r}.json``.
* ``write_fail``: rank 1 cannot write its trainer file (a full disk); each rank writes the error
  it got and what the folder holds afterwards to ``OUT_DIR/rank{r}.json``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import time

import numpy as np

import mxlite as mx


def _setup(rank: int):
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(8, in_units=4))
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore="dist_sync")
    with mx.autograd.record():
        loss = net(mx.array(np.full((2, 4), rank + 1.0, np.float32))).sum()
    loss.backward()
    trainer.step(2)
    return net, trainer


def _digest(net) -> str:
    h = hashlib.sha256()
    for p in net.collect_params().values():
        h.update(p.data().asnumpy().tobytes())
    return h.hexdigest()


def main(mode: str, out: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    net, trainer = _setup(rank)
    ckpt = os.path.join(out, "ckpt")
    if mode == "odd_step":
        try:
            mx.checkpoint.save(ckpt, net, trainer, step=3 + rank)
            caught = "no error"
        except ValueError as exc:
            caught = f"{type(exc).__name__}: {exc}"
        with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
            f.write(caught)
    elif mode == "hang_save":
        if rank == 1:
            time.sleep(60)
        mx.checkpoint.save(ckpt, net, trainer, step=1)
        print(f"rank {rank} passed the save", flush=True)
    elif mode == "hang_nccl_id":  # needs one GPU per rank (MXLITE_EMULATE_GPUS=1 without a GPU)
        from mxlite.comm import NcclCommunicator

        if rank == 1:
            time.sleep(60)
        NcclCommunicator([mx.gpu(0)], mpi_comm=MPI.COMM_WORLD)
        print(f"rank {rank} passed the NCCL set-up", flush=True)
    elif mode == "hang_barrier":
        if rank == 1:
            time.sleep(60)
        trainer._kvstore.barrier()
        print(f"rank {rank} passed the barrier", flush=True)
    elif mode == "load_fail":
        mx.checkpoint.save(ckpt, net, trainer, step=2)
        if rank == 1:
            path = os.path.join(ckpt, "step-00000002", "trainer-rank1.states")
            data = bytearray(open(path, "rb").read())
            data[len(data) // 2] ^= 0x10
            open(path, "wb").write(bytes(data))
        MPI.COMM_WORLD.Barrier()
        fresh, fresh_trainer = _setup(rank)
        for p in fresh.collect_params().values():
            p.set_data(np.zeros(p.shape, np.float32))
        try:
            mx.checkpoint.load(ckpt, fresh, fresh_trainer)
            caught = "no error"
        except (ValueError, FileNotFoundError) as exc:
            caught = f"{type(exc).__name__}: {exc}"
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump({"error": caught, "digest": _digest(fresh)}, f)
    elif mode == "write_fail":
        if rank == 1:
            def full_disk(fname):
                raise OSError(errno.ENOSPC, "No space left on device", os.fspath(fname))
            trainer.save_states = full_disk
        try:
            mx.checkpoint.save(ckpt, net, trainer, step=1)
            caught = "no error"
        except OSError as exc:
            caught = f"{type(exc).__name__}: {exc}"
        MPI.COMM_WORLD.Barrier()
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump({"error": caught, "left": sorted(os.listdir(ckpt))}, f)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
