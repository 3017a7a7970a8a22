"""Per-device event counters of the emulated GPUs: cheap dict increments, read with :func:`snapshot`."""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["DeviceCounters", "counters", "snapshot", "reset", "ensure"]


class DeviceCounters:
    """What one emulated GPU has done since the last :meth:`reset`.

    Attributes:
        allocations: blocks handed out by the memory pool.
        bytes_in_use: bytes of the blocks in use now (not reset).
        peak_bytes: the largest ``bytes_in_use`` seen since the last reset.
        h2d_copies, h2d_bytes, d2h_copies, d2h_bytes: host <-> device copies.
        p2p_copies, p2p_bytes: copies from another emulated device onto this one.
        host_syncs: times the host waited for this device (stream/event/device synchronize, blocking reads).
        kernel_launches: RawKernel launches by kernel name.
        ops: array operations by name (ufuncs, reductions, creation, ...).
        nccl_calls: NCCL collectives by name; nccl_bytes: bytes sent by NCCL dtype name.
        op_launches: array operations that touched data (a kernel on a GPU; views and metadata-only
            operations are not counted), by name.
        op_bytes: bytes those operations read and wrote (arguments accessed, plus a new result), by name.
        nccl_call_bytes: bytes sent by NCCL collective name.
        nccl_ring_bytes: bytes this rank sends in NCCL's ring algorithms, by collective name, as a
            float (see :mod:`mxlite._emulation.fakecupy.cuda.nccl` for the model).
        graph_launches: CUDA graph launches (``Graph.launch``). Work recorded by a stream capture counts
            here when a launch replays it, and not in the per-operation counters (``ops``, ``op_launches``,
            ``op_bytes``, ``kernel_launches``, ``p2p_copies``/``p2p_bytes``), neither at capture nor at launch.
        graph_nodes: nodes those launches ran (kernels, array operations, copies, fills, GEMMs).
    """

    __slots__ = ("allocations", "bytes_in_use", "peak_bytes", "h2d_copies", "h2d_bytes", "d2h_copies", "d2h_bytes",
                 "p2p_copies", "p2p_bytes", "host_syncs", "kernel_launches", "ops", "nccl_calls", "nccl_bytes",
                 "op_launches", "op_bytes", "nccl_call_bytes", "nccl_ring_bytes", "graph_launches", "graph_nodes")

    def __init__(self) -> None:
        self.bytes_in_use = 0
        self.reset()

    def reset(self) -> None:
        """Zero every counter; ``peak_bytes`` restarts from the bytes in use now."""
        self.allocations = 0
        self.peak_bytes = self.bytes_in_use
        self.h2d_copies = self.h2d_bytes = self.d2h_copies = self.d2h_bytes = 0
        self.p2p_copies = self.p2p_bytes = 0
        self.host_syncs = 0
        self.kernel_launches: Counter[str] = Counter()
        self.ops: Counter[str] = Counter()
        self.nccl_calls: Counter[str] = Counter()
        self.nccl_bytes: Counter[str] = Counter()
        self.op_launches: Counter[str] = Counter()
        self.op_bytes: Counter[str] = Counter()
        self.nccl_call_bytes: Counter[str] = Counter()
        self.nccl_ring_bytes: Counter[str] = Counter()
        self.graph_launches = 0
        self.graph_nodes = 0

    def snapshot(self) -> dict[str, Any]:
        """The counters as a plain dict (copies of the per-name counts)."""
        return {name: (dict(value) if isinstance(value, Counter) else value)
                for name, value in ((n, getattr(self, n)) for n in self.__slots__)}


counters: dict[int, DeviceCounters] = {}


def ensure(num_devices: int) -> None:
    """Make sure devices ``0 .. num_devices-1`` have counters."""
    for i in range(num_devices):
        counters.setdefault(i, DeviceCounters())


def snapshot() -> dict[int, dict[str, Any]]:
    """Every emulated device's counters, ``{device id: {counter: value}}``."""
    return {i: c.snapshot() for i, c in sorted(counters.items())}


def reset() -> None:
    """Reset every emulated device's counters."""
    for c in counters.values():
        c.reset()
