"""A rank of the hardening tests (run by tests/test_hardening.py under ``mpiexec -n 2``).

Usage: ``python tests/hardening_worker.py MODE OUT_DIR``

* ``mixed_devices`` (N3): rank 0 trains on an emulated GPU, rank 1 on a CPU device, with
  ``kvstore='dist_sync'``. Each rank writes what its Trainer raised (``null`` when nothing) to
  ``OUT_DIR/rank{r}.json`` and exits 0. Expected: every rank raises that the ranks disagree on
  their device kinds, instead of one rank waiting for the NCCL unique id while the other waits in
  an MPI all-gather.
* ``nccl_hang`` (N4): both ranks build an NCCL communicator on one emulated GPU each; rank 1 then
  sleeps (alive, never reaching the collective) while rank 0 all-reduces a GPU buffer and reads
  it back. Run with ``MXLITE_COLLECTIVE_TIMEOUT``: expected, the job ends with status 124 and rank 0
  names the NCCL collective that did not complete, as the CPU (MPI) path does.

The GPU of a rank is chosen here, before mxlite is imported: ``MXLITE_EMULATE_GPUS`` is set from
the rank the launcher gives (``PMI_RANK``), so one job can mix GPU and CPU ranks.
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE, OUT = sys.argv[1], sys.argv[2]
RANK = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
if MODE == "mixed_devices":
    os.environ["MXLITE_EMULATE_GPUS"] = "1" if RANK == 0 else "0"
elif MODE == "nccl_hang":
    os.environ["MXLITE_EMULATE_GPUS"] = "1"

import numpy as np  # noqa: E402

import mxlite as mx  # noqa: E402


def mixed_devices() -> None:
    device = mx.gpu(0) if RANK == 0 else mx.cpu(0)
    caught = None
    try:
        net = mx.nn.Dense(3, in_units=4)
        net.initialize(device=device)
        trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync")
        x = mx.nd.array(np.ones((2, 4), np.float32), device=device)
        with mx.autograd.record():
            loss = net(x).sum()
        loss.backward()
        trainer.step(2)
    except (ValueError, RuntimeError) as exc:
        caught = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
        json.dump(caught, f)


def nccl_hang() -> None:
    from mpi4py import MPI  # noqa: PLC0415

    from mxlite.comm.nccl import NcclCommunicator  # noqa: PLC0415

    comm = NcclCommunicator([mx.gpu(0)], mpi_comm=MPI.COMM_WORLD)
    if comm.rank == 1:
        print("rank 1 hangs before the NCCL all-reduce", flush=True)
        time.sleep(120)
    with mx.gpu(0).use():
        import cupy  # noqa: PLC0415 - the emulated CuPy of this rank

        buf = cupy.ones(4, dtype=cupy.float32)
        comm.allreduce([buf]).wait()
        print(f"rank {comm.rank} passed the NCCL all-reduce: {float(buf.sum().get())}", flush=True)


if __name__ == "__main__":
    {"mixed_devices": mixed_devices, "nccl_hang": nccl_hang}[MODE]()
