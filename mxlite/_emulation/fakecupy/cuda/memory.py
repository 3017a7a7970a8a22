"""``cupy.cuda.memory``: the pool, pointers and the out-of-memory error."""

from __future__ import annotations

from .. import _memory
from .._memory import Memory, MemoryPointer, MemoryPool, get_allocator, set_allocator

__all__ = ["Memory", "MemoryPointer", "MemoryPool", "OutOfMemoryError", "alloc", "get_allocator", "set_allocator"]


class OutOfMemoryError(MemoryError):
    """The pool's limit would be exceeded."""

    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        self.size, self.total, self.limit = size, total, limit
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                         f"limit set to: {limit:,} bytes).")


def alloc(size: int) -> MemoryPointer:
    """Allocate ``size`` bytes on the current device (from the pool, on the current stream)."""
    return MemoryPointer(_memory.alloc(int(size)), 0)
