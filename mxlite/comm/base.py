"""The communicator interface and the local (in-process) reduction every implementation starts from.

A communicator is built for the list of this process's devices (``devices``); every call takes
one buffer per local device, in that order (same shape and dtype), and works in place:

* ``allreduce(buffers)``: every buffer becomes the sum over all local buffers and all
  processes (``average=True`` divides by the number of contributions, ``size * len(devices)``);
* ``broadcast(buffers, root)``: every buffer becomes process ``root``'s first buffer;
* ``allgather(array)``: a host (NumPy) copy of every process's ``array``, in rank order;
* ``barrier()``: returns when every process has called it;
* ``reduce_scatter(buffers)`` and ``allgather_shards(buffers)``: an all-reduce in two halves, for
  sharded optimizer states (ZeRO-1); see "Shards" below.

Local sums are computed once, on the first device, in device order, and copied out, so all
mirrors hold bit-identical values and then apply bit-identical updates.

Calls may be asynchronous on a GPU: ``allreduce``, ``reduce_scatter`` and ``allgather_shards``
return a :class:`Work` whose ``wait()`` makes the caller's current stream wait for the result
(CPU implementations finish before returning and give a completed Work).

Shards
------
Purpose: each device keeps the optimizer state of one slice of every flat gradient/parameter
buffer only. Gradients are summed by a reduce-scatter (each device gets the sum of its own
slice), the update runs on that slice, and an all-gather of the updated slices restores every
mirror. A ring all-reduce *is* a reduce-scatter followed by an all-gather, so the bytes on the
wire are those of one all-reduce.

Behaviour:

* the shards are numbered over every device of every process, process rank first, then local
  device: ``N = size * len(devices)`` shards (:attr:`Communicator.contributions`); local device
  ``j`` of process ``rank`` owns shard ``rank * len(devices) + j`` (NCCL's rank order);
* shard ``k`` of a flat buffer of ``L`` elements is ``shard_bounds(L, N)[k]`` (:func:`shard_bounds`:
  contiguous, balanced, every start a multiple of :data:`mxlite.store.ALIGN` elements);
* ``reduce_scatter(buffers, average=False)``: afterwards device ``k``'s buffer holds, in shard
  ``k``, the sum (``average``: the mean) over all devices and processes of shard ``k``. The rest
  of its buffer is unspecified (a carrier may use it as scratch; the Local and MPI carriers
  leave it untouched): read only the own shard until ``allgather_shards`` has run;
* ``allgather_shards(buffers)``: device ``k``'s shard ``k`` is copied into every other buffer at
  the same place, so every buffer ends identical; nothing is added;
* both work in place on one flat (1-D), same-length buffer per local device, every process
  passing the same length and dtype.

Sum order. Each shard is summed once, in one order, and the all-gather copies it, so
``reduce_scatter`` then ``allgather_shards`` leaves every device and process with bit-identical
buffers. On the Local and MPI carriers the order is ``allreduce``'s, element by element, so the
result also equals ``allreduce``'s of the same input bit for bit (MPI: with two processes):

* local devices: added one at a time in device order, ``((b0 + b1) + b2) + ...``, in the
  buffers' dtype; the Local carrier does it for shard ``k`` on device ``k`` (each device adds
  ``1/N`` of the buffer), the MPI carrier on the first device as ``allreduce`` does;
* processes: MPI's ``Reduce_scatter`` over the local sums (float16 as float32), in the MPI
  library's order. With two processes that is one commutative addition, identical to
  ``Allreduce``'s; with more, the library may group differently in the two calls;
* NCCL: NCCL's order. Real NCCL's ring ``allReduce`` cuts the buffer into chunks of its own
  tuned size, each summed along the ring towards the rank its index falls on (or it picks a
  tree), while ``reduceScatter`` sums shard ``k`` towards rank ``k``: the orders differ element
  by element, and NCCL documents neither, so bit identity with ``allreduce`` cannot be promised
  there. The emulated NCCL adds in rank order in both, so there they agree bit for bit.

``average`` divides the own shard as ``allreduce`` divides the buffer (same operation, same bits).

Warning: ``reduce_scatter`` reads every shard of every buffer; do not write any of them until
its Work has been waited for.

Owned pieces
------------
Sharded optimizer states (``Trainer(shard_optimizer_states=True)``) cut each arena by its *data*
layout, while gradients lie in the reverse order: the elements a device owns are, in a gradient
bucket, a few contiguous *pieces* whose owners need not come in shard order. Two more calls take
such a list of pieces, ``[(start, end, owner), ...]`` (disjoint ranges of the flat buffers; ``owner``
a shard number as above: ``rank * len(devices) + local device``):

* ``reduce_to_owners(buffers, pieces)``: the owner's buffer holds, on each of its pieces, the sum
  over all devices and processes of that range; the rest of every buffer is unspecified (the Local
  and MPI carriers and NCCL leave it untouched). Same sum order as ``allreduce`` on every carrier
  (NCCL: one ``reduce`` per piece, whose order real NCCL does not document), so the owner's pieces
  hold ``allreduce``'s bits on Local, MPI with two processes and the emulated NCCL;
* ``gather_from_owners(buffers, pieces)``: every buffer receives every piece from its owner
  (copies: bits unchanged).

Together they are an all-reduce of the pieces, and move its bytes: a reduce-scatter and an
all-gather whose shards are the pieces (on NCCL, one ``reduce`` and one ``broadcast`` per piece in
one group: NCCL's ring moves ``(n - 1) / n`` of a piece's bytes per rank for each, as for
``reduceScatter`` and ``allGather``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device.copy import copy_between
from ..store import ALIGN
from . import debug
from .agree import check_same_across_ranks

__all__ = ["Communicator", "Work", "shard_bounds"]


def shard_bounds(length: int, parts: int, align: int = ALIGN) -> list[tuple[int, int]]:
    """Cut ``[0, length)`` into ``parts`` contiguous shards, ``[(start, end), ...]`` in order.

    The range is taken in blocks of ``align`` elements (the last block may be shorter); every
    shard gets ``blocks // parts`` whole blocks and the last ``blocks % parts`` shards one more.
    Hence:

    * the shards tile the range: shard 0 starts at 0, shard ``k + 1`` starts where shard ``k``
      ends, the last ends at ``length``;
    * every boundary is a multiple of ``align`` except ``length`` itself;
    * balanced: the lengths of any two shards differ by at most ``align`` elements;
    * with fewer than ``parts`` blocks (``length <= (parts - 1) * align``), the first shards are
      empty (``start == end``); ``length == 0`` gives ``parts`` empty shards ``(0, 0)``.

    Args:
        length: elements in the flat buffer, >= 0.
        parts: number of shards, >= 1 (a communicator's :attr:`Communicator.contributions`).
        align: elements per block, >= 1; default :data:`mxlite.store.ALIGN` (16), the arenas'
            slot alignment, so every shard of an arena starts where a vector load may.

    Raises:
        ValueError: a negative length, or ``parts`` or ``align`` below 1 (naming the value).
    """
    length, parts, align = operator.index(length), operator.index(parts), operator.index(align)
    if length < 0:
        raise ValueError(f"shard_bounds: length must be >= 0 elements, got {length}")
    if parts < 1:
        raise ValueError(f"shard_bounds: parts must be >= 1, got {parts}")
    if align < 1:
        raise ValueError(f"shard_bounds: align must be >= 1 element, got {align}")
    blocks = -(-length // align)
    per, extra = divmod(blocks, parts)
    first_long = parts - extra  # shards from here on have one more block
    starts = [min(length, align * (k * per + max(0, k - first_long))) for k in range(parts)]
    return list(zip(starts, starts[1:] + [length]))


def _part(buf: Any, device: Device, start: int, end: int | None) -> Any:
    """``buf[start:end]``, sliced on ``buf``'s own device (a view)."""
    with device.use():
        return buf[start:end]


class Work:
    """Handle of a collective; ``wait()`` orders the caller after it (a no-op once complete)."""

    def wait(self) -> None:
        """Make the current stream (GPU) or the caller (CPU) wait for the collective's result."""


DONE = Work()


class Communicator:
    """Collectives over this process's ``devices`` and over ``size`` processes (see the module docstring).

    Raises:
        ValueError: no devices, or a device listed twice.
    """

    def __init__(self, devices: Sequence[Device]) -> None:
        devices = list(devices)
        if not devices:
            raise ValueError("a communicator needs at least one device")
        if len(set(devices)) != len(devices):
            raise ValueError(f"a communicator's devices must be distinct, got {devices}")
        self.devices = devices

    rank: int = 0
    size: int = 1
    _calls: int = 0  # collectives made (debug mode numbers them)
    # Whether a CUDA graph may record its collectives (NCCL, one GPU per process); see watch_replay.
    captures_collectives: bool = False
    _checking: bool = False  # inside a debug-mode check (whose own collective is not checked)

    @property
    def contributions(self) -> int:
        """How many buffers an allreduce sums: local devices times processes."""
        return len(self.devices) * self.size

    def allreduce(self, buffers: Sequence[Any], average: bool = False) -> Work:
        raise NotImplementedError

    def reduce_scatter(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Each device's own shard becomes the sum (``average``: the mean) of that shard over all devices.

        See "Shards" in the module docstring: the shards, the sum order, what the rest of each
        buffer holds afterwards (unspecified).

        Args:
            buffers: one flat (1-D) array per local device, in device order, same length and dtype
                on every device and process.
            average: divide by :attr:`contributions` (as ``allreduce`` does).

        Returns:
            the :class:`Work` to wait for before reading the own shard (a completed one on CPUs).

        Raises:
            ValueError: not one buffer per device, buffers that differ in shape or dtype, or a
                buffer that is not 1-D.
        """
        raise NotImplementedError

    def allgather_shards(self, buffers: Sequence[Any]) -> Work:
        """Copy each device's own shard into every other device's buffer: all buffers end identical.

        Arguments and errors as :meth:`reduce_scatter`; nothing is added, so a shard's bits arrive
        unchanged. Returns the :class:`Work` to wait for before reading the buffers.
        """
        raise NotImplementedError

    def shards(self, length: int) -> list[tuple[int, int]]:
        """Every shard of a flat buffer of ``length`` elements, ``shard_bounds(length, contributions)``."""
        return shard_bounds(length, self.contributions)

    def local_shards(self, length: int) -> list[tuple[int, int]]:
        """The shards this process's devices own, in device order (``(start, end)`` each)."""
        first = self.rank * len(self.devices)
        return self.shards(length)[first:first + len(self.devices)]

    def reduce_to_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Each piece's owner gets the sum of that piece over every device and process.

        See "Owned pieces" in the module docstring.

        Args:
            buffers: one flat (1-D) array per local device, same length and dtype everywhere.
            pieces: ``[(start, end, owner), ...]``, disjoint ranges of the buffers, every process
                passing the same list; ``owner`` in ``[0, contributions)``.

        Returns:
            the :class:`Work` to wait for before the owners read their pieces.

        Raises:
            ValueError: buffers as :meth:`reduce_scatter` rejects them, or a piece outside the buffer
                or with an owner out of range (named).
        """
        raise NotImplementedError

    def gather_from_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Every buffer receives every piece from its owner's buffer (nothing is added).

        Arguments and errors as :meth:`reduce_to_owners`. Returns the :class:`Work` to wait for.
        """
        raise NotImplementedError

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        raise NotImplementedError

    def allgather(self, array: Any) -> list[np.ndarray]:
        raise NotImplementedError

    def barrier(self) -> None:
        """Return when every process has called ``barrier`` (one process: at once)."""

    def watch_replay(self, what: str) -> None:
        """A CUDA graph holding this communicator's collectives was just launched on the current stream: watch it
        like an eager collective (``MXLITE_COLLECTIVE_TIMEOUT``). Nothing to do where collectives are not captured."""

    # -- helpers shared by the implementations ----------------------------------------------
    def _debug_check(self, op: str, buffers: Sequence[Any], with_shapes: bool = True) -> None:
        """In debug mode (``MXLITE_DEBUG_COLLECTIVES=1``), check every rank makes the same call first."""
        if self.size == 1 or self._checking:
            return
        if not debug.enabled():
            return
        self._calls += 1
        self._checking = True
        try:
            check_same_across_ranks(self, "a collective call", debug.describe_call(self._calls, op, buffers,
                                                                                 with_shapes))
        finally:
            self._checking = False

    def _check(self, buffers: Sequence[Any], what: str) -> None:
        if len(buffers) != len(self.devices):
            raise ValueError(f"{what}: {len(buffers)} buffers for {len(self.devices)} devices {self.devices}")
        first = buffers[0]
        for device, buf in zip(self.devices[1:], buffers[1:]):
            if buf.shape != first.shape or buf.dtype != first.dtype:
                raise ValueError(f"{what}: the buffer on {device} is {buf.dtype}{tuple(buf.shape)}, the one on "
                                 f"{self.devices[0]} is {first.dtype}{tuple(first.shape)}; they must match")

    def _check_flat(self, buffers: Sequence[Any], what: str) -> None:
        """:meth:`_check`, and the buffers must be flat (sharded collectives)."""
        self._check(buffers, what)
        if buffers[0].ndim != 1:
            raise ValueError(f"{what}: buffers must be flat (1-D), got shape {tuple(buffers[0].shape)}; pass "
                             "a flat view (reshape(-1)) of each device's buffer")

    def _check_pieces(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]], what: str) -> list[
            tuple[int, int, int]]:
        """:meth:`_check_flat`, and every piece inside the buffers with an owner in range; the non-empty pieces."""
        self._check_flat(buffers, what)
        length, owners = buffers[0].size, self.contributions
        kept = []
        for start, end, owner in pieces:
            if not (0 <= start <= end <= length) or not 0 <= owner < owners:
                raise ValueError(f"{what}: piece ({start}, {end}, owner {owner}) does not lie in a buffer of {length} "
                                 f"elements with an owner in 0..{owners - 1}")
            if start < end:
                kept.append((int(start), int(end), int(owner)))
        return kept

    def _local_sum(self, buffers: Sequence[Any], home: int = 0, start: int = 0, end: int | None = None) -> Any:
        """The sum over local buffers of ``[start:end]``, in device order, on device ``home`` (a new array)."""
        target = self.devices[home]
        parts = [buf if start == 0 and end is None else _part(buf, device, start, end)
                 for device, buf in zip(self.devices, buffers)]
        with target.use():
            total = copy_between(parts[0], self.devices[0], target, copy=True)
            for device, part in zip(self.devices[1:], parts[1:]):
                total += copy_between(part, device, target, copy=False)
        return total

    def _copy_out(self, total: Any, buffers: Sequence[Any], source: Device | None = None) -> None:
        """Copy ``total`` (on ``source``, default the first device) into every buffer."""
        source = source or self.devices[0]
        for device, buf in zip(self.devices, buffers):
            if buf is total:
                continue
            with device.use():
                buf[...] = copy_between(total, source, device, copy=False)
