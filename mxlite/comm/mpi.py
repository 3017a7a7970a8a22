"""MpiCommunicator: several processes bootstrapped by MPI (mpi4py); CPU buffers travel over MPI.

Each process reduces its own devices first (as the local communicator does), then the host
buffer is summed over the processes with ``MPI_Allreduce``. float16 buffers travel as float32
(MPI has no standard half type), which also keeps a sum of many half values from overflowing.
GPU buffers on this path are staged through the host; :class:`~mxlite.comm.NcclCommunicator`
is the fast path for them.

Creating one installs :func:`mxlite.comm.faults.install`: a rank that dies on an uncaught
exception (or ``sys.exit`` with a non-zero status) ends the whole job instead of leaving the
other ranks waiting in a collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device.copy import as_host
from ..device.topology import local_rank_and_size, mpi_module, node_communicator
from . import faults
from .base import DONE, Communicator, Work, _part

__all__ = ["MpiCommunicator", "local_rank_and_size", "mpi_module", "node_communicator", "timed_barrier",
           "timed_bcast_bytes"]


def timed_barrier(comm: Any, what: str = "barrier") -> None:
    """``comm.Barrier()`` within ``MXLITE_COLLECTIVE_TIMEOUT`` (see :func:`mxlite.comm.faults.wait`).

    For MPI communicators used outside a :class:`MpiCommunicator` (the KVStore's world): every raw
    MPI call must honour the timeout. Installs the fault handling.
    """
    faults.install()
    timeout = faults.collective_timeout()
    if timeout is None:
        comm.Barrier()
    else:
        faults.wait(comm.Ibarrier(), comm.Get_rank(), comm.Get_size(), what, timeout)


def timed_bcast_bytes(comm: Any, data: bytes | None, nbytes: int, root: int = 0, what: str = "bcast") -> bytes:
    """``nbytes`` bytes from process ``root`` (whose ``data`` they are) on every process of ``comm``, within
    ``MXLITE_COLLECTIVE_TIMEOUT`` (as :func:`timed_barrier`). Other processes pass None.

    Raises:
        ValueError: on ``root``, ``data`` is not ``nbytes`` long.
    """
    faults.install()
    buffer = np.zeros(nbytes, np.uint8)
    if comm.Get_rank() == root:
        if data is None or len(data) != nbytes:
            raise ValueError(f"{what}: the root must give {nbytes} bytes, got {None if data is None else len(data)}")
        buffer[:] = np.frombuffer(data, np.uint8)
    timeout = faults.collective_timeout()
    if timeout is None:
        comm.Bcast(buffer, root=root)
    else:
        faults.wait(comm.Ibcast(buffer, root=root), comm.Get_rank(), comm.Get_size(), what, timeout)
    return buffer.tobytes()


class MpiCommunicator(Communicator):
    """Collectives over this process's devices and the processes of ``comm`` (default COMM_WORLD).

    Installs the fault handling of :mod:`mxlite.comm.faults` (once per process).

    Raises:
        RuntimeError: mpi4py is not installed.
    """

    def __init__(self, devices: Sequence[Device], comm: Any = None) -> None:
        super().__init__(devices)
        mpi = mpi_module()
        self._mpi = mpi
        self.comm = comm if comm is not None else mpi.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._calls_made = 0
        self._timeout = faults.collective_timeout()  # MXLITE_COLLECTIVE_TIMEOUT, read once
        faults.install()

    def allreduce(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Replace every buffer by the sum (``average``: the mean) over all devices and processes."""
        self._check(buffers, "allreduce")
        self._debug_check("allreduce", buffers)
        total = self._local_sum(buffers) if len(buffers) > 1 else buffers[0]
        host = as_host(total)
        wire = host.astype(np.float32) if host.dtype == np.float16 else np.ascontiguousarray(host)
        if self._timeout is None:
            self.comm.Allreduce(self._mpi.IN_PLACE, wire, op=self._mpi.SUM)
        else:
            self._wait(self.comm.Iallreduce(self._mpi.IN_PLACE, wire, op=self._mpi.SUM), "allreduce")
        if average:
            wire /= self.contributions
        result = wire if wire.dtype == host.dtype else wire.astype(host.dtype)
        for device, buf in zip(self.devices, buffers):
            if buf is result:  # one contiguous host buffer of the wire's dtype: reduced in place already
                continue
            with device.use():
                buf[...] = result if isinstance(buf, np.ndarray) else device.xp.asarray(result)
        return DONE

    def reduce_scatter(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Each device's own shard becomes the sum (``average``: the mean) over all devices and processes.

        Buffer flow: the local buffers are summed on the first device in device order (as
        ``allreduce``), the sum goes to the host (float16 as float32), ``MPI_Reduce_scatter``
        hands this process the sum of the shards its devices own (one contiguous range), the
        average divides in the wire's dtype, and each device's shard is written back. The rest
        of every buffer is left untouched. See :meth:`Communicator.reduce_scatter`.
        """
        self._check_flat(buffers, "reduce_scatter")
        self._debug_check("reduce_scatter", buffers)
        bounds = self.shards(buffers[0].size)
        ranges = self._process_ranges(bounds)
        total = self._local_sum(buffers) if len(buffers) > 1 else buffers[0]
        host = as_host(total)
        wire = host.astype(np.float32) if host.dtype == np.float16 else np.ascontiguousarray(host)
        first, last = ranges[self.rank]
        mine = np.empty(last - first, wire.dtype)
        counts = [end - start for start, end in ranges]
        if self._timeout is None:
            self.comm.Reduce_scatter(wire, mine, counts, op=self._mpi.SUM)
        else:
            self._wait(self.comm.Ireduce_scatter(wire, mine, counts, op=self._mpi.SUM), "reduce_scatter")
        if average:
            mine /= self.contributions
        result = mine if mine.dtype == host.dtype else mine.astype(host.dtype)
        for device, buf, (start, end) in zip(self.devices, buffers, self.local_shards(buffers[0].size)):
            with device.use():
                piece = result[start - first:end - first]
                buf[start:end] = piece if isinstance(buf, np.ndarray) else device.xp.asarray(piece)
        return DONE

    def allgather_shards(self, buffers: Sequence[Any]) -> Work:
        """Every device's own shard is copied into every buffer of every process (``MPI_Allgatherv``).

        The shards travel in the buffers' own dtype (float16 as its 16-bit patterns: nothing is
        added, so no wider wire is needed); with one contiguous NumPy buffer per process the
        gather runs in place in it. See :meth:`Communicator.allgather_shards`.
        """
        self._check_flat(buffers, "allgather_shards")
        self._debug_check("allgather_shards", buffers)
        bounds = self.shards(buffers[0].size)
        ranges = self._process_ranges(bounds)
        counts = [end - start for start, end in ranges]
        in_place = len(buffers) == 1 and isinstance(buffers[0], np.ndarray) and buffers[0].flags.c_contiguous
        out = buffers[0] if in_place else np.empty(buffers[0].size, buffers[0].dtype)
        if not in_place:
            for device, buf, (start, end) in zip(self.devices, buffers, self.local_shards(buffers[0].size)):
                out[start:end] = as_host(_part(buf, device, start, end))
        wire = out.view(np.uint16) if out.dtype == np.float16 else out  # MPI has no standard half type
        target = [wire, counts, [start for start, _ in ranges], None]
        if self._timeout is None:
            self.comm.Allgatherv(self._mpi.IN_PLACE, target)
        else:
            self._wait(self.comm.Iallgatherv(self._mpi.IN_PLACE, target), "allgather_shards")
        if not in_place:
            for device, buf in zip(self.devices, buffers):
                with device.use():
                    buf[...] = out if isinstance(buf, np.ndarray) else device.xp.asarray(out)
        return DONE

    def reduce_to_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Each piece's owner gets the sum of that piece over every device and process.

        Buffer flow: the local buffers are summed on the first device in device order (as
        ``allreduce``), the sum goes to the host (float16 as float32), the pieces are laid out by
        owning process (each process's pieces in piece order), ``MPI_Reduce_scatter`` hands every
        process the sums of its own pieces, and each is written into its owner's buffer. The rest of
        every buffer is left untouched. See :meth:`Communicator.reduce_to_owners`.
        """
        pieces = self._check_pieces(buffers, pieces, "reduce_to_owners")
        self._debug_check("reduce_to_owners", buffers)
        total = self._local_sum(buffers) if len(buffers) > 1 else buffers[0]
        host = as_host(total)
        wire = host.astype(np.float32) if host.dtype == np.float16 else np.ascontiguousarray(host)
        by_rank = self._pieces_by_rank(pieces)
        counts = [sum(end - start for start, end, _ in mine) for mine in by_rank]
        send = np.concatenate([wire[start:end] for mine in by_rank for start, end, _ in mine] or [wire[:0]])
        mine = np.empty(counts[self.rank], wire.dtype)
        if self._timeout is None:
            self.comm.Reduce_scatter(send, mine, counts, op=self._mpi.SUM)
        else:
            self._wait(self.comm.Ireduce_scatter(send, mine, counts, op=self._mpi.SUM), "reduce_to_owners")
        result = mine if mine.dtype == host.dtype else mine.astype(host.dtype)
        at = 0
        for start, end, owner in by_rank[self.rank]:
            device, buf = self.devices[owner % len(self.devices)], buffers[owner % len(self.devices)]
            piece, at = result[at:at + end - start], at + end - start
            with device.use():
                buf[start:end] = piece if isinstance(buf, np.ndarray) else device.xp.asarray(piece)
        return DONE

    def gather_from_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Every buffer of every process receives every piece from its owner (``MPI_Allgatherv``).

        The pieces travel in the buffers' own dtype (float16 as its 16-bit patterns), each process
        sending its own pieces in piece order. See :meth:`Communicator.gather_from_owners`.
        """
        pieces = self._check_pieces(buffers, pieces, "gather_from_owners")
        self._debug_check("gather_from_owners", buffers)
        local = len(self.devices)
        by_rank = self._pieces_by_rank(pieces)
        counts = [sum(end - start for start, end, _ in mine) for mine in by_rank]
        dtype = np.dtype(buffers[0].dtype)
        own = [as_host(_part(buffers[owner % local], self.devices[owner % local], start, end))
               for start, end, owner in by_rank[self.rank]]
        send = np.ascontiguousarray(np.concatenate(own) if own else np.empty(0, dtype))
        out = np.empty(sum(counts), dtype)
        displs = [sum(counts[:r]) for r in range(self.size)]
        wire_send, wire_out = (send.view(np.uint16), out.view(np.uint16)) if dtype == np.float16 else (send, out)
        target = [wire_out, counts, displs, None]
        if self._timeout is None:
            self.comm.Allgatherv(wire_send, target)
        else:
            self._wait(self.comm.Iallgatherv(wire_send, target), "gather_from_owners")
        for r, mine in enumerate(by_rank):
            at = displs[r]
            for start, end, owner in mine:
                piece, at = out[at:at + end - start], at + end - start
                for j, (device, buf) in enumerate(zip(self.devices, buffers)):
                    if self.rank * local + j != owner:  # every local buffer but the owner's
                        with device.use():
                            buf[start:end] = piece if isinstance(buf, np.ndarray) else device.xp.asarray(piece)
        return DONE

    def _pieces_by_rank(self, pieces: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
        """The pieces each process's devices own, in rank order (each in piece order)."""
        local = len(self.devices)
        return [[p for p in pieces if p[2] // local == r] for r in range(self.size)]

    def _process_ranges(self, bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The contiguous range of every process's shards (its devices' shards, joined), in rank order."""
        local = len(self.devices)
        return [(bounds[r * local][0], bounds[(r + 1) * local - 1][1]) for r in range(self.size)]

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        """Every buffer becomes process ``root``'s first buffer."""
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast root {root} out of range for {self.size} processes")
        self._check(buffers, "broadcast")
        self._debug_check(f"broadcast from {root}", buffers)
        host = np.ascontiguousarray(as_host(buffers[0]))
        if host is not buffers[0] and self.rank != root:
            host = host.copy()
        if self._timeout is None:
            self.comm.Bcast(host, root=root)
        else:
            self._wait(self.comm.Ibcast(host, root=root), "broadcast")
        for device, buf in zip(self.devices, buffers):
            if buf is not host:
                with device.use():
                    buf[...] = host if isinstance(buf, np.ndarray) else device.xp.asarray(host)

    def allgather(self, array: Any) -> list[np.ndarray]:
        """Every process's ``array`` (1-D after flattening; sizes may differ), in rank order."""
        host = np.ascontiguousarray(as_host(array)).reshape(-1)
        self._debug_check("allgather", [host], with_shapes=False)  # sizes may differ by design
        sizes = np.empty(self.size, dtype=np.int64)
        mine = np.array([host.size], dtype=np.int64)
        if self._timeout is None:
            self.comm.Allgather(mine, sizes)
        else:
            self._wait(self.comm.Iallgather(mine, sizes), "allgather")
        out = np.empty(int(sizes.sum()), dtype=host.dtype)
        if self._timeout is None:
            self.comm.Allgatherv(host, [out, sizes])
        else:
            self._wait(self.comm.Iallgatherv(host, [out, sizes]), "allgather")
        return np.split(out, np.cumsum(sizes)[:-1])

    def barrier(self) -> None:
        """MPI_Barrier over the communicator's processes."""
        self._debug_check("barrier", [])
        if self._timeout is None:
            self.comm.Barrier()
        else:
            self._wait(self.comm.Ibarrier(), "barrier")

    def _wait(self, request: Any, what: str) -> None:
        """Complete a non-blocking collective within ``MXLITE_COLLECTIVE_TIMEOUT`` (see faults.wait)."""
        self._calls_made += 1
        faults.wait(request, self.rank, self.size, f"{what} (call {self._calls_made} of this communicator)",
                    self._timeout)
