"""A rank of the sharded-collective tests (run by tests/test_shard_collectives.py under ``mpiexec -n 2``).

Usage: ``python tests/shard_worker.py MODE OUT_DIR [ARG]``

* ``mpi DEVICES``: an MpiCommunicator over ``DEVICES`` CPU devices of this rank. For every case of
  :data:`CASES` (length, dtype) and both ``average`` settings, reduce-scatters a copy of the
  case's buffers and all-gathers it, and all-reduces another copy; writes to
  ``OUT_DIR/rank{r}.npz`` the own shard after the reduce-scatter (``rs-...``), the buffers after
  the all-gather (``ag-...``) and after the all-reduce (``ar-...``), and to ``OUT_DIR/rank{r}.json``
  whether the reduce-scatter left the rest of every buffer untouched.
* ``nccl``: the same with a NcclCommunicator over one (emulated) GPU per rank, the NCCL unique id
  broadcast over MPI; also writes the NCCL counters of one reduce-scatter plus all-gather and of
  one all-reduce of a buffer of :data:`EVEN` elements to the JSON file.
* ``hang COLLECTIVE``: rank 1 sleeps instead of joining ``reduce_scatter`` or
  ``allgather_shards`` (run with ``MXLITE_COLLECTIVE_TIMEOUT`` set).

Every rank's buffers come from :func:`inputs`, so the test can rebuild them.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

import mxlite as mx
from mxlite.comm import MpiCommunicator

# (length, dtype): lengths not a multiple of N * 16, below N * 16, zero, and a multiple of N * 16 for N = 2 and 4
CASES = [(0, "float32"), (5, "float32"), (40, "float16"), (100, "float32"), (1000, "float16"), (1000, "float32"),
         (4 * 16 * 3, "float32"), (4 * 16 * 3, "float16")]
EVEN = 2 * 16 * 5  # a multiple of contributions * ALIGN for 2 contributions


def inputs(rank: int, devices: int, length: int, dtype: str) -> list[np.ndarray]:
    """The buffers of ``rank``'s devices: values spread over six orders of magnitude (so sums round)."""
    out = []
    for d in range(devices):
        rng = np.random.default_rng([length, rank, d])
        scale = 10.0 ** rng.uniform(-3, 3, size=length)
        if dtype == "float16":
            scale = 10.0 ** rng.uniform(-2, 2, size=length)  # float16 sums of two ranks stay finite
        out.append((rng.normal(size=length) * scale).astype(dtype))
    return out


def key(length: int, dtype: str, average: bool) -> str:
    return f"{length}-{dtype}-{'mean' if average else 'sum'}"


def _run_cases(comm, to_device, to_host) -> tuple[dict[str, np.ndarray], dict[str, bool]]:
    arrays, untouched = {}, {}
    devices = len(comm.devices)
    for length, dtype in CASES:
        src = inputs(comm.rank, devices, length, dtype)
        for average in (False, True):
            k = key(length, dtype, average)
            bufs = to_device(src)
            comm.reduce_scatter(bufs, average=average).wait()
            host = to_host(bufs)
            shards = comm.local_shards(length)
            for j, ((start, end), got, before) in enumerate(zip(shards, host, src)):
                arrays[f"rs-{k}-{j}"] = got[start:end]
                untouched[f"{k}-{j}"] = (got[:start].tobytes() == before[:start].tobytes()
                                         and got[end:].tobytes() == before[end:].tobytes())
            comm.allgather_shards(bufs).wait()
            for j, got in enumerate(to_host(bufs)):
                arrays[f"ag-{k}-{j}"] = got
            bufs = to_device(src)
            comm.allreduce(bufs, average=average).wait()
            for j, got in enumerate(to_host(bufs)):
                arrays[f"ar-{k}-{j}"] = got
    return arrays, untouched


def _write(out: str, rank: int, arrays: dict[str, np.ndarray], info: dict) -> None:
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)


def mpi(out: str, devices: str) -> None:
    comm = MpiCommunicator([mx.cpu(i) for i in range(int(devices))])
    arrays, untouched = _run_cases(comm, lambda src: [x.copy() for x in src], lambda bufs: bufs)
    _write(out, comm.rank, arrays, {"untouched": untouched, "size": comm.size})


def nccl(out: str) -> None:
    from mpi4py import MPI

    from mxlite._emulation import install
    from mxlite.comm import NcclCommunicator

    gpu = mx.gpu(0)
    comm = NcclCommunicator([gpu], mpi_comm=MPI.COMM_WORLD)

    def to_device(src):
        with gpu.use():
            return [gpu.xp.asarray(x) for x in src]

    def to_host(bufs):
        with gpu.use():
            return [b.get() for b in bufs]

    arrays, untouched = _run_cases(comm, to_device, to_host)
    counts = {}
    for name in ("sharded", "allreduce"):
        bufs = to_device(inputs(comm.rank, 1, EVEN, "float32"))
        install.reset_counters()
        if name == "sharded":
            comm.reduce_scatter(bufs).wait()
            comm.allgather_shards(bufs).wait()
        else:
            comm.allreduce(bufs).wait()
        with gpu.use():
            gpu.xp.cuda.get_current_stream().synchronize()
        c = install.counters()[0]
        counts[name] = {"calls": c["nccl_calls"], "ring_bytes": c["nccl_ring_bytes"]}
    _write(out, comm.rank, arrays, {"untouched": untouched, "size": comm.size, "counts": counts})


def hang(out: str, collective: str) -> None:
    comm = MpiCommunicator([mx.cpu(0)])
    if comm.rank == 1:
        time.sleep(120)  # alive, but never reaching the collective
    getattr(comm, collective)([np.ones(64, np.float32)])  # rank 0 waits here for rank 1, which never comes


if __name__ == "__main__":
    modes = {"mpi": mpi, "nccl": nccl, "hang": hang}
    modes[sys.argv[1]](*sys.argv[2:])
