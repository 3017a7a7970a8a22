"""Large host arrays that a CPU training step makes anew every step, kept and handed out again: :func:`host_empty`.

Purpose: a step on CPU devices makes the same large arrays every time (a convolution's columns and output,
max pooling's outputs, batch normalisation's output and input gradient, a ReLU's output and gradient: tens
of MB each for the CNNs of ``benchmarks/bench_train.py``). glibc serves a block that large with a fresh
mmap, or gives freed ones back to the system, so the first write of every page faulted, every step; with
two threads writing, the faults contend in the kernel (batch normalisation's backward over 128 x 32 x 32 x
32 float32 took 15 ms on two threads of the development machine, against about 3 ms into memory already
touched). The pool keeps such arrays and hands one out again once nothing else references it.

How: :class:`HostBuffers` keeps up to ``per_shape`` arrays for each of the most recently used (shape,
dtype) pairs, within ``max_bytes`` in all, and gives out one that only the pool references (CPython's
reference count: whoever keeps the array, or any view of it, holds it), else a new one that it keeps if
there is room. Arrays under ``min_bytes`` are not pooled (malloc reuses small blocks itself).

Warnings: the contents of a handed-out array are whatever was there (``numpy.empty``). Memory held: at
most ``max_bytes`` beyond what the step itself holds.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["HostBuffers", "host_empty"]


class HostBuffers:
    """A pool of uninitialised C-contiguous NumPy arrays, reused once nobody else holds them (module docstring)."""

    def __init__(self, per_shape: int = 4, shapes: int = 32, max_bytes: int = 1 << 30,
                 min_bytes: int = 1 << 20) -> None:
        self.per_shape, self.shapes, self.max_bytes, self.min_bytes = per_shape, shapes, max_bytes, min_bytes
        self._buffers: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised C-contiguous NumPy array of ``shape`` and ``dtype`` that nobody else holds."""
        key = (tuple(int(s) for s in shape), np.dtype(dtype))
        size = math.prod(key[0]) * key[1].itemsize
        if size < self.min_bytes:
            return np.empty(key[0], dtype=key[1])
        with self._lock:
            kept = self._buffers.pop(key, [])
            self._buffers[key] = kept  # most recently used last
            for buf in kept:
                if sys.getrefcount(buf) <= 3:  # the list, this loop and the call: nobody else
                    return buf
            buf = np.empty(key[0], dtype=key[1])
            if len(kept) < self.per_shape and size * self.per_shape <= self.max_bytes:
                kept.append(buf)
                self._bytes += size
            while (len(self._buffers) > self.shapes or self._bytes > self.max_bytes) and len(self._buffers) > 1:
                oldest = next(iter(self._buffers))  # the least recently used shape goes
                self._bytes -= sum(b.nbytes for b in self._buffers.pop(oldest))
            return buf


_POOL = HostBuffers()


def host_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous NumPy array from the process's pool (:class:`HostBuffers`): reused
    memory for a large array that nobody else holds, else a new one."""
    return _POOL.empty(shape, dtype)
