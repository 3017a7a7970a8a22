"""One MPI rank of test_fakenccl: one emulated GPU per process, NCCL collectives over mpi4py."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from mxlite._emulation.install import install

install(1)
import cupy  # noqa: E402 - the double, installed just above
from cupy.cuda import nccl  # noqa: E402

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
uid = world.bcast(nccl.get_unique_id() if rank == 0 else None, root=0)
comm = nccl.NcclCommunicator(size, uid, rank)
assert comm.rank_id() == rank and comm.size() == size

stream = cupy.cuda.Stream(non_blocking=True)
buf = cupy.full(5, rank + 1.0, np.float32)
stream.wait_event(cupy.cuda.get_current_stream().record())
comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
stream.synchronize()
assert buf.get().tolist() == [size * (size + 1) / 2] * 5, buf.get()

half = cupy.full(3, 0.5 * (rank + 1), np.float16)
cupy.cuda.get_current_stream().synchronize()
nccl.groupStart()
comm.allReduce(half.data.ptr, half.data.ptr, 3, nccl.NCCL_FLOAT16, nccl.NCCL_AVG, 0)
nccl.groupEnd()
assert half.get().tolist() == [0.5 * (size + 1) / 2] * 3, half.get()

data = cupy.arange(4, dtype=np.int32) * (rank + 7)
cupy.cuda.get_current_stream().synchronize()
comm.bcast(data.data.ptr, 4, nccl.NCCL_INT32, size - 1, 0)
assert data.get().tolist() == [0, size + 6, 2 * (size + 6), 3 * (size + 6)], data.get()

gathered = cupy.zeros(2 * size, np.int64)
mine = cupy.full(2, rank, np.int64)
comm.allGather(mine.data.ptr, gathered.data.ptr, 2, nccl.NCCL_INT64, 0)
assert gathered.get().tolist() == [r for r in range(size) for _ in range(2)], gathered.get()
# A captured all-reduce: every rank captures, then every launch of the graphs sums what the buffers hold then.
from mxlite._emulation import install as emu  # noqa: E402

capturing = cupy.cuda.Stream(non_blocking=True)
with capturing:
    grads = cupy.zeros(4, np.float32)
    summed = cupy.zeros(4, np.float32)
    capturing.begin_capture()
    comm.allReduce(grads.data.ptr, summed.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, capturing.ptr)
    graph = capturing.end_capture()
    assert summed.get().tolist() == [0.0] * 4, summed.get()  # the run at capture was undone
    for step in range(3):
        grads.fill(float((rank + 1) * (step + 1)))
        graph.launch()
        assert summed.get().tolist() == [float(size * (size + 1) // 2 * (step + 1))] * 4, (step, summed.get())

# One rank capturing while the others call it eagerly would hang on GPUs: refused on every rank.
with capturing:
    if rank == 0:
        capturing.begin_capture()
    try:
        comm.allReduce(grads.data.ptr, summed.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, capturing.ptr)
    except emu.EmulatedGPUError as exc:
        assert "while capturing a CUDA graph" in str(exc), exc
    else:
        raise AssertionError("a collective captured on one rank only was not refused")
    finally:
        if rank == 0:
            capturing.end_capture()
print(f"fakenccl worker ok rank {rank}", flush=True)
