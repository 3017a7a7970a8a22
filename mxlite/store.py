"""Flat per-(device, dtype) arenas: every parameter's data and gradient are views into one buffer.

A :class:`ParameterStore` owns one :class:`Arena` per (device, dtype). An arena holds two
flat buffers:

* ``data``: parameter values in *registration order* (the order parameters were created in
  their Block), filled from the front;
* ``grad``: gradients in *reverse* registration order, filled from the back, so the
  gradients backward produces first (those of the last layers) come first in memory and a
  run of ready gradients is one contiguous slice — a communication bucket needs no copy.

``Parameter.data(dev)`` / ``grad(dev)`` are :class:`Tensor` objects whose arrays are views of
these buffers. Parameters often get their shape late (deferred initialisation during the
first forward), so an arena grows: capacity doubles, old contents are copied once, and every
existing Tensor is re-pointed at its view of the new buffer (the Tensor objects themselves
never change, so references held by users and by the optimizer stay valid).

Each slot starts on a multiple of :data:`ALIGN` elements so fused kernels can use vector loads;
padding stays zero, so an update rule applied to the whole buffer leaves it zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .autograd.tensor import Tensor
from .device import Device

__all__ = ["ALIGN", "Arena", "ParameterStore", "Slot"]

ALIGN = 16  # elements; 64 bytes of float32 = one L2 sector pair, enough for float4 loads
_MIN_CAPACITY = 1024  # elements; avoids a cascade of tiny reallocations for small models


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _checked_shape(key: Any, shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, each >= 0 (ValueError naming the key and the shape otherwise)."""
    try:
        dims = tuple(shape)
        ok = all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) and n >= 0 for n in dims)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"cannot place {key!r} in an arena: its shape {shape!r} must be integers >= 0 "
                         "(a dimension still unknown, -1, must be known first)")
    return tuple(int(n) for n in dims)


class Slot:
    """One parameter's place in an arena: offsets, shape and the Tensors viewing it.

    Attributes:
        key: the owner's identity (any hashable; a Parameter uses itself).
        shape: the parameter's shape; ``size`` its element count, ``span`` the aligned size.
        offset: start of the data view in ``Arena.data`` (elements).
        grad_offset: start of the gradient view in ``Arena.grad`` (elements), or None.
        data, grad: Tensors viewing the buffers (``grad`` None without a dense gradient).
    """

    __slots__ = ("key", "shape", "size", "span", "offset", "grad_offset", "data", "grad")

    def __init__(self, key: Any, shape: tuple[int, ...], with_grad: bool) -> None:
        self.key = key
        self.shape = shape
        self.size = int(np.prod(shape, dtype=np.int64))
        self.span = _aligned(self.size)
        self.offset = 0
        self.grad_offset: int | None = 0 if with_grad else None
        self.data: Tensor | None = None
        self.grad: Tensor | None = None


class Arena:
    """Two flat buffers (data, grad) on one device for one dtype; see the module docstring.

    Attributes:
        device, dtype: where the buffers live and their element type.
        slots: the parameters' slots, in registration order.
        data_buf: the flat data buffer (parameters from the front), or None before the first slot;
            replaced by a larger one when the arena grows (every slot's tensors are re-pointed).
        grad_buf: the flat gradient buffer (gradients from the back: reverse registration order).
    """

    def __init__(self, device: Device, dtype: Any) -> None:
        self.device = device
        self.dtype = np.dtype(dtype)
        self.slots: list[Slot] = []  # registration order
        self._capacity = 0
        self._grad_capacity = 0
        self.data_buf: Any = None
        self.grad_buf: Any = None
        self._used = 0
        self._grad_used = 0

    # -- views of the live regions --------------------------------------------------------
    @property
    def data(self) -> Any:
        """The live data region (raw array, length ``used``), in registration order."""
        return self.data_buf[: self._used]

    @property
    def grad(self) -> Any:
        """The live gradient region (raw array), in reverse registration order."""
        return self.grad_buf[self._grad_capacity - self._grad_used:]

    @property
    def used(self) -> int:
        """Elements of the data buffer in use (including alignment padding)."""
        return self._used

    @property
    def grad_used(self) -> int:
        """Elements of the gradient buffer in use (including alignment padding)."""
        return self._grad_used

    def grad_offset_in_region(self, slot: Slot) -> int:
        """Offset of ``slot``'s gradient within :attr:`grad` (0 = first produced by backward)."""
        assert slot.grad_offset is not None
        return slot.grad_offset - (self._grad_capacity - self._grad_used)

    # -- registration ---------------------------------------------------------------------
    def add(self, key: Any, shape: tuple[int, ...], with_grad: bool = True) -> Slot:
        """Append a slot for a parameter of ``shape``; returns it with zeroed data/grad views.

        Raises:
            ValueError: ``shape`` is not a tuple of integers >= 0 (e.g. a dimension still unknown, -1);
                the arena is left as it was (no slot, nothing counted).
        """
        with self.device.use():
            return self._add(key, shape, with_grad)

    def _add(self, key: Any, shape: tuple[int, ...], with_grad: bool) -> Slot:
        slot = Slot(key, _checked_shape(key, shape), with_grad)
        need = self._used + slot.span
        need_grad = self._grad_used + (slot.span if with_grad else 0)
        # (the first slot allocates even when it is empty: every slot's views need a buffer)
        if self.data_buf is None or need > self._capacity or need_grad > self._grad_capacity:
            self._reallocate(max(need, 2 * self._capacity, _MIN_CAPACITY),
                             max(need_grad, 2 * self._grad_capacity, _MIN_CAPACITY))
        # The views first: only then is anything counted or listed (a failure leaves no phantom slot).
        offset, grad_offset = self._used, (self._grad_capacity - need_grad if with_grad else None)
        data = Tensor(self._view(self.data_buf, offset, slot), self.device)
        grad = Tensor(self._view(self.grad_buf, grad_offset, slot), self.device) if with_grad else None
        slot.offset, slot.grad_offset, slot.data, slot.grad = offset, grad_offset, data, grad
        self._used, self._grad_used = need, need_grad
        self.slots.append(slot)
        return slot

    def remove(self, slot: Slot) -> None:
        """Drop a slot and compact the buffers (other slots' Tensors are re-pointed)."""
        with self.device.use():
            self._remove(slot)

    def _remove(self, slot: Slot) -> None:
        self.slots.remove(slot)
        kept = self.slots
        old_data, old_grad = self.data_buf, self.grad_buf
        old_offsets = [(s.offset, s.grad_offset) for s in kept]
        self._used = self._grad_used = 0
        self.data_buf = self._zeros(self._capacity)
        self.grad_buf = self._zeros(self._grad_capacity)
        for s, (off, goff) in zip(kept, old_offsets):
            s.offset = self._used
            self._used += s.span
            self.data_buf[s.offset: s.offset + s.span] = old_data[off: off + s.span]
            if goff is not None:
                self._grad_used += s.span
                s.grad_offset = self._grad_capacity - self._grad_used
                self.grad_buf[s.grad_offset: s.grad_offset + s.span] = old_grad[goff: goff + s.span]
            self._rebind(s)

    # -- internals ------------------------------------------------------------------------
    def _zeros(self, n: int) -> Any:
        with self.device.use():
            return self.device.xp.zeros(n, dtype=self.dtype)

    @staticmethod
    def _view(buf: Any, offset: int, slot: Slot) -> Any:
        return buf[offset: offset + slot.size].reshape(slot.shape)

    def _rebind(self, s: Slot) -> None:
        s.data.rebind(self._view(self.data_buf, s.offset, s))
        if s.grad is not None:
            s.grad.rebind(self._view(self.grad_buf, s.grad_offset, s))

    def _reallocate(self, capacity: int, grad_capacity: int) -> None:
        data, grad = self._zeros(capacity), self._zeros(grad_capacity)
        if self.data_buf is not None:
            data[: self._used] = self.data_buf[: self._used]
            grad[grad_capacity - self._grad_used:] = self.grad_buf[self._grad_capacity - self._grad_used:]
        shift = grad_capacity - self._grad_capacity
        self.data_buf, self.grad_buf = data, grad
        self._capacity, self._grad_capacity = capacity, grad_capacity
        for s in self.slots:
            if s.grad_offset is not None:
                s.grad_offset += shift
            self._rebind(s)


class ParameterStore:
    """The arenas of a set of parameters (usually one model), one per (device, dtype)."""

    def __init__(self) -> None:
        self._arenas: dict[tuple[Device, np.dtype], Arena] = {}

    def arena(self, device: Device, dtype: Any) -> Arena:
        """The arena for ``(device, dtype)``, created empty on first use."""
        key = (device, np.dtype(dtype))
        arena = self._arenas.get(key)
        if arena is None:
            arena = self._arenas[key] = Arena(device, dtype)
        return arena

    def arenas(self) -> Iterator[Arena]:
        """Every arena, in creation order."""
        return iter(list(self._arenas.values()))

    def __repr__(self) -> str:
        parts = [f"{a.device}/{a.dtype}: {len(a.slots)} params, {a.used} elements" for a in self._arenas.values()]
        return f"ParameterStore({'; '.join(parts)})"
