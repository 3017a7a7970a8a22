"""``cupy.cuda``: devices, streams, events, graphs, memory and the runtime/NCCL bindings of the emulated GPUs."""

from __future__ import annotations

from .. import _state
from .._memory import Memory, MemoryPointer, MemoryPool, get_allocator, set_allocator, using_allocator
from .._streams import Event, Stream, get_current_stream, get_elapsed_time
from . import graph, memory, nccl, runtime, stream
from ._device import Device, get_device_id
from .graph import Graph

__all__ = ["Device", "Event", "Graph", "Memory", "MemoryPointer", "MemoryPool", "Stream", "get_allocator",
           "get_current_stream", "get_device_id", "get_elapsed_time", "graph", "is_available", "memory", "nccl",
           "runtime", "set_allocator", "stream", "using_allocator"]


def is_available() -> bool:
    """True when at least one GPU is emulated."""
    return _state.num_devices() > 0
