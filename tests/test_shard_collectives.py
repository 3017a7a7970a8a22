"""Sharded collectives (the ground work of ZeRO-1): ``shard_bounds``, ``reduce_scatter``, ``allgather_shards``.

* ``shard_bounds``: the shards tile the buffer, start on multiples of ALIGN, differ by at most
  ALIGN elements (hypothesis);
* every carrier (Local on 2 and 3 CPU devices and on 2 emulated GPUs, NCCL on 2 emulated GPUs,
  MPI with ``mpiexec -n 2`` on 1 and 2 CPU devices per rank and on one emulated GPU per rank over
  NCCL): after ``reduce_scatter`` each device's own shard holds ``allreduce``'s bits there (the
  Local and MPI carriers leave the rest untouched), and after ``allgather_shards`` every buffer
  equals ``allreduce``'s result bit for bit, for uneven lengths (not a multiple of N * ALIGN,
  below it, zero), float32 and float16, sum and mean;
* NCCL: one ``reduceScatter`` and one ``allGather`` per device, whose ring bytes add up to one
  ``allReduce``'s; the Local GPU carrier spreads the additions evenly over the devices;
* the narrow (fp16/bf16) wire reduce-scatters with the all-reduce's bits in each own shard;
* ``MXLITE_COLLECTIVE_TIMEOUT`` ends a job whose rank never joins a sharded collective.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mxlite as mx
from mxlite import comm
from mxlite.store import ALIGN
from tests import deadlines
from tests.mpi_helpers import ROOT, mpirun, mpirun_ok, needs_mpi
from tests.shard_worker import CASES, EVEN, inputs, key

WORKER = os.path.join(ROOT, "tests", "shard_worker.py")
LENGTHS = [0, 1, 5, 16, 40, 47, 100, 2 * 3 * ALIGN * 4, 1000]
needs_two_gpus = pytest.mark.skipif(mx.num_gpus() < 2, reason="needs 2 GPUs (or the emulation)")


# -- shard_bounds ----------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(length=st.integers(0, 5000), parts=st.integers(1, 70), align=st.sampled_from([1, 2, 3, 16, 64]))
def test_shards_tile_the_buffer_aligned_and_balanced(length, parts, align):
    bounds = comm.shard_bounds(length, parts, align)
    assert len(bounds) == parts
    assert bounds[0][0] == 0 and bounds[-1][1] == length
    for (_, end), (start, _) in zip(bounds, bounds[1:]):
        assert end == start  # contiguous, in order
    for start, end in bounds:
        assert start <= end
        assert start % align == 0 and (end % align == 0 or end == length)
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= align
    blocks = -(-length // align)
    assert max(sizes) <= -(-blocks // parts) * align  # no shard longer than an even split of the blocks


def test_shard_bounds_examples_and_errors():
    assert comm.shard_bounds(40, 2) == [(0, 16), (16, 40)]  # the longer shard is the last: 16 and 24, not 32 and 8
    assert comm.shard_bounds(20, 4) == [(0, 0), (0, 0), (0, 16), (16, 20)]
    assert comm.shard_bounds(0, 3) == [(0, 0)] * 3
    assert comm.shard_bounds(128, 4) == [(0, 32), (32, 64), (64, 96), (96, 128)]
    assert comm.shard_bounds(7, 1) == [(0, 7)]
    assert comm.shard_bounds(np.int64(33), np.int32(2), 1) == [(0, 16), (16, 33)]
    for args, message in [((-1, 2), "length must be >= 0 elements, got -1"), ((4, 0), "parts must be >= 1, got 0"),
                          ((4, 2, 0), "align must be >= 1 element, got 0")]:
        with pytest.raises(ValueError, match=message):
            comm.shard_bounds(*args)


def test_a_communicator_numbers_shards_by_rank_then_device():
    c = comm.LocalCommunicator([mx.cpu(0), mx.cpu(1), mx.cpu(2)])
    assert c.shards(100) == comm.shard_bounds(100, 3) == c.local_shards(100)

    class TwoRanks(comm.LocalCommunicator):
        rank, size = 1, 2

    assert TwoRanks([mx.cpu(0), mx.cpu(1)]).local_shards(160) == comm.shard_bounds(160, 4)[2:]


# -- the same checks for every carrier -----------------------------------------------------------------
def _random(n_buffers: int, length: int, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Values over six orders of magnitude (three for float16), so that the order of additions shows."""
    rng = np.random.default_rng([seed, length, n_buffers])
    spread = 2 if dtype == "float16" else 3
    return [(rng.normal(size=length) * 10.0 ** rng.uniform(-spread, spread, size=length)).astype(dtype)
            for _ in range(n_buffers)]


def _check_sharded_equals_allreduce(c, src, average, to_device, to_host, untouched=True):
    """reduce_scatter: own shard == allreduce's there (rest untouched); then allgather_shards: == allreduce."""
    length = src[0].size
    want = to_device(src)
    c.allreduce(want, average=average).wait()
    want = to_host(want)
    bufs = to_device(src)
    c.reduce_scatter(bufs, average=average).wait()
    got = to_host(bufs)
    for j, ((start, end), mine, before) in enumerate(zip(c.local_shards(length), got, src)):
        assert mine[start:end].tobytes() == want[j][start:end].tobytes(), f"device {j}'s shard [{start}, {end})"
        if untouched:
            assert mine[:start].tobytes() == before[:start].tobytes(), f"device {j}: before its shard"
            assert mine[end:].tobytes() == before[end:].tobytes(), f"device {j}: after its shard"
    c.allgather_shards(bufs).wait()
    for j, (mine, theirs) in enumerate(zip(to_host(bufs), want)):
        assert mine.dtype == theirs.dtype and mine.tobytes() == theirs.tobytes(), f"device {j} after the all-gather"


def _host(src):
    return [x.copy() for x in src]


@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("length", LENGTHS)
def test_local_cpu_sharded_sum_is_the_allreduce_bit_for_bit(devices, dtype, length):
    c = comm.LocalCommunicator([mx.cpu(i) for i in range(devices)])
    src = _random(devices, length, dtype)
    for average in (False, True):
        _check_sharded_equals_allreduce(c, src, average, _host, _host)
    # and allreduce's own bits are device order: ((b0 + b1) + b2)
    bufs = _host(src)
    c.reduce_scatter(bufs)
    c.allgather_shards(bufs)
    total = src[0].copy()
    for x in src[1:]:
        total += x
    assert bufs[-1].tobytes() == total.tobytes()


@settings(max_examples=40, deadline=None)
@given(devices=st.integers(1, 4), length=st.integers(0, 300), dtype=st.sampled_from(["float32", "float16", "float64"]),
       average=st.booleans())
def test_local_sharded_sum_is_the_allreduce_for_any_length(devices, length, dtype, average):
    c = comm.LocalCommunicator([mx.cpu(i) for i in range(devices)])
    _check_sharded_equals_allreduce(c, _random(devices, length, dtype, seed=7), average, _host, _host)


def test_sharded_collectives_reject_bad_buffers():
    c = comm.LocalCommunicator([mx.cpu(0), mx.cpu(1)])
    with pytest.raises(ValueError, match=r"reduce_scatter: buffers must be flat \(1-D\), got shape \(2, 3\)"):
        c.reduce_scatter([np.zeros((2, 3)), np.zeros((2, 3))])
    with pytest.raises(ValueError, match=r"allgather_shards: the buffer on cpu\(1\) is float64\(5,\)"):
        c.allgather_shards([np.zeros(4), np.zeros(5)])
    with pytest.raises(ValueError, match="1 buffers for 2 devices"):
        c.reduce_scatter([np.zeros(4)])


def test_one_device_reduce_scatter_is_the_identity_and_its_mean_divides_by_one():
    c = comm.LocalCommunicator([mx.cpu(0)])
    buf = np.arange(5, dtype=np.float32)
    c.reduce_scatter([buf], average=True)
    c.allgather_shards([buf])
    assert buf.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


# -- GPUs (emulated where none is present) -------------------------------------------------------------
def _gpu_io(devices):
    def to_device(src):
        out = []
        for d, x in zip(devices, src):
            with d.use():
                out.append(d.xp.asarray(x))
        return out

    def to_host(bufs):
        out = []
        for d, b in zip(devices, bufs):
            with d.use():
                out.append(b.get())
        return out

    return to_device, to_host


def _emulation():
    if not mx.device.devices._emulated_gpus():
        pytest.skip("counts what the emulated GPUs do")
    from mxlite._emulation import install

    return install


def _synchronize(devices):
    for d in devices:
        with d.use():
            d.xp.cuda.get_current_stream().synchronize()


def _counted(install, devices, bufs, run):
    """The emulated GPUs' counters of ``run(bufs)`` alone."""
    _synchronize(devices)
    install.reset_counters()
    run(bufs)
    _synchronize(devices)
    return install.counters()


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("carrier", ["local", "nccl"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_sharded_sum_is_the_allreduce_bit_for_bit(carrier, dtype):
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.LocalCommunicator(gpus) if carrier == "local" else comm.NcclCommunicator(gpus)
    to_device, to_host = _gpu_io(gpus)
    # On real NCCL the order of additions in reduceScatter and allReduce may differ: bits are promised
    # between the GPUs (the all-gather copies), and against allReduce only on the emulated NCCL.
    exact = carrier == "local" or mx.device.devices._emulated_gpus()
    for length in LENGTHS:
        for average in (False, True):
            src = _random(2, length, dtype)
            if exact:
                _check_sharded_equals_allreduce(c, src, average, to_device, to_host, untouched=carrier == "local")
            else:  # pragma: no cover - real GPUs
                bufs = to_device(src)
                c.reduce_scatter(bufs, average=average).wait()
                c.allgather_shards(bufs).wait()
                got = to_host(bufs)
                assert got[0].tobytes() == got[1].tobytes()
                want = (src[0].astype(np.float64) + src[1]) / (2 if average else 1)
                np.testing.assert_allclose(got[0], want, rtol=2e-3 if dtype == "float16" else 1e-6)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("length, padded", [(EVEN, EVEN), (1000, 2 * 504), (40, 2 * 24), (5, 2 * 5)])
def test_nccl_reduce_scatter_and_allgather_move_the_bytes_of_one_allreduce(length, padded):
    """One reduceScatter and one allGather per GPU; their ring bytes add up to those of an allReduce of the
    buffer when its length is a multiple of N * ALIGN, else of the buffer padded to N equal chunks."""
    install = _emulation()
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.NcclCommunicator(gpus)
    to_device, _ = _gpu_io(gpus)
    counts = {
        "sharded": _counted(install, gpus, to_device(_random(2, length, "float32")),
                            lambda b: (c.reduce_scatter(b).wait(), c.allgather_shards(b).wait())),
        "allreduce": _counted(install, gpus, to_device(_random(2, length, "float32")), lambda b: c.allreduce(b).wait()),
        "allreduce padded": _counted(install, gpus, to_device(_random(2, padded, "float32")),
                                     lambda b: c.allreduce(b).wait()),
    }
    for gpu in (0, 1):
        sharded, plain = counts["sharded"][gpu], counts["allreduce padded"][gpu]
        assert sharded["nccl_calls"] == {"reduceScatter": 1, "allGather": 1}
        assert sum(sharded["nccl_ring_bytes"].values()) == plain["nccl_ring_bytes"]["allReduce"] == 4 * padded
        assert sharded["nccl_ring_bytes"]["reduceScatter"] == sharded["nccl_ring_bytes"]["allGather"] == 2 * padded
        # the send-buffer convention: the reduce-scatter sends the whole (padded) buffer, the all-gather its shard
        assert sharded["nccl_bytes"] == {"float32": 4 * (padded + padded // 2)}
        assert counts["allreduce"][gpu]["nccl_bytes"] == {"float32": 4 * length}
        assert sharded["d2h_bytes"] == 0
        launches = sum(sharded["op_launches"].values())
        if length == padded:
            assert launches == 0  # in place: no staging
        else:  # a fill and at most 2 + 1 copies around the reduce-scatter, 1 + 2 around the all-gather
            assert launches <= 7, sharded["op_launches"]


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 3000), parts=st.integers(1, 40))
def test_shards_move_to_and_from_equal_chunks(length, parts):
    from mxlite.comm.nccl import _move_shards

    bounds = comm.shard_bounds(length, parts)
    chunk = max(end - start for start, end in bounds)
    flat = np.arange(length, dtype=np.int64)
    padded = np.full(parts * chunk, -1, np.int64)
    _move_shards(flat, padded, bounds, chunk, to_padded=True)
    for k, (start, end) in enumerate(bounds):
        assert padded[k * chunk:k * chunk + end - start].tolist() == list(range(start, end))
        assert (padded[k * chunk + end - start:(k + 1) * chunk] == -1).all()
    back = np.zeros(length, np.int64)
    _move_shards(back, padded, bounds, chunk, to_padded=False)
    assert back.tolist() == flat.tolist()


@pytest.mark.gpu
@needs_two_gpus
def test_local_gpus_share_the_additions_and_move_the_allreduces_peer_bytes():
    install = _emulation()
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.LocalCommunicator(gpus)
    to_device, _ = _gpu_io(gpus)
    bufs = to_device(_random(2, 1024, "float32"))
    counts = {name: _counted(install, gpus, bufs, getattr(c, name))
              for name in ("reduce_scatter", "allgather_shards", "allreduce")}
    added = [counts["reduce_scatter"][g]["op_bytes"]["__iadd__"] for g in (0, 1)]
    assert added[0] == added[1] == counts["allreduce"][0]["op_bytes"]["__iadd__"] // 2  # each GPU adds half
    assert "__iadd__" not in counts["allreduce"][1]["op_bytes"]  # the all-reduce adds on the first GPU only
    for g in (0, 1):
        peer = counts["reduce_scatter"][g]["p2p_bytes"] + counts["allgather_shards"][g]["p2p_bytes"]
        assert peer == counts["allreduce"][g]["p2p_bytes"] == 4 * 1024


@pytest.mark.gpu
@needs_two_gpus
def test_nccl_sharded_collectives_reject_strided_buffers():
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.NcclCommunicator(gpus)
    bufs = []
    for d in gpus:
        with d.use():
            bufs.append(d.xp.zeros(64, np.float32)[::2])
    with pytest.raises(ValueError, match="NCCL needs contiguous buffers, got a strided view of 32 elements"):
        c.reduce_scatter(bufs)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("codec", ["fp16", "bf16"])
@pytest.mark.parametrize("length", [EVEN, 1000, 40])
def test_narrow_wire_reduce_scatter_gives_the_narrow_allreduces_shards(codec, length):
    from mxlite.comm import compression, narrow

    exact = mx.device.devices._emulated_gpus()
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.NcclCommunicator(gpus)
    half = compression.create({"type": codec, "clip": 8.0})
    to_device, to_host = _gpu_io(gpus)
    wire_type = np.float16 if half.wire_dtype == "float16" else np.uint16
    src = _random(2, length, "float32")

    def wires():
        out = []
        for d in gpus:
            with d.use():
                out.append(d.xp.zeros(length, wire_type))
        return out

    grads, summed = to_device(src), wires()
    half.reduce_on_nccl(grads, summed, c).wait()  # the narrow all-reduce, clip 8 included
    grads, sharded = to_device(src), wires()
    narrow.reduce_scatter_to_wire(grads, sharded, half.wire_dtype, c, clip=8.0).wait()
    want, got = to_host(summed), to_host(sharded)
    for j, (start, end) in enumerate(c.local_shards(length)):
        if exact:
            assert got[j][start:end].tobytes() == want[j][start:end].tobytes(), f"GPU {j}"
        else:  # pragma: no cover - real NCCL may add in another order
            np.testing.assert_allclose(got[j][start:end].astype(np.float32), want[j][start:end].astype(np.float32),
                                       rtol=1e-2)
    assert [x.tobytes() for x in to_host(grads)] == [x.tobytes() for x in src]  # gradients only read


# -- MPI: mpiexec -n 2 -----------------------------------------------------------------------------------
def _load(tmp_path):
    arrays = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    info = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    return arrays, info


def _mpi_reference(devices: int, length: int, dtype: str, average: bool) -> np.ndarray:
    """MpiCommunicator.allreduce's bits for 2 ranks: local sums in device order, then one float32 (wire) addition."""
    local = []
    for rank in range(2):
        bufs = inputs(rank, devices, length, dtype)
        total = bufs[0].copy()
        for b in bufs[1:]:
            total += b
        local.append(total.astype(np.float32) if dtype == "float16" else total)
    wire = local[0] + local[1]
    if average:
        wire /= 2 * devices
    return wire.astype(dtype)


def _check_ranks(arrays, info, devices, reference=None):
    contributions = 2 * devices
    for length, dtype in CASES:
        bounds = comm.shard_bounds(length, contributions)
        for average in (False, True):
            k = key(length, dtype, average)
            want = arrays[0][f"ar-{k}-0"]
            if reference is not None:
                assert want.tobytes() == reference(devices, length, dtype, average).tobytes(), k
            for r in range(2):
                for j in range(devices):
                    start, end = bounds[r * devices + j]
                    assert arrays[r][f"ar-{k}-{j}"].tobytes() == want.tobytes(), (k, r, j)
                    assert arrays[r][f"ag-{k}-{j}"].tobytes() == want.tobytes(), (k, r, j)
                    assert arrays[r][f"rs-{k}-{j}"].tobytes() == want[start:end].tobytes(), (k, r, j)
    for seen in info:
        assert seen["size"] == 2


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("devices", [1, 2])
def test_two_ranks_shard_like_the_mpi_allreduce_bit_for_bit(tmp_path, devices):
    mpirun_ok(2, WORKER, "mpi", str(tmp_path), str(devices))
    arrays, info = _load(tmp_path)
    _check_ranks(arrays, info, devices, _mpi_reference)
    for seen in info:
        assert all(seen["untouched"].values()), seen["untouched"]


@pytest.mark.mpi
@pytest.mark.gpu
@needs_mpi
def test_two_ranks_on_one_gpu_each_shard_over_nccl_like_the_nccl_allreduce(tmp_path):
    if not mx.device.devices._emulated_gpus():
        pytest.skip("compares bits with the emulated NCCL (real NCCL may add in another order)")
    result = mpirun_ok(2, WORKER, "nccl", str(tmp_path), MXLITE_EMULATE_GPUS="1")
    assert "emulated on the CPU" in result.stderr
    arrays, info = _load(tmp_path)
    _check_ranks(arrays, info, 1)
    for seen in info:
        sharded, plain = seen["counts"]["sharded"], seen["counts"]["allreduce"]
        assert sharded["calls"] == {"reduceScatter": 1, "allGather": 1}
        assert sum(sharded["ring_bytes"].values()) == plain["ring_bytes"]["allReduce"] == 4 * EVEN


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather_shards"])
def test_a_rank_that_never_joins_a_sharded_collective_ends_the_job_after_the_timeout(collective):
    start = time.monotonic()
    result = mpirun(2, WORKER, "hang", "unused", collective, timeout=60, MXLITE_COLLECTIVE_TIMEOUT="2")
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode != 0 and 2 <= elapsed < deadlines.scaled(20), (elapsed, output)
    assert f"{collective} (call 1 of this communicator) did not complete within 2 s (MXLITE_COLLECTIVE_TIMEOUT)" \
        in output, output
