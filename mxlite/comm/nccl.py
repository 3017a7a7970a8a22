"""NcclCommunicator: GPU buffers summed by NCCL (``cupy.cuda.nccl``), on a communication stream.

* One process, several GPUs: ``NcclCommunicator.initAll(device ids)`` and one NCCL group per
  collective.
* Several processes, one GPU each: rank 0 makes the NCCL unique id and broadcasts it over MPI.

Every collective runs on a per-device communication stream that first waits for the work
already queued on the caller's stream (so it reads finished gradients), and returns a
:class:`NcclWork` whose ``wait()`` makes the caller's stream wait for the result: the rest of
backward keeps running while buckets travel, and the update waits only for what it reads.

Sharded collectives (``reduce_scatter``, ``allgather_shards``; ZeRO-1) are NCCL ``reduceScatter``
and ``allGather``, whose NCCL ranks are (process rank, local device), the shards' order. NCCL
needs equal chunks: when the length is a multiple of ``contributions * ALIGN`` they run in place
on the buffers and move exactly an all-reduce's bytes (a ring all-reduce is a reduce-scatter
then an all-gather); otherwise the shards go through a padded staging buffer of
``contributions`` chunks of the longest shard (one fill and at most three copies per device per
collective) and the wire carries that buffer, fewer than ``contributions * ALIGN`` elements more.
Real NCCL adds in another order in ``reduceScatter`` than in ``allReduce``, so the sharded sum
may differ from ``allreduce``'s in the last bits (identical on every GPU all the same); the
emulated NCCL adds in rank order in both and gives ``allreduce``'s bits.

Status: written against CuPy's NCCL bindings; not yet run on a GPU (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device.copy import as_host
from . import faults
from .base import Communicator, Work
from .mpi import timed_barrier, timed_bcast_bytes

__all__ = ["NcclCommunicator", "nccl_available"]


def _nccl() -> Any:
    try:
        from cupy.cuda import nccl  # noqa: PLC0415 - GPU only
    except ImportError as exc:
        raise RuntimeError("NCCL is not available: install CuPy with NCCL (pip install 'mxlite[cuda12]' "
                           "or 'mxlite[cuda13]', which bring nvidia-nccl)") from exc
    if not getattr(nccl, "available", True):
        raise RuntimeError("CuPy was built without NCCL support")
    return nccl


def nccl_available() -> bool:
    """Whether CuPy's NCCL bindings can be loaded."""
    try:
        _nccl()
    except RuntimeError:
        return False
    return True


_NCCL_UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES in nccl.h
_NCCL_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
               "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint8": "NCCL_UINT8", "uint32": "NCCL_UINT32",
               "bfloat16": "NCCL_BFLOAT16"}
_NCCL_OPS = {"sum": "NCCL_SUM", "max": "NCCL_MAX"}


def _move_shards(flat: Any, padded: Any, bounds: list[tuple[int, int]], chunk: int, to_padded: bool) -> None:
    """Copy every shard between its place in ``flat`` and chunk ``k`` of ``padded`` (``k * chunk`` on), in two copies.

    :func:`~mxlite.comm.base.shard_bounds` makes the first ``m`` shards equally short and every
    later one ``chunk`` long but the last (shorter or not): the short ones move as one 2-D
    (strided) copy, all the others as one contiguous copy.
    """
    m = next(i for i, (start, end) in enumerate(bounds) if end - start == chunk)
    short = bounds[0][1] - bounds[0][0] if m else 0
    rest = flat.size - m * short
    if to_padded:
        if short:
            padded.reshape(-1, chunk)[:m, :short] = flat[:m * short].reshape(m, short)
        padded[m * chunk:m * chunk + rest] = flat[m * short:]
    else:
        if short:
            flat[:m * short].reshape(m, short)[...] = padded.reshape(-1, chunk)[:m, :short]
        flat[m * short:] = padded[m * chunk:m * chunk + rest]


class NcclWork(Work):
    """Completion events of one collective, one per device.

    ``keep`` holds device buffers the collective's streams still use (payloads allocated on the
    communication streams), released once the work has been waited for.
    """

    def __init__(self, devices: Sequence[Device], events: Sequence[Any]) -> None:
        self._pairs = list(zip(devices, events))
        self.keep: Any = None

    def wait(self) -> None:
        """Make each device's current stream wait for the collective."""
        import cupy  # noqa: PLC0415

        for device, event in self._pairs:
            with device.use():
                cupy.cuda.get_current_stream().wait_event(event)
        self.keep = None


class NcclCommunicator(Communicator):
    """NCCL collectives over local GPUs (one process) or one GPU per MPI process.

    Args:
        devices: this process's GPUs.
        mpi_comm: an mpi4py communicator for the multi-process case (one GPU per process).

    Raises:
        ValueError: a CPU device, or several GPUs per process with ``mpi_comm``.
        RuntimeError: NCCL is not available.
    """

    def __init__(self, devices: Sequence[Device], mpi_comm: Any = None) -> None:
        super().__init__(devices)
        cpus = [d for d in self.devices if not d.is_gpu]
        if cpus:
            raise ValueError(f"NCCL carries GPU buffers only; got CPU devices {cpus}")
        nccl = self._nccl = _nccl()
        import cupy  # noqa: PLC0415

        self._cupy = cupy
        self._timeout = faults.collective_timeout()  # MXLITE_COLLECTIVE_TIMEOUT, read once
        self._calls_made = 0
        self._watching: Any = None  # the watchdog's token of the collectives issued since begin()
        if mpi_comm is not None:  # one GPU per process, the NCCL id broadcast over MPI (world size 1 too)
            if len(self.devices) != 1:
                raise ValueError(f"multi-process NCCL runs one GPU per process; this process has {self.devices}")
            self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
            uid = nccl.get_unique_id() if self.rank == 0 else None  # bytes (CuPy >= 14)
            uid = timed_bcast_bytes(mpi_comm, uid, _NCCL_UNIQUE_ID_BYTES, root=0, what="the NCCL unique id")
            # NCCL's own set-up waits for every rank with no time limit (and the root's broadcast may
            # complete before anyone receives it): meet under MXLITE_COLLECTIVE_TIMEOUT first.
            timed_barrier(mpi_comm, "the NCCL unique id: every rank joining")
            token = faults.watch("the NCCL communicator set-up", self.rank, self.size, self._timeout)
            with self.devices[0].use():
                self._comms = [nccl.NcclCommunicator(self.size, uid, self.rank)]
            faults.attach(token, [])
            # One rank per process: a CUDA graph may record the collectives (NCCL's grouped calls over several
            # GPUs of one process would need a graph spanning devices).
            self.captures_collectives = True
        else:
            self._comms = nccl.NcclCommunicator.initAll([d.device_id for d in self.devices])
        if self._timeout is not None:
            faults.watch_communicator(self)
        self._staging: list[Any] = []  # see _stage
        self._streams = []
        for d in self.devices:
            with d.use():
                self._streams.append(cupy.cuda.Stream(non_blocking=True))

    def _dtype(self, array: Any) -> int:
        name = _NCCL_TYPES.get(np.dtype(array.dtype).name)
        if name is None:
            raise TypeError(f"NCCL cannot carry {array.dtype} buffers")
        return getattr(self._nccl, name)

    def _after_callers(self) -> None:
        """Each communication stream waits for the work queued so far on its device's current stream."""
        for device, stream in zip(self.devices, self._streams):
            with device.use():
                ready = self._cupy.cuda.Event(disable_timing=True)
                ready.record(self._cupy.cuda.get_current_stream())
                stream.wait_event(ready)

    @property
    def handles(self) -> list[Any]:
        """CuPy's NCCL communicators of this communicator, one per local device (the watchdog aborts them)."""
        return list(self._comms)

    def _watch(self, what: str) -> None:
        """Register the collectives about to be issued with the watchdog (only under MXLITE_COLLECTIVE_TIMEOUT).

        Called after the communication streams waited for the callers (so they have joined a capture, if
        any) and before the first NCCL call; :meth:`_done` gives the watchdog the completion events. Not
        while a CUDA graph is captured: the collectives then run at each replay, and the events are nodes.
        """
        if self._timeout is None or any(stream.is_capturing() for stream in self._streams):
            return
        self._calls_made += 1
        self._watching = faults.watch(f"NCCL {what} (call {self._calls_made} of this communicator)", self.rank,
                                      self.size, self._timeout)

    def watch_replay(self, what: str) -> None:
        """Watch the collectives of a CUDA graph just launched on the current stream (``MXLITE_COLLECTIVE_TIMEOUT``):
        they are done when the graph is, which an event recorded after the launch tells the watchdog."""
        if self._timeout is None:
            return
        self._calls_made += 1
        token = faults.watch(f"NCCL collectives replayed by {what} (call {self._calls_made} of this communicator)",
                             self.rank, self.size, self._timeout)
        events = []
        for device in self.devices:
            with device.use():
                events.append(self._cupy.cuda.get_current_stream().record())
        faults.attach(token, events)

    def _finished(self) -> None:
        """The host has seen the watched collectives complete (it synchronised): the watchdog forgets them."""
        faults.attach(self._watching, [])
        self._watching = None

    def _done(self) -> NcclWork:
        events = []
        for device, stream in zip(self.devices, self._streams):
            with device.use():
                events.append(stream.record())
        faults.attach(self._watching, events)
        self._watching = None
        work = NcclWork(self.devices, events)
        if self._staging:  # staging buffers of sharded collectives, in use on the streams until the work is done
            work.keep, self._staging = self._staging, []
        return work

    # -- device-side steps, for codecs that encode and decode on the communication streams -----
    @property
    def streams(self) -> list[Any]:
        """The communication stream of every local device, in device order."""
        return list(self._streams)

    def begin(self) -> None:
        """Order every communication stream after the work queued so far on its device's current stream.

        Then run encodes under ``with device.use(), stream:``, enqueue collectives with
        :meth:`allreduce_on_device` / :meth:`allgather_on_device`, decode on the same streams and
        finish with :meth:`end`. Under ``MXLITE_COLLECTIVE_TIMEOUT`` everything enqueued until
        :meth:`end` is watched as one collective.
        """
        self._after_callers()
        self._watch("collectives on the communication streams")

    def end(self) -> NcclWork:
        """The work of everything enqueued on the communication streams since :meth:`begin`."""
        return self._done()

    def allreduce_on_device(self, buffers: Sequence[Any], dtype: str | None = None, op: str = "sum") -> None:
        """Enqueue an in-place all-reduce of one buffer per device on the communication streams (after :meth:`begin`).

        Args:
            buffers: one contiguous CuPy array per local device, equal sizes.
            dtype: the NCCL type name, default the arrays' dtype; 'bfloat16' for uint16 bit patterns.
            op: 'sum' or 'max'.

        Raises:
            ValueError: buffers that do not match the devices; TypeError: a dtype NCCL cannot carry.
        """
        self._check(buffers, "allreduce")
        self._debug_check(f"allreduce ({op}, {dtype or buffers[0].dtype})", buffers)
        nccl = self._nccl
        code = self._dtype(buffers[0]) if dtype is None else self._dtype_named(dtype)
        reduction = getattr(nccl, _NCCL_OPS[op])
        nccl.groupStart()
        try:
            for comm, buf, stream in zip(self._comms, buffers, self._streams):
                comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, code, reduction, stream.ptr)
        finally:
            nccl.groupEnd()

    def allgather_on_device(self, sends: Sequence[Any]) -> list[Any]:
        """Enqueue an allGather of one 1-D array per device (after :meth:`begin`); returns the receive arrays.

        Each receive array (on its device, allocated on its communication stream) holds every
        contribution's array in NCCL rank order, which is (process rank, local device) order.
        Sizes must be equal on every device and process. No copy to the host.
        """
        self._check(sends, "allgather")
        self._debug_check("allgather (device)", sends)
        nccl = self._nccl
        code = self._dtype(sends[0])
        recvs = []
        for device, send, stream in zip(self.devices, sends, self._streams):
            with device.use(), stream:
                recvs.append(self._cupy.empty(send.size * self.contributions, send.dtype))
        nccl.groupStart()
        try:
            for comm, send, recv, stream in zip(self._comms, sends, recvs, self._streams):
                comm.allGather(send.data.ptr, recv.data.ptr, send.size, code, stream.ptr)
        finally:
            nccl.groupEnd()
        return recvs

    def reduce_scatter_on_device(self, buffers: Sequence[Any], dtype: str | None = None, op: str = "sum") -> None:
        """Enqueue a reduce-scatter of one flat buffer per device on the communication streams (after :meth:`begin`).

        Afterwards (once :meth:`end`'s work is waited for) device ``k``'s shard ``k``
        (:meth:`Communicator.shards`) holds the reduction of shard ``k`` over every device. Buffer
        flow, per device on its communication stream: when the length is a multiple of
        ``contributions * ALIGN`` every shard has the same length and NCCL ``reduceScatter`` runs
        in place (its receive buffer is the own shard of the send buffer); otherwise the shards
        are first laid out in a zero-padded staging buffer of ``contributions`` equal chunks
        (NCCL needs equal counts), reduced there in place, and the own chunk is copied back. The
        staging buffers are held by the work :meth:`end` returns. The rest of each buffer is left
        untouched.

        Args:
            buffers: one flat contiguous CuPy array per local device, equal sizes.
            dtype: the NCCL type name, default the arrays' dtype; 'bfloat16' for uint16 bit patterns.
            op: 'sum' or 'max'.

        Raises:
            ValueError: buffers that do not match the devices or are not 1-D; TypeError: a dtype
                NCCL cannot carry.
        """
        self._sharded_on_device("reduce_scatter", buffers, dtype, op)

    def allgather_shards_on_device(self, buffers: Sequence[Any], dtype: str | None = None) -> None:
        """Enqueue an all-gather of every device's own shard into every buffer (after :meth:`begin`).

        The mirror of :meth:`reduce_scatter_on_device`: NCCL ``allGather`` in place when every
        shard has the same length, else through a padded staging buffer (own shard copied in,
        gathered, every shard copied out). Arguments as there (no ``op``).
        """
        self._sharded_on_device("allgather_shards", buffers, dtype, None)

    def _sharded_on_device(self, what: str, buffers: Sequence[Any], dtype: str | None, op: str | None) -> None:
        """NCCL ``reduceScatter`` (``op`` given) or ``allGather`` (``op`` None) of the shards, staged if uneven."""
        self._check_shardable(buffers, what)
        self._debug_check(f"{what} ({op + ', ' if op else ''}{dtype or buffers[0].dtype})", buffers)
        code = self._dtype(buffers[0]) if dtype is None else self._dtype_named(dtype)
        bounds = self.shards(buffers[0].size)
        chunk = max(end - start for start, end in bounds)
        if chunk == 0:
            return
        gather = op is None
        staged = self._stage(buffers, bounds, chunk, own_only=gather)
        nccl = self._nccl
        nccl.groupStart()
        try:
            for comm, k, buf, stream in zip(self._comms, self._shard_ids(), staged, self._streams):
                own = buf.data.ptr + k * chunk * buf.itemsize  # in place: the own chunk of the whole buffer
                if gather:
                    comm.allGather(own, buf.data.ptr, chunk, code, stream.ptr)
                else:
                    comm.reduceScatter(buf.data.ptr, own, chunk, code, getattr(nccl, _NCCL_OPS[op]), stream.ptr)
        finally:
            nccl.groupEnd()
        if staged is not buffers:
            self._unstage(buffers, staged, bounds, chunk, own_only=not gather)

    def reduce_to_owners_on_device(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]],
                                   dtype: str | None = None) -> None:
        """Enqueue, after :meth:`begin`, the sum of every piece onto its owner: one NCCL ``reduce`` per piece.

        In place (the owner's receive buffer is its own piece), all pieces in one group, on the
        communication streams; the rest of every buffer is left untouched. ``dtype``: the NCCL type
        name (default the arrays'), 'bfloat16' for uint16 bit patterns. See
        :meth:`Communicator.reduce_to_owners`.
        """
        self._pieces_on_device("reduce_to_owners", buffers, pieces, dtype, reduce=True)

    def gather_from_owners_on_device(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]],
                                     dtype: str | None = None) -> None:
        """Enqueue, after :meth:`begin`, one NCCL ``broadcast`` per piece from its owner, in place, in one group."""
        self._pieces_on_device("gather_from_owners", buffers, pieces, dtype, reduce=False)

    def _pieces_on_device(self, what: str, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]],
                          dtype: str | None, reduce: bool) -> None:
        pieces = self._check_pieces(buffers, pieces, what)
        if not buffers[0].flags.c_contiguous:
            raise ValueError(f"{what}: NCCL needs contiguous buffers, got a strided view of {buffers[0].size} elements")
        self._debug_check(f"{what} ({dtype or buffers[0].dtype})", buffers)
        code = self._dtype(buffers[0]) if dtype is None else self._dtype_named(dtype)
        if not pieces:
            return
        nccl = self._nccl
        nccl.groupStart()
        try:
            for comm, buf, stream in zip(self._comms, buffers, self._streams):
                for start, end, owner in pieces:
                    ptr = buf.data.ptr + start * buf.itemsize
                    if reduce:
                        comm.reduce(ptr, ptr, end - start, code, nccl.NCCL_SUM, owner, stream.ptr)
                    else:
                        comm.bcast(ptr, end - start, code, owner, stream.ptr)
        finally:
            nccl.groupEnd()

    def reduce_to_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Each piece's owner gets its sum over every GPU of every process; asynchronous (see :class:`NcclWork`).

        One NCCL ``reduce`` per piece, rooted at its owner, in one group on the communication streams
        (:meth:`reduce_to_owners_on_device`). See :meth:`Communicator.reduce_to_owners`.
        """
        self._check_pieces(buffers, pieces, "reduce_to_owners")
        self._dtype(buffers[0])  # before anything is enqueued
        self.begin()
        self.reduce_to_owners_on_device(buffers, pieces)
        return self.end()

    def gather_from_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Every GPU receives every piece from its owner; asynchronous (one NCCL ``broadcast`` per piece)."""
        self._check_pieces(buffers, pieces, "gather_from_owners")
        self._dtype(buffers[0])
        self.begin()
        self.gather_from_owners_on_device(buffers, pieces)
        return self.end()

    def _check_shardable(self, buffers: Sequence[Any], what: str) -> None:
        """Flat and contiguous: NCCL addresses the shards by pointer arithmetic."""
        self._check_flat(buffers, what)
        if not buffers[0].flags.c_contiguous:
            raise ValueError(f"{what}: NCCL needs contiguous buffers, got a strided view of {buffers[0].size} "
                             "elements; pass a contiguous slice of the arena (or cupy.ascontiguousarray)")

    def _shard_ids(self) -> range:
        """The shard (= NCCL rank) of every local device."""
        return range(self.rank * len(self.devices), (self.rank + 1) * len(self.devices))

    def _stage(self, buffers: Sequence[Any], bounds: list[tuple[int, int]], chunk: int, own_only: bool) -> Any:
        """``buffers`` themselves when every shard is ``chunk`` long; else padded staging buffers.

        A device's staging buffer holds shard ``k`` at ``[k * chunk, k * chunk + len(shard k))``, for
        every ``k`` (zeros in the padding, which is added too), or for its own shard only (for an
        all-gather, which overwrites the rest); allocated and filled on the communication streams,
        and kept in :attr:`_staging` for the work that :meth:`end` returns.
        """
        if all(end - start == chunk for start, end in bounds):
            return buffers
        staged = []
        for device, k, buf, stream in zip(self.devices, self._shard_ids(), buffers, self._streams):
            with device.use(), stream:
                if own_only:
                    pad = self._cupy.empty(chunk * len(bounds), buf.dtype)
                    start, end = bounds[k]
                    pad[k * chunk:k * chunk + end - start] = buf[start:end]
                else:
                    pad = self._cupy.zeros(chunk * len(bounds), buf.dtype)
                    _move_shards(buf, pad, bounds, chunk, to_padded=True)
            staged.append(pad)
        self._staging.extend(staged)
        return staged

    def _unstage(self, buffers: Sequence[Any], staged: Sequence[Any], bounds: list[tuple[int, int]], chunk: int,
                 own_only: bool) -> None:
        """Copy shards back from the staging buffers (the own one, or all), on the communication streams."""
        for device, k, buf, pad, stream in zip(self.devices, self._shard_ids(), buffers, staged, self._streams):
            with device.use(), stream:
                if own_only:
                    start, end = bounds[k]
                    buf[start:end] = pad[k * chunk:k * chunk + end - start]
                else:
                    _move_shards(buf, pad, bounds, chunk, to_padded=False)

    def reduce_scatter(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Each GPU's own shard becomes the sum (``average``: the mean) over every GPU of every process.

        Asynchronous (see :class:`NcclWork`): NCCL ``reduceScatter`` in one group on the
        communication streams (:meth:`reduce_scatter_on_device`), then the average scales the own
        shard as ``allreduce`` scales the buffer. See :meth:`Communicator.reduce_scatter` for the
        sum order (real NCCL's differs from its ``allReduce``'s).
        """
        self._check_shardable(buffers, "reduce_scatter")
        self._dtype(buffers[0])  # before anything is enqueued: an error must leave nothing half done
        self.begin()
        self.reduce_scatter_on_device(buffers)
        if average:
            for device, buf, (start, end), stream in zip(self.devices, buffers, self.local_shards(buffers[0].size),
                                                         self._streams):
                with device.use(), stream:
                    own = buf[start:end]
                    own *= 1.0 / self.contributions
        return self.end()

    def allgather_shards(self, buffers: Sequence[Any]) -> Work:
        """Every GPU's own shard is copied into every buffer of every process; asynchronous (NCCL ``allGather``).

        See :meth:`allgather_shards_on_device` and :meth:`Communicator.allgather_shards`.
        """
        self._check_shardable(buffers, "allgather_shards")
        self._dtype(buffers[0])
        self.begin()
        self.allgather_shards_on_device(buffers)
        return self.end()

    def _dtype_named(self, name: str) -> int:
        code = _NCCL_TYPES.get(name)
        if code is None:
            raise TypeError(f"NCCL has no type {name!r}")
        return getattr(self._nccl, code)

    def allreduce(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Sum (``average``: mean) over every GPU of every process; asynchronous (see :class:`NcclWork`)."""
        self._check(buffers, "allreduce")
        self._debug_check("allreduce", buffers)
        nccl = self._nccl
        dtypes = [self._dtype(buf) for buf in buffers]  # before groupStart: an error must not leave it open
        self._after_callers()
        self._watch("allreduce")
        nccl.groupStart()
        try:
            for comm, buf, dtype, stream in zip(self._comms, buffers, dtypes, self._streams):
                comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, dtype, nccl.NCCL_SUM, stream.ptr)
        finally:
            nccl.groupEnd()
        if average:
            for device, buf, stream in zip(self.devices, buffers, self._streams):
                with device.use(), stream:
                    buf *= 1.0 / self.contributions
        return self._done()

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        """Every buffer becomes process ``root``'s first buffer (synchronous for the caller's stream)."""
        self._check(buffers, "broadcast")
        self._debug_check(f"broadcast from {root}", buffers)
        nccl = self._nccl
        self._after_callers()
        # NCCL's root is a rank of the NCCL communicator: local device 0 of process `root`.
        nccl_root = root * len(self.devices)
        dtypes = [self._dtype(buf) for buf in buffers]
        self._watch(f"broadcast from rank {root}")
        nccl.groupStart()
        try:
            for comm, buf, dtype, stream in zip(self._comms, buffers, dtypes, self._streams):
                comm.bcast(buf.data.ptr, buf.size, dtype, nccl_root, stream.ptr)
        finally:
            nccl.groupEnd()
        self._done().wait()

    def allgather(self, array: Any) -> list[np.ndarray]:
        """Host copies of every process's ``array`` (this device's), in rank order, via NCCL allGather.

        Sizes must be equal across processes on this path.
        """
        cupy = self._cupy
        if self.size == 1:  # one process: nothing to gather (and initAll's ranks are all local)
            return [np.array(as_host(array)).reshape(-1)]
        self._debug_check("allgather", [array])
        device, comm, stream = self.devices[0], self._comms[0], self._streams[0]
        with device.use():
            flat = cupy.ascontiguousarray(cupy.asarray(array)).reshape(-1)  # host arrays come too (agree, codecs)
            out = cupy.empty(flat.size * self.size, flat.dtype)
            self._after_callers()
            self._watch("allgather")
            comm.allGather(flat.data.ptr, out.data.ptr, flat.size, self._dtype(flat), stream.ptr)
            stream.synchronize()
            self._finished()
            return np.split(out.get(), self.size)

    def barrier(self) -> None:
        """An allreduce of one value: returns when every process has reached it (one process: at once)."""
        if self.size == 1:
            return
        self._debug_check("barrier", [])
        with self.devices[0].use():
            token = self._cupy.zeros(1, np.float32)
        self._after_callers()  # the communication stream reads the token the current stream zeroed
        self._watch("barrier")
        self._comms[0].allReduce(token.data.ptr, token.data.ptr, 1, self._nccl.NCCL_FLOAT32, self._nccl.NCCL_SUM,
                                 self._streams[0].ptr)
        self._streams[0].synchronize()
        self._finished()
