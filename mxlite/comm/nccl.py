"""NcclCommunicator: GPU buffers summed by NCCL (``cupy.cuda.nccl``), on a communication stream.

* One process, several GPUs: ``NcclCommunicator.initAll(device ids)`` and one NCCL group per
  collective.
* Several processes, one GPU each: rank 0 makes the NCCL unique id and broadcasts it over MPI.

Every collective runs on a per-device communication stream that first waits for the work
already queued on the caller's stream (so it reads finished gradients), and returns a
:class:`NcclWork` whose ``wait()`` makes the caller's stream wait for the result: the rest of
backward keeps running while buckets travel, and the update waits only for what it reads.

Status: written against CuPy's NCCL bindings; not yet run on a GPU (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device.copy import as_host
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
        if mpi_comm is not None:  # one GPU per process, the NCCL id broadcast over MPI (world size 1 too)
            if len(self.devices) != 1:
                raise ValueError(f"multi-process NCCL runs one GPU per process; this process has {self.devices}")
            self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
            uid = nccl.get_unique_id() if self.rank == 0 else None  # bytes (CuPy >= 14)
            uid = timed_bcast_bytes(mpi_comm, uid, _NCCL_UNIQUE_ID_BYTES, root=0, what="the NCCL unique id")
            # NCCL's own set-up waits for every rank with no time limit (and the root's broadcast may
            # complete before anyone receives it): meet under MXLITE_COLLECTIVE_TIMEOUT first.
            timed_barrier(mpi_comm, "the NCCL unique id: every rank joining")
            with self.devices[0].use():
                self._comms = [nccl.NcclCommunicator(self.size, uid, self.rank)]
        else:
            self._comms = nccl.NcclCommunicator.initAll([d.device_id for d in self.devices])
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

    def _done(self) -> NcclWork:
        events = []
        for device, stream in zip(self.devices, self._streams):
            with device.use():
                events.append(stream.record())
        return NcclWork(self.devices, events)

    # -- device-side steps, for codecs that encode and decode on the communication streams -----
    @property
    def streams(self) -> list[Any]:
        """The communication stream of every local device, in device order."""
        return list(self._streams)

    def begin(self) -> None:
        """Order every communication stream after the work queued so far on its device's current stream.

        Then run encodes under ``with device.use(), stream:``, enqueue collectives with
        :meth:`allreduce_on_device` / :meth:`allgather_on_device`, decode on the same streams and
        finish with :meth:`end`.
        """
        self._after_callers()

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
            comm.allGather(flat.data.ptr, out.data.ptr, flat.size, self._dtype(flat), stream.ptr)
            stream.synchronize()
            return np.split(out.get(), self.size)

    def barrier(self) -> None:
        """An allreduce of one value: returns when every process has reached it (one process: at once)."""
        if self.size == 1:
            return
        self._debug_check("barrier", [])
        with self.devices[0].use():
            token = self._cupy.zeros(1, np.float32)
        self._after_callers()  # the communication stream reads the token the current stream zeroed
        self._comms[0].allReduce(token.data.ptr, token.data.ptr, 1, self._nccl.NCCL_FLOAT32, self._nccl.NCCL_SUM,
                                 self._streams[0].ptr)
        self._streams[0].synchronize()
