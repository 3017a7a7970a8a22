"""``cupy.cuda.nccl``: NCCL collectives between emulated GPUs, in one process or over MPI.

Pointers, counts, dtypes and stream handles are checked like a real GPU would need them: each pointer
must lie in a live allocation of the communicator's device with room for ``count`` elements, the stream
must be a stream of that device. A call is an access on that stream (reads the send buffer, writes the
receive buffer) under the stream-ordering rule, and is counted (calls by name, bytes by dtype).

Byte counts, per rank (each rank's device counters), with ``n`` ranks:

* ``nccl_bytes`` (by dtype) and ``nccl_call_bytes`` (by collective): the size of the call's send
  buffer: ``count`` elements for ``allReduce``, ``reduce``, ``bcast`` and ``broadcast``,
  ``recvcount * n`` for ``reduceScatter``, ``count`` (this rank's part) for ``allGather``.
* ``nccl_ring_bytes`` (by collective, a float): what the rank sends in NCCL's ring algorithms,
  averaged over the ranks, for a buffer of ``B`` bytes (the whole ``n``-chunk buffer:
  ``recvcount * n`` elements for ``reduceScatter``, ``count * n`` for ``allGather``): ring
  ``allReduce`` sends every chunk but one twice (a reduce-scatter then an all-gather),
  ``2 (n - 1) / n * B``; ``reduceScatter`` and ``allGather`` are those halves, ``(n - 1) / n * B``
  each; ``reduce``, ``bcast`` and ``broadcast`` pass ``B`` along a chain of ``n`` ranks,
  ``(n - 1) / n * B``. So a reduce-scatter followed by an all-gather of a buffer counts exactly
  what one all-reduce of it counts (real NCCL may also pick trees; the model stays the ring's).

* One process, several communicators (``NcclCommunicator.initAll`` or several ``NcclCommunicator(n, uid,
  r)`` with the same uid): the i-th call of every rank forms the i-th collective. Outside a group a
  collective runs when the last rank's call arrives (so issuing the ranks one after another in one thread
  does not deadlock, unlike real NCCL); inside ``groupStart/groupEnd`` the calls run at the outermost
  ``groupEnd``. Until then, touching a participating buffer raises.
* Several processes under ``mpiexec``, one rank each (``NcclCommunicator(nranks, uid, rank)`` when
  mpi4py's ``MPI.COMM_WORLD`` has ``nranks`` processes): collectives go over mpi4py on the host copies;
  all ranks must join with the same uid. A collective completes inside the call (not asynchronously
  as on a GPU), so a rank that never joins shows as a call that blocks; the wait polls non-blocking
  MPI requests, and :meth:`NcclCommunicator.abort` (from another thread) ends it with NcclError.

Stream capture: a collective issued on a capturing stream is recorded as a graph node (and, like all
captured work here, also run once at capture and its writes undone when the capture ends); each launch
of the graph runs it again on the buffers' contents then, as CUDA replays an NCCL kernel. Only a
communicator with one rank in this process can be captured (one GPU per process, under ``mpiexec``, or
a single-rank communicator): ranks that share a process would each need the others' graph launches to
complete theirs, which this synchronous double cannot interleave, so such a call raises. Over MPI, a
rank that runs a collective at its capture while another rank runs the same collective outside any
capture (which would hang on a GPU: capture executes nothing) is refused as a mismatch.

Reductions follow NCCL's numerics (see :mod:`._reduce`).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from typing import Any

import numpy as np

from .. import _core, _counters, _graph, _memory, _state, _streams
from .._errors import EmulatedGPUError as _EmulatedGPUError
from ._reduce import DTYPES as _DTYPES
from ._reduce import OPS as _OPS
from ._reduce import reduce as _reduce

__all__ = ["NcclCommunicator", "NcclError", "available", "get_unique_id", "get_version", "get_build_version",
           "groupStart", "groupEnd"]

available = True

NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4

_VERSION = 22703  # NCCL 2.27.3
_SYSTEM_ERROR = 2
_INVALID_ARGUMENT = 4
_INVALID_USAGE = 5


class NcclError(RuntimeError):
    """An NCCL error (``status`` is the ncclResult_t code)."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"NCCL error {status}")

    @classmethod
    def _with(cls, status: int, message: str) -> NcclError:
        err = cls(status)
        err.args = (message,)
        return err


def get_unique_id() -> bytes:
    """A fresh NCCL unique id (128 random bytes)."""
    return os.urandom(128)


def get_version() -> int:
    """The (emulated) NCCL version, 22703 for 2.27.3."""
    return _VERSION


def get_build_version() -> int:
    """The NCCL version CuPy was built with (same as :func:`get_version`)."""
    return _VERSION


_group_depth = 0
_group_cliques: list[_Clique] = []


def groupStart() -> None:  # noqa: N802 - NCCL's name
    """Start a group: collectives issued until the matching :func:`groupEnd` run together."""
    global _group_depth
    _group_depth += 1


def groupEnd() -> None:  # noqa: N802
    """End a group; at the outermost one, run every collective whose ranks have all been issued."""
    global _group_depth
    if _group_depth == 0:
        raise NcclError._with(_INVALID_USAGE, "ncclInvalidUsage: groupEnd() without groupStart()")
    _group_depth -= 1
    if _group_depth == 0:
        cliques, _group_cliques[:] = list(_group_cliques), []
        for clique in cliques:
            clique.flush()


class _Call:
    """One rank's part of a collective: its arguments resolved to host views."""

    __slots__ = ("kind", "rank", "send", "recv", "count", "dtype", "op", "root", "stream", "allocs", "what",
                 "capturing")

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    def signature(self) -> tuple:
        return (self.kind, self.count, self.dtype, self.op, self.root)


def _execute(calls: list[_Call]) -> None:
    """Run one collective given every rank's call (rank order)."""
    kind = calls[0].kind
    if kind == "allReduce":
        result = _reduce([c.send for c in calls], calls[0].dtype, calls[0].op)
        for c in calls:
            c.recv[...] = result
    elif kind == "reduce":
        result = _reduce([c.send for c in calls], calls[0].dtype, calls[0].op)
        calls[calls[0].root].recv[...] = result
    elif kind in ("bcast", "broadcast"):
        src = calls[calls[0].root].send.copy()
        for c in calls:
            if c.recv is not None:
                c.recv[...] = src
    elif kind == "allGather":
        result = np.concatenate([c.send for c in calls])
        for c in calls:
            c.recv[...] = result
    elif kind == "reduceScatter":
        count = calls[0].count
        result = _reduce([c.send for c in calls], calls[0].dtype, calls[0].op)
        for r, c in enumerate(calls):
            c.recv[...] = result[r * count:(r + 1) * count]
    else:  # pragma: no cover
        raise NcclError._with(_INVALID_ARGUMENT, f"unknown collective {kind}")


class _Clique:
    """The ranks of one NCCL communicator that live in this process (all of them, in local mode)."""

    _handles = itertools.count(1)

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.members: dict[int, NcclCommunicator] = {}
        self.queues: dict[int, list[_Call]] = {r: [] for r in range(nranks)}

    def submit(self, call: _Call) -> None:
        self.queues[call.rank].append(call)
        for alloc in call.allocs:
            _memory.pending_collective[alloc.id] = call.what
        if _group_depth:
            if self not in _group_cliques:
                _group_cliques.append(self)
        else:
            self.flush()

    def flush(self) -> None:
        while all(self.queues[r] for r in range(self.nranks)):
            calls = [self.queues[r].pop(0) for r in range(self.nranks)]
            for c in calls:
                for alloc in c.allocs:
                    _memory.pending_collective.pop(alloc.id, None)
            first = calls[0].signature()
            for c in calls[1:]:
                if c.signature() != first:
                    raise _EmulatedGPUError(f"mismatched NCCL collectives: rank 0 issued {calls[0].what}, rank "
                                           f"{c.rank} issued {c.what} (each rank's i-th call must match)")
            _execute(calls)


_local_cliques: dict[bytes, _Clique] = {}


_KINDS = ("allReduce", "reduce", "bcast", "broadcast", "allGather", "reduceScatter")
_POLL_SLEEP = 0.0005  # seconds between two tests of a pending MPI request (the GIL is free meanwhile)


class _MpiClique:
    """All ranks of a communicator, one per MPI process (this process holds one).

    Every exchange is a non-blocking MPI collective on fixed-size NumPy buffers, polled (sleeping
    between polls, so other threads run) until it completes or the communicator is aborted: as on a
    GPU, ``abort()`` from another thread (mxlite's watchdog) ends a wait that would never finish, and
    the waiting call raises NcclError.
    """

    def __init__(self, nranks: int, uid: bytes, rank: int) -> None:
        from mpi4py import MPI  # noqa: PLC0415 - only under mpiexec

        self.mpi = MPI.COMM_WORLD
        self.aborted = False  # set by NcclCommunicator.abort(), from any thread
        if self.mpi.Get_size() != nranks:
            raise NcclError._with(_INVALID_ARGUMENT, f"NcclCommunicator({nranks}, uid, {rank}): MPI.COMM_WORLD has "
                                               f"{self.mpi.Get_size()} processes; the emulation needs one per rank")
        mine = np.frombuffer(bytes(uid) + int(rank).to_bytes(8, "little", signed=True), np.uint8)
        joined = self._allgather(mine, "ncclCommInitRank")
        uids = [row[:128].tobytes() for row in joined]
        ranks = [int.from_bytes(row[128:].tobytes(), "little", signed=True) for row in joined]
        if any(u != uid for u in uids) or sorted(ranks) != list(range(nranks)):
            raise NcclError._with(_INVALID_USAGE, "NcclCommunicator: the MPI processes did not all join with the same "
                                            f"unique id and distinct ranks 0..{nranks - 1} (got ranks {ranks})")
        self.nranks = nranks
        self.rank = rank
        self.order = ranks  # rank of each MPI process
        self.pending: list[_Call] = []

    def submit(self, call: _Call) -> None:
        self.pending.append(call)
        if _group_depth:
            if self not in _group_cliques:
                _group_cliques.append(self)
        else:
            self.flush()

    def flush(self) -> None:
        calls, self.pending = self.pending, []
        for call in calls:
            self._run(call)

    def _wait(self, request: Any, what: str) -> None:
        while not request.Test():
            if self.aborted:
                raise NcclError._with(_SYSTEM_ERROR, f"ncclSystemError: communicator aborted while in {what}")
            time.sleep(_POLL_SLEEP)

    def _allgather(self, mine: np.ndarray, what: str) -> np.ndarray:
        """Every process's ``mine`` (equal sizes), one row per MPI process."""
        rows = np.empty((self.mpi.Get_size(), mine.size), mine.dtype)
        self._wait(self.mpi.Iallgather(np.ascontiguousarray(mine), rows), what)
        return rows

    def _run(self, call: _Call) -> None:
        signature = np.array([_KINDS.index(call.kind), call.count, call.dtype, call.op, call.root,
                              int(call.capturing)], np.int64)
        signatures = self._allgather(signature, call.what)
        if (signatures[:, :5] != signature[:5]).any():
            shown = [(_KINDS[k], *map(int, rest)) for k, *rest in signatures[:, :5].tolist()]
            raise _EmulatedGPUError(f"mismatched NCCL collectives across MPI ranks: {shown}")
        if (signatures[:, 5] != signature[5]).any():
            captured = [int(r) for r, flag in zip(self.order, signatures[:, 5]) if flag]
            raise _EmulatedGPUError(f"{call.what}: rank(s) {captured} issued it while capturing a CUDA graph and the "
                                    "others outside any capture; a capture runs nothing, so on a GPU the others "
                                    "would wait for a collective that never starts (capture it on every rank)")
        dtype = _DTYPES[call.dtype][0]
        if call.kind in ("bcast", "broadcast"):
            data = np.empty(call.count, dtype) if self.rank != call.root else np.ascontiguousarray(call.send)
            self._wait(self.mpi.Ibcast(data.view(np.uint8), root=self.order.index(call.root)), call.what)
            if call.recv is not None:
                call.recv[...] = data
            return
        rows = self._allgather(np.ascontiguousarray(call.send).reshape(-1).view(np.uint8), call.what)
        by_rank: list[Any] = [None] * self.nranks
        for proc, row in enumerate(rows):
            by_rank[self.order[proc]] = row.view(dtype)
        if call.kind == "allGather":
            call.recv[...] = np.concatenate(by_rank)
            return
        result = _reduce(by_rank, call.dtype, call.op)
        if call.kind == "reduceScatter":
            result = result[self.rank * call.count:(self.rank + 1) * call.count]
        if call.recv is not None:
            call.recv[...] = result


class NcclCommunicator:
    """An NCCL communicator over emulated GPUs.

    Args:
        ndev: total number of ranks.
        commId: the unique id from :func:`get_unique_id` (all ranks must use the same).
        rank: this communicator's rank (its device is the current device).
        config: accepted for compatibility.

    See the module docstring for the local (one process) and MPI (one rank per process) modes.
    """

    def __init__(self, ndev: int, commId: bytes, rank: int, config: Any = None) -> None:  # noqa: N803
        ndev, rank = int(ndev), int(rank)
        if not 0 <= rank < ndev:
            raise NcclError._with(_INVALID_ARGUMENT, f"ncclInvalidArgument: rank {rank} not in 0..{ndev - 1}")
        if not isinstance(commId, (bytes, bytearray)) or len(commId) != 128:
            raise TypeError("commId must be the 128-byte unique id returned by get_unique_id()")
        self._device = _state.current_device_id()
        _state.check_device_id(self._device)
        self._rank, self._size = rank, ndev
        self._alive = True
        self._aborted = False
        self.comm = 0x5EC0_0000_0000 + next(_Clique._handles) * 0x100
        uid = bytes(commId)
        mpi = sys.modules.get("mpi4py.MPI")
        if ndev > 1 and uid not in _local_cliques and mpi is not None and mpi.COMM_WORLD.Get_size() > 1:
            self._clique: Any = _MpiClique(ndev, uid, rank)
            return
        clique = _local_cliques.get(uid)
        if clique is None:
            clique = _local_cliques[uid] = _Clique(ndev)
        if clique.nranks != ndev:
            raise NcclError._with(_INVALID_ARGUMENT, f"ncclInvalidArgument: nranks {ndev} differs from {clique.nranks} "
                                               "given by another rank of the same unique id")
        if rank in clique.members:
            raise NcclError._with(_INVALID_USAGE, f"ncclInvalidUsage: rank {rank} of this unique id exists already")
        for other in clique.members.values():
            if other._device == self._device:
                raise NcclError._with(_INVALID_USAGE,
                                      f"ncclInvalidUsage: duplicate GPU {self._device} in one communicator")
        clique.members[rank] = self
        self._clique = clique

    @staticmethod
    def initAll(devices: Any) -> list[NcclCommunicator]:  # noqa: N802
        """Communicators over local emulated GPUs ``devices`` (a list of ids, or a count: ``0..n-1``)."""
        if isinstance(devices, int):
            devices = list(range(devices))
        devices = [int(d) for d in devices]
        if len(set(devices)) != len(devices):
            raise NcclError._with(_INVALID_USAGE, f"ncclInvalidUsage: duplicate GPUs in {devices}")
        uid = get_unique_id()
        comms = []
        saved = _state.current_device_id()
        try:
            for rank, dev in enumerate(devices):
                _state.set_current_device_id(dev)
                comms.append(NcclCommunicator(len(devices), uid, rank))
        finally:
            _state.set_current_device_id(saved)
        return comms

    def __repr__(self) -> str:
        return f"<emulated NcclCommunicator rank {self._rank}/{self._size} on gpu({self._device})>"

    def rank_id(self) -> int:
        """This communicator's rank."""
        return self._rank

    def device_id(self) -> int:
        """The device of this communicator."""
        return self._device

    def size(self) -> int:
        """Number of ranks."""
        return self._size

    def destroy(self) -> None:
        """Release the communicator."""
        self._alive = False

    def abort(self) -> None:
        """Abort the communicator's pending work and release it (from any thread).

        A call of this rank waiting for the other ranks (MPI mode) then raises NcclError
        (ncclSystemError), as a host thread blocked on an aborted NCCL kernel is released on a GPU.
        """
        self._alive = False
        self._aborted = True
        if isinstance(self._clique, _MpiClique):
            self._clique.aborted = True

    def check_async_error(self) -> None:
        """Raise NcclError after :meth:`abort` (CuPy nulls the aborted handle, which NCCL then refuses);
        otherwise nothing (the emulation has no asynchronous errors)."""
        if self._aborted:
            raise NcclError._with(_INVALID_ARGUMENT, "ncclInvalidArgument: the communicator was aborted")

    # -- collectives ---------------------------------------------------------------------------
    def _buffer(self, ptr: int, count: int, dtype: int, what: str) -> tuple[np.ndarray, tuple]:
        """The host view of ``count`` elements at ``ptr`` and its ``(allocation, first byte, end byte)``."""
        np_dtype = _DTYPES[dtype][0]
        nbytes = count * np_dtype.itemsize
        try:
            alloc, offset = _memory.resolve(ptr, nbytes, self._device)
        except _EmulatedGPUError as exc:
            raise _EmulatedGPUError(f"{what} on {self!r}: {exc}") from None
        return alloc.view_bytes()[offset:offset + nbytes].view(np_dtype), (alloc, offset, offset + max(nbytes, 1))

    def _call(self, kind: str, send: int | None, recv: int | None, send_count: int, recv_count: int, dtype: int,
              op: int, root: int, stream_ptr: int) -> None:
        if not self._alive:
            raise NcclError._with(_INVALID_USAGE, f"ncclInvalidUsage: {kind} on a destroyed communicator")
        if dtype not in _DTYPES:
            raise NcclError._with(_INVALID_ARGUMENT, f"ncclInvalidArgument: unknown datatype {dtype}")
        if op not in _OPS:
            raise NcclError._with(_INVALID_ARGUMENT, f"ncclInvalidArgument: unknown reduction op {op}")
        if not 0 <= root < self._size:
            raise NcclError._with(_INVALID_ARGUMENT, f"ncclInvalidArgument: root {root} not in 0..{self._size - 1}")
        what = f"{kind}(count={send_count}, {_DTYPES[dtype][1]}, rank {self._rank})"
        stream = _streams.stream_from_ptr(stream_ptr, self._device)
        send_view, send_alloc = self._buffer(send, send_count, dtype, what) if send is not None else (None, None)
        recv_view, recv_alloc = self._buffer(recv, recv_count, dtype, what) if recv is not None else (None, None)
        reads = [send_alloc] if send_alloc is not None else []
        writes = [recv_alloc] if recv_alloc is not None else []
        capture = _graph.issue(stream, f"NCCL {what}")
        if capture is not None and isinstance(self._clique, _Clique) and self._clique.nranks > 1:
            raise _EmulatedGPUError(
                f"NCCL {what} on {stream!r}, which is capturing: the {self._clique.nranks} ranks of this "
                "communicator live in this process, and the emulation cannot capture their collectives (each rank's "
                "graph launch would wait for the others'); capture with one rank per process (mpiexec), or issue "
                "the collective outside the capture")
        _core.check_access(stream, reads, writes, f"NCCL {what}", collective=True)
        _core.record_access(stream, reads, writes)
        self._count(kind, send_count, recv_count, dtype)
        allocs = tuple({id(r[0]): r[0] for r in reads + writes}.values())

        def call(capturing: bool) -> _Call:
            return _Call(kind=kind, rank=self._rank, send=send_view, recv=recv_view, count=recv_count, dtype=dtype,
                         op=op, root=root, stream=stream, allocs=allocs, what=what, capturing=capturing)

        self._clique.submit(call(capture is not None))
        if capture is not None:
            def replay() -> None:  # a launch of the graph: the collective again, on the contents then
                self._count(kind, send_count, recv_count, dtype)
                self._clique.submit(call(False))

            capture.add(f"NCCL {kind}", replay, reads, writes)

    def _count(self, kind: str, send_count: int, recv_count: int, dtype: int) -> None:
        c = _counters.counters[self._device]
        c.nccl_calls[kind] += 1
        c.nccl_bytes[_DTYPES[dtype][1]] += send_count * _DTYPES[dtype][0].itemsize
        c.nccl_call_bytes[kind] += send_count * _DTYPES[dtype][0].itemsize
        whole = max(send_count, recv_count) * _DTYPES[dtype][0].itemsize  # the n-chunk buffer
        c.nccl_ring_bytes[kind] += (2 if kind == "allReduce" else 1) * (self._size - 1) * whole / self._size

    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int,  # noqa: N802
                  stream: int) -> None:
        """recvbuf (every rank) = reduction of every rank's sendbuf."""
        self._call("allReduce", sendbuf, recvbuf, count, count, datatype, op, 0, stream)

    def reduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, root: int,
               stream: int) -> None:
        """recvbuf of ``root`` = reduction of every rank's sendbuf."""
        recv = recvbuf if self._rank == root else None
        self._call("reduce", sendbuf, recv, count, count, datatype, op, root, stream)

    def bcast(self, buff: int, count: int, datatype: int, root: int, stream: int) -> None:
        """``buff`` of every rank = ``buff`` of ``root`` (in place)."""
        send = buff if self._rank == root else None
        recv = None if self._rank == root else buff
        self._call("bcast", send, recv, count, count, datatype, 0, root, stream)

    def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int, stream: int) -> None:
        """recvbuff of every rank = sendbuff of ``root``."""
        send = sendbuff if self._rank == root else None
        self._call("broadcast", send, recvbuff, count, count, datatype, 0, root, stream)

    def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int, stream: int) -> None:  # noqa: N802
        """recvbuf (``count * size`` elements, every rank) = every rank's sendbuf in rank order."""
        self._call("allGather", sendbuf, recvbuf, count, count * self._size, datatype, 0, 0, stream)

    def reduceScatter(self, sendbuf: int, recvbuf: int, recvcount: int, datatype: int, op: int,  # noqa: N802
                      stream: int) -> None:
        """recvbuf of rank r = chunk r (``recvcount`` elements) of the reduction of every rank's sendbuf."""
        self._call("reduceScatter", sendbuf, recvbuf, recvcount * self._size, recvcount, datatype, op, 0, stream)
