"""``cupy.cuda``: devices, streams, events, memory and the runtime/NCCL bindings of the emulated GPUs."""

from __future__ import annotations

from .. import _state
from .._memory import Memory, MemoryPointer, MemoryPool, using_allocator
from .._streams import Event, Stream, get_current_stream
from . import memory, nccl, runtime, stream
from ._device import Device, get_device_id

__all__ = ["Device", "Event", "Memory", "MemoryPointer", "MemoryPool", "Stream", "get_current_stream",
           "get_device_id", "is_available", "memory", "nccl", "runtime", "stream", "using_allocator"]


def is_available() -> bool:
    """True when at least one GPU is emulated."""
    return _state.num_devices() > 0
