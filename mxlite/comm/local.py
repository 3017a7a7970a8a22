"""LocalCommunicator: one process, several devices (NumPy for CPU devices, peer copies for GPUs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device.copy import as_host, copy_between
from .base import DONE, Communicator, Work, _part

__all__ = ["LocalCommunicator"]


class LocalCommunicator(Communicator):
    """Collectives over this process's devices only (``size`` 1, ``rank`` 0).

    The sum is computed once on the first device and copied to the others, so every mirror
    holds the same bits. On GPUs the copies are peer copies: the fallback when NCCL is missing.
    Sharded collectives: device ``k`` sums shard ``k`` (reading every other device's shard ``k``),
    so each device adds ``1/N`` of the buffer; the rest of its buffer is left untouched.
    """

    def allreduce(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Replace every buffer by the sum (``average``: the mean) over all buffers."""
        self._check(buffers, "allreduce")
        if len(buffers) == 1 and not average:
            return DONE
        total = self._local_sum(buffers)
        if average:
            with self.devices[0].use():
                total /= len(buffers)
        self._copy_out(total, buffers)
        return DONE

    def reduce_scatter(self, buffers: Sequence[Any], average: bool = False) -> Work:
        """Device ``k``'s shard ``k`` becomes the sum (``average``: the mean) over all buffers of shard ``k``.

        Computed on device ``k``, in device order (``allreduce``'s order, so its bits); the rest
        of each buffer is left as it was. See :meth:`Communicator.reduce_scatter`.
        """
        self._check_flat(buffers, "reduce_scatter")
        if len(buffers) == 1 and not average:
            return DONE
        for k, (device, (start, end)) in enumerate(zip(self.devices, self.shards(buffers[0].size))):
            if start == end:
                continue
            total = self._local_sum(buffers, k, start, end)
            with device.use():
                if average:
                    total /= len(buffers)
                buffers[k][start:end] = total
        return DONE

    def allgather_shards(self, buffers: Sequence[Any]) -> Work:
        """Copy device ``k``'s shard ``k`` into every other buffer (peer copies on GPUs); see
        :meth:`Communicator.allgather_shards`."""
        self._check_flat(buffers, "allgather_shards")
        bounds = self.shards(buffers[0].size)
        for j, (device, buf) in enumerate(zip(self.devices, buffers)):
            with device.use():
                for k, (start, end) in enumerate(bounds):
                    if k != j and start != end:
                        buf[start:end] = copy_between(_part(buffers[k], self.devices[k], start, end),
                                                      self.devices[k], device, copy=False)
        return DONE

    def reduce_to_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Each piece is summed on its owner, in device order (``allreduce``'s order and bits); the rest of
        every buffer is left as it was. See :meth:`Communicator.reduce_to_owners`."""
        pieces = self._check_pieces(buffers, pieces, "reduce_to_owners")
        if len(buffers) == 1:
            return DONE
        for start, end, owner in pieces:
            total = self._local_sum(buffers, owner, start, end)
            with self.devices[owner].use():
                buffers[owner][start:end] = total
        return DONE

    def gather_from_owners(self, buffers: Sequence[Any], pieces: Sequence[tuple[int, int, int]]) -> Work:
        """Copy each piece from its owner into every other buffer (peer copies on GPUs); see
        :meth:`Communicator.gather_from_owners`."""
        pieces = self._check_pieces(buffers, pieces, "gather_from_owners")
        for j, (device, buf) in enumerate(zip(self.devices, buffers)):
            with device.use():
                for start, end, owner in pieces:
                    if owner != j:
                        buf[start:end] = copy_between(_part(buffers[owner], self.devices[owner], start, end),
                                                      self.devices[owner], device, copy=False)
        return DONE

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        """Copy the first buffer into the others (``root`` must be 0: there is one process)."""
        if root != 0:
            raise ValueError(f"broadcast root {root} out of range: a local communicator has one process (rank 0)")
        self._check(buffers, "broadcast")
        self._copy_out(buffers[0], buffers)

    def allgather(self, array: Any) -> list[np.ndarray]:
        """``[host copy of array]``: one process."""
        return [np.array(as_host(array))]
