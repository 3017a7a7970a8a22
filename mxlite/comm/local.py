"""LocalCommunicator: one process, several devices (NumPy for CPU devices, peer copies for GPUs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device.copy import as_host
from .base import DONE, Communicator, Work

__all__ = ["LocalCommunicator"]


class LocalCommunicator(Communicator):
    """Collectives over this process's devices only (``size`` 1, ``rank`` 0).

    The sum is computed once on the first device and copied to the others, so every mirror
    holds the same bits. On GPUs the copies are peer copies: the fallback when NCCL is missing.
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

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        """Copy the first buffer into the others (``root`` must be 0: there is one process)."""
        if root != 0:
            raise ValueError(f"broadcast root {root} out of range: a local communicator has one process (rank 0)")
        self._check(buffers, "broadcast")
        self._copy_out(buffers[0], buffers)

    def allgather(self, array: Any) -> list[np.ndarray]:
        """``[host copy of array]``: one process."""
        return [np.array(as_host(array))]
