"""The communicator interface and the local (in-process) reduction every implementation starts from.

A communicator is built for the list of this process's devices (``devices``); every call takes
one buffer per local device, in that order (same shape and dtype), and works in place:

* ``allreduce(buffers)``: every buffer becomes the sum over all local buffers and all
  processes (``average=True`` divides by the number of contributions, ``size * len(devices)``);
* ``broadcast(buffers, root)``: every buffer becomes process ``root``'s first buffer;
* ``allgather(array)``: a host (NumPy) copy of every process's ``array``, in rank order;
* ``barrier()``: returns when every process has called it.

Local sums are computed once, on the first device, in device order, and copied out, so all
mirrors hold bit-identical values and then apply bit-identical updates.

Calls may be asynchronous on a GPU: ``allreduce`` returns a :class:`Work` whose ``wait()``
makes the caller's current stream wait for the result (CPU implementations finish before
returning and give a completed Work).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device.copy import copy_between

__all__ = ["Communicator", "Work"]


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
    _checking: bool = False  # inside a debug-mode check (whose own collective is not checked)

    @property
    def contributions(self) -> int:
        """How many buffers an allreduce sums: local devices times processes."""
        return len(self.devices) * self.size

    def allreduce(self, buffers: Sequence[Any], average: bool = False) -> Work:
        raise NotImplementedError

    def broadcast(self, buffers: Sequence[Any], root: int = 0) -> None:
        raise NotImplementedError

    def allgather(self, array: Any) -> list[np.ndarray]:
        raise NotImplementedError

    def barrier(self) -> None:
        """Return when every process has called ``barrier`` (one process: at once)."""

    # -- helpers shared by the implementations ----------------------------------------------
    def _debug_check(self, op: str, buffers: Sequence[Any], with_shapes: bool = True) -> None:
        """In debug mode (``MXLITE_DEBUG_COLLECTIVES=1``), check every rank makes the same call first."""
        if self.size == 1 or self._checking:
            return
        from . import debug  # noqa: PLC0415

        if not debug.enabled():
            return
        from .agree import check_same_across_ranks  # noqa: PLC0415

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

    def _local_sum(self, buffers: Sequence[Any]) -> Any:
        """The sum over local buffers on the first device, in device order (a new array)."""
        home = self.devices[0]
        with home.use():
            total = buffers[0].copy()
            for device, buf in zip(self.devices[1:], buffers[1:]):
                total += copy_between(buf, device, home, copy=False)
        return total

    def _copy_out(self, total: Any, buffers: Sequence[Any], source: Device | None = None) -> None:
        """Copy ``total`` (on ``source``, default the first device) into every buffer."""
        source = source or self.devices[0]
        for device, buf in zip(self.devices, buffers):
            if buf is total:
                continue
            with device.use():
                buf[...] = copy_between(total, source, device, copy=False)
