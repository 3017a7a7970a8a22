"""Device memory of the emulated GPUs: blocks, a stream-ordered pool per device, an address registry,
and the per-allocation access history behind strictness rules 2 and 3.

A block is a 256-byte aligned NumPy byte buffer; its host address is the device pointer, so host builds of
CUDA kernels and NCCL calls can reach the memory through plain pointers (:func:`resolve`). As in CuPy's
pool, a block belongs to the stream that was current when it was allocated: when freed it goes back to that
stream's free list and only later allocations on that stream get it again. Allocating counts as a write by
the allocating stream (the block may still be in use by earlier work of that stream).

CuPy's default pool serves every allocation unless an allocator is set (``cupy.cuda.using_allocator`` or
``set_allocator``): an allocator that returns a ``MemoryPointer`` provides the memory, so a
``cupy.cuda.MemoryPool()`` of one's own (e.g. for a CUDA graph) is a separate set of blocks. While a stream
captures, allocations on it from the default pool are refused (see :mod:`._graph`).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import _counters, _state, _streams
from ._errors import EmulatedGPUError

__all__ = ["Allocation", "Memory", "MemoryPointer", "MemoryPool", "alloc", "resolve", "using_allocator",
           "set_allocator", "get_allocator", "get_default_memory_pool", "check_pending", "occupant"]

_ALIGN = 256
_ROUND = 512
_ids = itertools.count(1)
_lock = threading.RLock()
# Registry of live (in-use) allocations: sorted start addresses and the allocation at each.
_starts: list[int] = []
_live: dict[int, weakref.ref[Allocation]] = {}  # weak: an allocation dies with its last array
# Allocations taking part in an NCCL collective whose ranks have not all been issued: {alloc id: call}.
pending_collective: dict[int, str] = {}


def _describe(stream: _streams.Stream) -> str:
    return repr(stream)


class _Block:
    """A piece of host memory standing for device memory."""

    __slots__ = ("raw", "buf", "ptr", "size", "device_id", "stream", "hazards", "released")

    def __init__(self, size: int, device_id: int, stream: _streams.Stream) -> None:
        self.raw = np.empty(size + _ALIGN, dtype=np.uint8)
        offset = (-self.raw.ctypes.data) % _ALIGN
        self.buf = self.raw[offset:offset + size]
        self.ptr = int(self.buf.ctypes.data)
        self.size = size
        self.device_id = device_id
        self.stream = stream
        # Accesses by other streams that were not known complete when the block was freed:
        # [(description of the freed allocation, stream, seq)].
        self.hazards: list[tuple[str, _streams.Stream, int]] = []
        self.released = False  # given back to the driver by free_all_blocks


class Allocation:
    """One allocation in use (CuPy's ``Memory``): a block plus the access history of its bytes.

    Attributes:
        id: allocation number (in error messages: ``alloc #id``).
        ptr: device (= host) address of byte 0; size: bytes asked for; device_id: owning device.
        writes: ``(first byte, end byte, stream, seq)`` of the writes not yet covered by a later write.
        reads: the same for reads not yet covered by a later write.
        born: ``(stream, seq)`` of the allocation's own entry in ``writes``.
        capture: the stream capture that holds the allocation until it ends (see :mod:`._graph`), or None.
    """

    __slots__ = ("id", "block", "ptr", "size", "device_id", "writes", "reads", "label", "pool", "born", "capture",
                 "__weakref__")

    def __init__(self, block: _Block, size: int, stream: _streams.Stream) -> None:
        self.id = next(_ids)
        self.block = block
        self.ptr = block.ptr
        self.size = size
        self.device_id = block.device_id
        self.born = (stream, stream._next())
        self.writes: list[tuple[int, int, _streams.Stream, int]] = [(0, max(size, 1), stream, self.born[1])]
        self.reads: list[tuple[int, int, _streams.Stream, int]] = []
        self.label = ""
        self.pool: _DevicePool | None = None  # set by the pool that hands it out
        self.capture: Any = None

    def __repr__(self) -> str:
        return f"alloc #{self.id} ({self.size} bytes at {self.ptr:#x} on gpu({self.device_id}){self.label})"

    def __del__(self) -> None:
        try:  # back to the pool that made it (after a re-install, an old pool: no effect on the new state)
            self.pool._free(self)
        except Exception:  # interpreter shutdown: nothing left to check
            pass

    def view_bytes(self) -> np.ndarray:
        """The allocation's bytes as a NumPy uint8 array (no copy)."""
        return self.block.buf[:self.size]


class Memory:
    """CuPy's ``Memory``: ``size`` bytes on the current device (``ptr``, ``size``, ``device_id``)."""

    def __init__(self, size: int) -> None:
        self._set(alloc(int(size)))

    def _set(self, allocation: Allocation) -> None:
        self._allocation = allocation
        self.ptr = allocation.ptr
        self.size = allocation.size
        self.device_id = allocation.device_id

    @classmethod
    def _of(cls, allocation: Allocation) -> Memory:
        mem = object.__new__(cls)
        mem._set(allocation)
        return mem


class MemoryPointer:
    """A pointer into device memory (``ndarray.data``): ``ptr`` is the address of the array's element 0.

    Args:
        mem: the Memory (or Allocation) pointed into.
        offset: bytes from the start of ``mem``.
    """

    def __init__(self, mem: Any, offset: int) -> None:
        allocation = mem._allocation if isinstance(mem, Memory) else mem
        self._allocation = allocation
        self.mem = mem if isinstance(mem, Memory) else Memory._of(allocation)
        self.ptr = allocation.ptr + int(offset)
        self.device_id = allocation.device_id

    @property
    def device(self) -> Any:
        """The device holding the memory."""
        from .cuda._device import Device  # noqa: PLC0415 - cycle

        return Device(self.device_id)

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self._allocation, self.ptr - self._allocation.ptr + int(offset))

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"<MemoryPointer {self.ptr:#x} into {self._allocation!r}>"


class MemoryPool:
    """Stream-ordered memory pool of the emulated GPUs (like CuPy's, one per device behind one object).

    Args:
        allocator: accepted for compatibility.

    Each ``MemoryPool()`` has blocks of its own (CuPy's default pool is :func:`get_default_memory_pool`);
    ``used_bytes``, ``total_bytes``, ``free_bytes`` and ``n_free_blocks`` report the current device.
    """

    def __init__(self, allocator: Any = None) -> None:
        self._allocator = allocator
        self._pools: dict[int, _DevicePool] = {}

    def _device_pool(self) -> _DevicePool:
        device_id = _state.check_device_id(_state.current_device_id())
        pool = self._pools.get(device_id)
        if pool is None:
            pool = self._pools[device_id] = _DevicePool(device_id)
        return pool

    def used_bytes(self) -> int:
        """Bytes of blocks in use on the current device."""
        return self._device_pool().used

    def total_bytes(self) -> int:
        """Bytes held by the pool on the current device (in use + free)."""
        pool = self._device_pool()
        return pool.used + pool.free_size

    def free_bytes(self) -> int:
        """Bytes of free blocks held by the pool on the current device."""
        return self._device_pool().free_size

    def n_free_blocks(self) -> int:
        """Number of free blocks held on the current device."""
        return sum(len(v) for v in self._device_pool().free.values())

    def free_all_blocks(self, stream: _streams.Stream | None = None) -> None:
        """Release the free blocks of the current device (of ``stream``'s free list only when given)."""
        self._device_pool().release(stream)

    def malloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes from this pool on the current device, on the current stream."""
        pool = self._device_pool()
        return MemoryPointer(pool.alloc(int(size), _streams.get_current_stream(pool.device_id)), 0)

    def get_limit(self) -> int:
        """The pool's byte limit (0: none)."""
        return self._device_pool().limit

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        """Limit the bytes the pool may hold on the current device (``size=0``: no limit)."""
        pool = self._device_pool()
        if fraction is not None:
            from .cuda.runtime import _TOTAL_GLOBAL_MEM  # noqa: PLC0415

            size = int(_TOTAL_GLOBAL_MEM * fraction)
        pool.limit = int(size or 0)


class _DevicePool:
    def __init__(self, device_id: int, default: bool = False) -> None:
        self.device_id = device_id
        self.default = default  # CuPy's default pool (refused while the allocating stream captures)
        self.free: dict[tuple[_streams.Stream, int], list[_Block]] = {}
        self.used = 0
        self.free_size = 0
        self.limit = 0
        self.hazardous: list[_Block] = []  # freed blocks whose last users were not known complete
        self.counters = _counters.counters[device_id]

    def check_stream_hazards(self, stream: _streams.Stream) -> None:
        """Rule 3: raise when a freed block of ``stream`` may still be used by unfinished work elsewhere."""
        if not self.hazardous:
            return
        for block in list(self.hazardous):
            if block.stream is stream:
                _check_block(block, stream, "reused by a new allocation on")
            if not block.hazards:
                self.hazardous.remove(block)

    def alloc(self, size: int, stream: _streams.Stream) -> Allocation:
        rounded = max(_ROUND, -(-size // _ROUND) * _ROUND)
        capture = stream._capture
        if capture is not None and self.default:
            from . import _graph  # noqa: PLC0415 - cycle

            raise _graph.default_pool_error(stream, size)
        with _lock:
            self.check_stream_hazards(stream)
            blocks = self.free.get((stream, rounded))
            new_block = not blocks
            if blocks:
                block = blocks.pop()
                self.free_size -= rounded
            else:
                if _streams.active_captures:
                    from . import _graph  # noqa: PLC0415 - cycle

                    _graph.check_unsafe_call(f"cudaMalloc of {rounded} bytes (a new block of the memory pool)")
                if self.limit and self.used + self.free_size + rounded > self.limit:
                    self.release(None)
                    if self.used + rounded > self.limit:
                        from .cuda.memory import OutOfMemoryError  # noqa: PLC0415

                        raise OutOfMemoryError(rounded, self.used, self.limit)
                block = _Block(rounded, self.device_id, stream)
            allocation = Allocation(block, size, stream)
            allocation.pool = self
            self.used += rounded
            c = self.counters
            c.allocations += 1
            c.bytes_in_use += rounded
            if c.bytes_in_use > c.peak_bytes:
                c.peak_bytes = c.bytes_in_use
            bisect.insort(_starts, block.ptr)
            _live[block.ptr] = weakref.ref(allocation)
        if capture is not None:
            capture.register(allocation, stream, new_block)
        return allocation

    def _free(self, allocation: Allocation) -> None:
        block = allocation.block
        with _lock:
            entry = _live.get(block.ptr)
            if entry is not None and entry() in (None, allocation):
                del _live[block.ptr]
                del _starts[bisect.bisect_left(_starts, block.ptr)]
            self.used -= block.size
            self.counters.bytes_in_use -= block.size
            owner = block.stream
            accesses = [(s, q) for _, _, s, q in allocation.reads + allocation.writes]
            block.hazards = [(repr(allocation), s, q) for s, q in accesses if not _streams.completed(owner, s, q)]
            if block.hazards:
                self.hazardous.append(block)
            if allocation.capture is not None:  # allocated and freed within a capture
                allocation.capture.freed.append(block)
            self.free.setdefault((owner, block.size), []).append(block)
            self.free_size += block.size

    def release(self, stream: _streams.Stream | None) -> None:
        with _lock:
            for key in list(self.free):
                if stream is not None and key[0] is not stream:
                    continue
                for block in self.free[key]:
                    if block.hazards:
                        _check_block(block, None, "released to the driver")
                        self.hazardous.remove(block)
                    block.released = True
                    self.free_size -= block.size
                del self.free[key]


def _check_block(block: _Block, stream: _streams.Stream | None, what: str) -> None:
    keep = []
    for desc, other, seq in block.hazards:
        if stream is not None:
            done = _streams.completed(stream, other, seq)
        else:
            done = _streams.host_known.get(other, 0) >= seq
        if not done:
            keep.append((desc, other, seq))
    block.hazards = keep
    if keep:
        desc, other, seq = keep[0]
        where = f"{what} {stream!r}" if stream is not None else what
        raise EmulatedGPUError(
            f"use after free: the block of {desc} was freed (back to the pool of {block.stream!r}) while op #{seq} "
            f"of {other!r} may still use it, and it is now {where}; keep the array alive until that work is "
            "known complete (synchronize, or make the allocating stream wait on an event recorded after it)")


_pools: dict[int, _DevicePool] = {}  # the default pool's per-device pools
_default_pool = MemoryPool()
_default_pool._pools = _pools
_allocator_tls = threading.local()
_allocator: list[Callable[[int], Any] | None] = [None]  # set_allocator's, for every thread


def get_default_memory_pool() -> MemoryPool:
    """The memory pool of the emulated GPUs (CuPy's default pool)."""
    return _default_pool


def ensure_pools(num_devices: int) -> None:
    """Give devices ``0 .. num_devices-1`` a pool."""
    for i in range(num_devices):
        if i not in _pools:
            _pools[i] = _DevicePool(i, default=True)


def alloc(size: int, device_id: int | None = None) -> Allocation:
    """Allocate ``size`` bytes on ``device_id`` (default: current) on that device's current stream.

    The current allocator (``using_allocator``, else ``set_allocator``) is called first: when it returns a
    ``MemoryPointer`` (e.g. ``MemoryPool.malloc`` of a pool of one's own), that memory is used; otherwise
    (an allocator called for its side effects, such as a counter) the default pool provides it.
    """
    if device_id is None:
        device_id = _state.current_device_id()
    device_id = _state.check_device_id(device_id)
    allocator = _allocator_in_effect()
    if allocator is not None:
        saved = _state.current_device_id()
        _state._tls.device = device_id
        try:
            pointer = allocator(size)
        finally:
            _state._tls.device = saved
        if isinstance(pointer, MemoryPointer):
            allocation = pointer._allocation
            if pointer.ptr != allocation.ptr or allocation.size < size or allocation.device_id != device_id:
                raise EmulatedGPUError(f"the allocator returned {pointer!r} for {size} bytes on gpu({device_id}); "
                                       "the emulation needs a pointer to the start of a large enough allocation of "
                                       "that device")
            return allocation
    return _pools[device_id].alloc(int(size), _streams.get_current_stream(device_id))


def check_pending(device_id: int) -> None:
    """Rule 3 at an API call: raise if a freed block of the current stream may still be in use."""
    _pools[device_id].check_stream_hazards(_streams.get_current_stream(device_id))


@contextlib.contextmanager
def using_allocator(allocator: Callable[[int], Any] | None = None) -> Iterator[None]:
    """Within the block (this thread), ``allocator(nbytes)`` is called for each allocation.

    An allocator returning a ``MemoryPointer`` (``pool.malloc``) provides the memory; for any other
    return value (None: e.g. a counter) the default pool does.
    """
    saved = getattr(_allocator_tls, "allocator", _UNSET)
    _allocator_tls.allocator = allocator
    try:
        yield
    finally:
        if saved is _UNSET:
            del _allocator_tls.allocator
        else:
            _allocator_tls.allocator = saved


_UNSET = object()


def set_allocator(allocator: Callable[[int], Any] | None = None) -> None:
    """Make ``allocator`` the allocator of every thread (None: CuPy's default pool); ``using_allocator`` wins."""
    _allocator[0] = allocator


def get_allocator() -> Callable[[int], Any]:
    """The allocator in effect in this thread (``using_allocator``'s, else ``set_allocator``'s, else the default
    pool's ``malloc``)."""
    allocator = _allocator_in_effect()
    return _default_pool.malloc if allocator is None else allocator


def _allocator_in_effect() -> Callable[[int], Any] | None:
    allocator = getattr(_allocator_tls, "allocator", _UNSET)
    return _allocator[0] if allocator is _UNSET else allocator


def occupant(block: _Block) -> Allocation | None:
    """The live allocation that holds ``block`` now, if any."""
    entry = _live.get(block.ptr)
    allocation = entry() if entry is not None else None
    return allocation if allocation is not None and allocation.block is block else None


def resolve(ptr: int, nbytes: int, device_id: int | None = None) -> tuple[Allocation, int]:
    """The live allocation holding ``[ptr, ptr + nbytes)`` and the offset of ``ptr`` in it.

    Raises:
        EmulatedGPUError: no live allocation holds the range, or it is on another device than ``device_id``.
    """
    ptr = int(ptr)
    with _lock:
        i = bisect.bisect_right(_starts, ptr) - 1
        entry = _live.get(_starts[i]) if i >= 0 else None
        allocation = entry() if entry is not None else None
    if allocation is None or not allocation.ptr <= ptr < allocation.ptr + max(allocation.size, 1):
        raise EmulatedGPUError(f"pointer {ptr:#x} is not inside any live allocation of the emulated GPUs")
    offset = ptr - allocation.ptr
    if offset + nbytes > allocation.size:
        raise EmulatedGPUError(f"range of {nbytes} bytes at {ptr:#x} overflows {allocation!r} "
                               f"(offset {offset}, {allocation.size - offset} bytes left)")
    if device_id is not None and allocation.device_id != device_id:
        raise EmulatedGPUError(f"pointer {ptr:#x} is in {allocation!r}, not on gpu({device_id})")
    return allocation, offset


def reset() -> None:
    """Drop every pool, the registry and the counters (used by install)."""
    _pools.clear()
    _allocator[0] = None
    _counters.counters.clear()  # arrays of an earlier install, freed later, count on their own objects
    _starts.clear()
    _live.clear()
