"""The NCCL double (cupy.cuda.nccl of mxlite._emulation): local communicators, groups, numerics, MPI ranks."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi_helpers import MPIEXEC, mpirun_ok, needs_mpi

from mxlite._emulation import install as emu
from mxlite._emulation.fakecupy.cuda._reduce import bf16_to_f32, f32_to_bf16

EmulatedGPUError = emu.EmulatedGPUError
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakenccl_worker.py")


def _per_device(cp, n, make):
    out = []
    for i in range(n):
        with cp.cuda.Device(i):
            out.append(make(i))
    return out


def _sync_all(cp, n):
    for i in range(n):
        cp.cuda.Device(i).synchronize()


def test_constants_are_nccls(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    assert (nccl.NCCL_INT8, nccl.NCCL_UINT8, nccl.NCCL_INT32, nccl.NCCL_UINT32, nccl.NCCL_INT64, nccl.NCCL_UINT64,
            nccl.NCCL_FLOAT16, nccl.NCCL_FLOAT32, nccl.NCCL_FLOAT64, nccl.NCCL_BFLOAT16) == tuple(range(10))
    assert (nccl.NCCL_FLOAT, nccl.NCCL_HALF, nccl.NCCL_DOUBLE, nccl.NCCL_INT) == (7, 6, 8, 2)
    assert (nccl.NCCL_SUM, nccl.NCCL_PROD, nccl.NCCL_MAX, nccl.NCCL_MIN, nccl.NCCL_AVG) == (0, 1, 2, 3, 4)
    assert nccl.available and nccl.get_version() >= 21800 and len(nccl.get_unique_id()) == 128


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype,code", [("float32", 7), ("float16", 6), ("int32", 2), ("int64", 4), ("float64", 8)])
@pytest.mark.parametrize("op", ["sum", "max", "avg"])
def test_allreduce_local(cp, n, dtype, code, op):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll(list(range(n)))
    assert [c.rank_id() for c in comms] == list(range(n)) and [c.device_id() for c in comms] == list(range(n))
    host = [np.arange(1, 11).astype(dtype) * (r + 1) for r in range(n)]
    bufs = _per_device(cp, n, lambda i: cp.asarray(host[i]))
    _sync_all(cp, n)
    nccl_op = {"sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "avg": nccl.NCCL_AVG}[op]
    nccl.groupStart()
    for comm, buf in zip(comms, bufs):
        comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, code, nccl_op, 0)
    nccl.groupEnd()
    stacked = np.stack(host).astype(np.float64)
    expected = {"sum": stacked.sum(0), "max": stacked.max(0), "avg": stacked.mean(0)}[op]
    if op == "avg" and dtype.startswith("int"):
        expected = np.trunc(expected)
    for i, buf in enumerate(bufs):
        with cp.cuda.Device(i):
            np.testing.assert_allclose(buf.get().astype(np.float64), expected, rtol=2e-3, err_msg=f"rank {i}")
    assert emu.counters()[0]["nccl_calls"] == {"allReduce": 1}
    assert emu.counters()[0]["nccl_bytes"] == {dtype: 10 * np.dtype(dtype).itemsize}


def test_float16_sums_in_float16_like_nccl(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll(4)
    # 2048 + 1 + 1 + 1 in float16, rank by rank: each +1 rounds back to 2048 (ulp there is 2).
    vals = [2048.0, 1.0, 1.0, 1.0]
    bufs = _per_device(cp, 4, lambda i: cp.full(3, vals[i], np.float16))
    _sync_all(cp, 4)
    nccl.groupStart()
    for comm, buf in zip(comms, bufs):
        comm.allReduce(buf.data.ptr, buf.data.ptr, 3, nccl.NCCL_FLOAT16, nccl.NCCL_SUM, 0)
    nccl.groupEnd()
    with cp.cuda.Device(2):
        assert bufs[2].get().tolist() == [2048.0] * 3  # float32 accumulation would give 2051 -> 2052


def test_bfloat16_allreduce_rounds_to_nearest_even(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll(2)
    a = np.array([1.0, 3.0, -2.5, np.nan, 256.0], np.float32)
    b = np.array([2.0 ** -8, 0.5, 2.5, 1.0, 1.0], np.float32)
    bits = [f32_to_bf16(a), f32_to_bf16(b)]
    bufs = _per_device(cp, 2, lambda i: cp.asarray(bits[i]))
    _sync_all(cp, 2)
    nccl.groupStart()
    for comm, buf in zip(comms, bufs):
        comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM, 0)
    nccl.groupEnd()
    with cp.cuda.Device(1):
        got = bf16_to_f32(bufs[1].get())
    # 1 + 2^-8 is a tie between 1 and 1+2^-7: to even -> 1.0; 256 + 1 -> tie -> 256.
    np.testing.assert_array_equal(got[[0, 1, 2, 4]], [1.0, 3.5, 0.0, 256.0])
    assert np.isnan(got[3])


def test_bcast_from_nonzero_root_allgather_reducescatter(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    n = 4
    comms = nccl.NcclCommunicator.initAll(n)
    bufs = _per_device(cp, n, lambda i: cp.full(5, float(i), np.float32))
    _sync_all(cp, n)
    nccl.groupStart()
    for comm, buf in zip(comms, bufs):
        comm.bcast(buf.data.ptr, 5, nccl.NCCL_FLOAT32, 2, 0)
    nccl.groupEnd()
    for i, buf in enumerate(bufs):
        with cp.cuda.Device(i):
            assert buf.get().tolist() == [2.0] * 5

    sends = _per_device(cp, n, lambda i: cp.arange(3, dtype=np.int64) + 10 * i)
    recvs = _per_device(cp, n, lambda i: cp.zeros(3 * n, np.int64))
    _sync_all(cp, n)
    nccl.groupStart()
    for comm, s, r in zip(comms, sends, recvs):
        comm.allGather(s.data.ptr, r.data.ptr, 3, nccl.NCCL_INT64, 0)
    nccl.groupEnd()
    with cp.cuda.Device(3):
        assert recvs[3].get().tolist() == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]

    sends = _per_device(cp, n, lambda i: cp.arange(2 * n, dtype=np.float32) * (i + 1))
    recvs = _per_device(cp, n, lambda i: cp.zeros(2, np.float32))
    _sync_all(cp, n)
    nccl.groupStart()
    for comm, s, r in zip(comms, sends, recvs):
        comm.reduceScatter(s.data.ptr, r.data.ptr, 2, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    nccl.groupEnd()
    total = np.arange(2 * n, dtype=np.float32) * sum(range(1, n + 1))
    for i, r in enumerate(recvs):
        with cp.cuda.Device(i):
            assert r.get().tolist() == total[2 * i:2 * i + 2].tolist()


def test_without_group_the_last_rank_completes_the_collective(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll([0, 1])
    bufs = _per_device(cp, 2, lambda i: cp.full(4, i + 1.0, np.float32))
    _sync_all(cp, 2)
    comms[0].allReduce(bufs[0].data.ptr, bufs[0].data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    with cp.cuda.Device(0), pytest.raises(EmulatedGPUError, match="waits for the calls of its other ranks"):
        bufs[0].get()  # rank 1 has not called yet
    comms[1].allReduce(bufs[1].data.ptr, bufs[1].data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    with cp.cuda.Device(0):
        assert bufs[0].get().tolist() == [3.0] * 4


def test_stream_rules_apply_to_nccl(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll(2)
    streams = _per_device(cp, 2, lambda i: cp.cuda.Stream(non_blocking=True))
    bufs = _per_device(cp, 2, lambda i: cp.ones(4, np.float32))  # written by the null streams
    with pytest.raises(EmulatedGPUError, match=r"NCCL allReduce.*race on alloc"):
        comms[0].allReduce(bufs[0].data.ptr, bufs[0].data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                           streams[0].ptr)
    for i in range(2):
        with cp.cuda.Device(i):
            streams[i].wait_event(cp.cuda.get_current_stream().record())
    nccl.groupStart()
    for comm, buf, s in zip(comms, bufs, streams):
        comm.allReduce(buf.data.ptr, buf.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
    nccl.groupEnd()
    with cp.cuda.Device(0), pytest.raises(EmulatedGPUError, match="read-after-write"):
        bufs[0].get()  # the null stream has not waited for the communication stream
    with cp.cuda.Device(0):
        cp.cuda.get_current_stream().wait_event(streams[0].record())
        assert bufs[0].get().tolist() == [2.0] * 4


def test_bad_pointers_and_counts_raise(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll(2)
    with cp.cuda.Device(0):
        a = cp.zeros(4, np.float32)
    with cp.cuda.Device(1):
        b = cp.zeros(4, np.float32)
    host = np.zeros(4, np.float32)
    with pytest.raises(EmulatedGPUError, match="not inside any live allocation"):
        comms[0].allReduce(host.ctypes.data, host.ctypes.data, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    with pytest.raises(EmulatedGPUError, match="overflows"):
        comms[0].allReduce(a.data.ptr, a.data.ptr, 5, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    with pytest.raises(EmulatedGPUError, match="not on gpu\\(0\\)"):
        comms[0].allReduce(b.data.ptr, b.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)
    with pytest.raises(nccl.NcclError):
        comms[0].allReduce(a.data.ptr, a.data.ptr, 4, 42, nccl.NCCL_SUM, 0)
    with pytest.raises(nccl.NcclError):
        nccl.groupEnd()


def test_mxlite_nccl_communicator_on_the_double(cp):
    """mxlite's own NcclCommunicator (comm/nccl.py) runs unmodified on two emulated GPUs."""
    from mxlite.comm.nccl import NcclCommunicator  # noqa: PLC0415
    from mxlite.device import Device  # noqa: PLC0415

    devices = [object.__new__(Device) for _ in range(2)]
    for i, d in enumerate(devices):
        d.device_type, d.device_id, d._token = "gpu", i, []
    try:
        comm = NcclCommunicator(devices)
    except Exception as exc:  # the Communicator base may validate devices through mxlite.device
        pytest.skip(f"mxlite's communicator needs the lead's device.py hook: {exc}")
    bufs = _per_device(cp, 2, lambda i: cp.full(6, i + 1.0, np.float32))
    comm.allreduce(bufs).wait()
    for i, buf in enumerate(bufs):
        with cp.cuda.Device(i):
            assert buf.get().tolist() == [3.0] * 6


def test_a_one_rank_collective_is_captured_and_replayed_on_the_contents_at_launch(cp):
    """A captured collective is a graph node: the capture leaves the buffers as they were, each launch runs it
    again on what the send buffer holds then, and counts it."""
    from cupy.cuda import nccl  # noqa: PLC0415

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        send = cp.arange(6, dtype=np.float32)
        recv = cp.zeros(6, np.float32)
        stream.begin_capture()
        comm.allReduce(send.data.ptr, recv.data.ptr, 6, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
        graph = stream.end_capture()
        assert recv.get().tolist() == [0.0] * 6  # the run at capture was undone
        emu.reset_counters()
        for value in (2.0, 7.0):
            send.fill(value)
            graph.launch()
            assert recv.get().tolist() == [value] * 6
    counts = emu.counters()[0]
    assert counts["graph_launches"] == 2 and counts["nccl_calls"] == {"allReduce": 2}


def test_collectives_of_ranks_sharing_the_process_cannot_be_captured(cp):
    from cupy.cuda import nccl  # noqa: PLC0415

    comms = nccl.NcclCommunicator.initAll([0, 1])
    with cp.cuda.Device(0):
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            buf = cp.ones(4, np.float32)
            stream.begin_capture()
            with pytest.raises(EmulatedGPUError, match="2 ranks of this communicator live in this process"):
                comms[0].allReduce(buf.data.ptr, buf.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
            stream.end_capture()
            assert buf.get().tolist() == [1.0] * 4


@pytest.mark.mpi
@needs_mpi
def test_two_mpi_ranks_allreduce_and_bcast():
    assert MPIEXEC
    result = mpirun_ok(2, WORKER, timeout=180)
    assert result.stdout.count("fakenccl worker ok") == 2, result.stdout + result.stderr
