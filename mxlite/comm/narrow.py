"""Narrow wires on NCCL: gradients summed in float16 or bfloat16 on the devices, read by the update as they are.

Purpose: with the ``fp16``/``bf16`` codecs on GPUs with NCCL, a bucket is reduced by a real
half-precision all-reduce, and the fused optimizer kernels read the reduced half-precision
bucket directly (its dtype is a template parameter of the kernels), with no cast back and no
float32 copy of the gradient.

Buffer flow, per bucket and per GPU (all on the GPU's communication stream):

1. cut: the bucket is a slice ``[start, end)`` of the arena's gradient buffer (float32 or float16);
2. cast and pre-scale, one launch (kernel ``to_wire``): ``wire[start:end] = half(clip(g) * (1/N))``,
   N the number of contributions (GPUs times processes), into this arena mirror's *wire buffer*,
   which has the gradient buffer's length and layout in the wire dtype;
3. all-reduce: NCCL ``allReduce`` of ``wire[start:end]`` in place, NCCL_FLOAT16 or NCCL_BFLOAT16,
   sum: the wire now holds ``sum(g) / N`` in half precision;
4. update: the fused kernel reads ``wire`` with the gradient offsets it would use in the gradient
   buffer, and multiplies by ``rescale_grad * N`` (:class:`mxlite.optimizer._fused.Launcher`).

Sharded (ZeRO-1), :func:`reduce_scatter_to_wire`: steps 1 and 2 as above (every device casts its
whole bucket: all of it is its contribution), then 3': NCCL ``reduceScatter`` of the wire slice in
the wire dtype, sum: device ``k``'s shard ``k`` of the slice (:meth:`Communicator.shards`) holds
``sum(g) / N``, added in the same order as step 3 would (NCCL's order; rank order in the
emulation, where the shard's bits equal the all-reduce's), so the precision below holds as it
is; the rest of its wire slice is unspecified. Same bytes on the wire as step 3 takes for its
first half; the all-gather of the updated weights is the second. The Trainer's sharded states cut
the buckets into owned *pieces* instead (:func:`reduce_to_owners_to_wire`: one NCCL ``reduce`` per
piece onto its owner, in the wire dtype), with the same precision and bytes.

The gradient buffer itself still holds this device's own (unsummed) gradient. Anything else
that reads gradients after the sum (``Trainer.allreduce_grads()`` called by the user, the AMP
overflow check, ``check_finite``, rules without a fused kernel) first calls
:meth:`NarrowGradient.materialize`, which writes ``float32(wire) * N`` into the gradient buffer
(kernel ``from_wire``, one launch per bucket) and retires the wire's sum.

Precision of the pre-scale (float16: unit roundoff u = 2^-11, smallest normal 2^-14, largest
65504; bfloat16: u = 2^-8, float32's range). Each contribution x_i = g_i/N is rounded once
(relative error <= u, or an absolute error <= 2^-25 below float16's normal range), and the N-1
additions of the sum each round once (NCCL's ring or tree adds in half precision). So the sum
``s`` read by the update is within ``N * u * sum|g_i| / N`` (first order: N roundings of
magnitude at most the partial sums, bounded by ``sum|x_i|``) plus ``N * 2^-25`` (float16) of
``mean(g)``; multiplied by N, the summed gradient is within ``N * u * sum|g_i| + N^2 * 2^-25``
of the float32 sum. The pre-scale keeps every partial sum at most ``max|g_i|`` in magnitude, so
the half sum overflows only where a gradient itself exceeds float16's range (65504): without it,
the sum of N gradients below 65504 could still overflow. The price is log2(N) bits at the bottom
of float16's range: gradients below ``N * 2^-24`` lose precision or flush to 0 (bfloat16 has no
such floor). Training tolerates this as it tolerates float16 gradients; use float32 (no codec)
where a sum must be exact.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["NarrowGradient", "narrow_gradient", "wire_buffer", "materialize_all", "reduce_scatter_to_wire",
           "reduce_to_owners_to_wire"]

# arena -> its NarrowGradient per mirror arena object (each mirror has its own Arena)
_BY_ARENA: weakref.WeakKeyDictionary[Any, NarrowGradient] = weakref.WeakKeyDictionary()


@dataclass
class NarrowGradient:
    """One arena mirror's wire buffer and which of its gradient ranges the wire holds the sum of.

    Attributes:
        arena: the arena (one device mirror).
        wire: float16 (or uint16 bfloat16 bits) array of the gradient buffer's length, same layout.
        dtype: 'float16' or 'bfloat16'.
        grad_buf: the gradient buffer the wire mirrors (the arena reallocates it when it grows,
            and then the wire no longer applies).
        scale: N: the wire holds ``sum / N``.
        summed: ``{(start, end): ids of the parameters in it}``, the gradient ranges whose sum is in the wire.
    """

    arena: Any
    wire: Any
    dtype: str
    grad_buf: Any
    scale: float = 1.0
    summed: dict[tuple[int, int], frozenset[int]] = field(default_factory=dict)

    def valid(self) -> bool:
        """Whether the arena still has the gradient buffer the wire was laid out for."""
        return self.arena.grad_buf is self.grad_buf

    def covers(self, param_ids: set[int]) -> bool:
        """Whether the wire holds the sum of every parameter in ``param_ids``."""
        if not self.valid():
            return False
        held = set().union(*self.summed.values()) if self.summed else set()
        return param_ids <= held

    def mark(self, start: int, end: int, param_ids: frozenset[int], scale: float) -> None:
        """Record that ``wire[start:end]`` now holds (or, once the collective completes, will hold) a sum."""
        self.scale = float(scale)
        self.summed[(start, end)] = param_ids

    def drop(self, start: int, end: int) -> None:
        """Forget the sum of a range (its gradients were written again)."""
        self.summed.pop((start, end), None)

    def materialize(self) -> None:
        """Write ``float32(wire) * N`` into the gradient buffer for every summed range, then forget them.

        One ``from_wire`` launch per range, on the device's current stream (ordered after the
        all-reduce by the caller's wait). A stale wire (the arena grew) is just forgotten: the
        reductions that filled it are made again from the gradient buffer, which they never changed.
        """
        if not self.valid():
            self.summed.clear()
            return
        from .compression.kernels import from_wire  # noqa: PLC0415 - kernels import the device layer

        device = self.arena.device
        with device.use():
            for (start, end) in sorted(self.summed):
                target = self.grad_buf[start:end]
                wire = self.wire[start:end]
                if target.dtype == np.float32:
                    from_wire(wire, self.dtype, np.float32(self.scale), target, accumulate=False)
                else:
                    total = device.xp.empty(end - start, np.float32)
                    from_wire(wire, self.dtype, np.float32(self.scale), total, accumulate=False)
                    target[...] = total
        self.summed.clear()


def wire_buffer(arena: Any, dtype: str) -> NarrowGradient:
    """The arena mirror's :class:`NarrowGradient`, (re)allocating its wire when the gradient buffer changed."""
    found = _BY_ARENA.get(arena)
    if found is not None and found.valid() and found.dtype == dtype:
        return found
    device = arena.device
    with device.use():
        wire = device.xp.empty(arena.grad_buf.size, np.float16 if dtype == "float16" else np.uint16)
    found = _BY_ARENA[arena] = NarrowGradient(arena, wire, dtype, arena.grad_buf)
    return found


def narrow_gradient(arena: Any, param_ids: set[int]) -> NarrowGradient | None:
    """The wire holding the sum of every parameter in ``param_ids`` in this arena mirror, or None.

    None when any of them is not summed in the wire: then the gradient buffer is the one to read
    (the wire's sums are first written into it, :meth:`NarrowGradient.materialize`).
    """
    found = _BY_ARENA.get(arena)
    if found is None or not found.summed:
        return None
    if found.covers(param_ids):
        return found
    found.materialize()
    return None


def materialize_all(arenas: Any = None) -> None:
    """Write every pending wire sum into its gradient buffer (of ``arenas``, default all)."""
    targets = list(_BY_ARENA.values()) if arenas is None else [_BY_ARENA[a] for a in arenas if a in _BY_ARENA]
    for narrow in targets:
        if narrow.summed:
            narrow.materialize()


def reduce_scatter_to_wire(grads: Sequence[Any], wires: Sequence[Any], wire_dtype: str, comm: Any,
                           clip: float | None = None) -> Any:
    """Sharded narrow wire: each GPU's own shard of its wire becomes ``sum over contributions of half(clip(g) / N)``.

    Per GPU, on its communication stream (``comm`` is a :class:`~mxlite.comm.NcclCommunicator`):
    one ``to_wire`` launch casting the whole gradient slice with the 1/N pre-scale into the wire
    slice, then one NCCL ``reduceScatter`` of the wires in NCCL_FLOAT16 / NCCL_BFLOAT16, sum
    (see the module docstring, step 3'). The gradients are only read.

    Args:
        grads: one 1-D float32/float16 CuPy array per local device of ``comm`` (a bucket's slice).
        wires: one wire array of the same size per device (float16, or uint16 for bfloat16).
        wire_dtype: 'float16' or 'bfloat16'.
        comm: the NCCL communicator.
        clip: clip each gradient to ``[-clip, clip]`` first (> 0), or None.

    Returns:
        the work to wait for before reading the own shards of the wires.

    Raises:
        ValueError: an unknown wire dtype, or arrays that do not match the devices.
    """
    from .compression.kernels import to_wire  # noqa: PLC0415 - kernels import the device layer

    scale = np.float32(1.0 / comm.contributions)
    comm.begin()
    for device, stream, grad, wire in zip(comm.devices, comm.streams, grads, wires):
        with device.use(), stream:
            to_wire(grad, wire_dtype, scale, clip, out=wire)  # cast and pre-scale: the whole slice
    comm.reduce_scatter_on_device(list(wires), wire_dtype, "sum")  # NCCL half sum, own shard only
    return comm.end()


def reduce_to_owners_to_wire(grads: Sequence[Any], wires: Sequence[Any], wire_dtype: str, comm: Any,
                             pieces: Sequence[tuple[int, int, int]], clip: float | None = None) -> Any:
    """Sharded narrow wire over owned pieces: each piece of its owner's wire becomes ``sum of half(clip(g) / N)``.

    As :func:`reduce_scatter_to_wire`, with the pieces of :meth:`Communicator.reduce_to_owners`
    (``[(start, end, owner shard)]``) instead of equal shards: per GPU one ``to_wire`` launch (the
    whole slice, with the 1/N pre-scale), then one NCCL ``reduce`` per piece onto its owner, in the
    wire dtype. The gradients are only read; the rest of each wire slice is unspecified.

    Returns:
        the work to wait for before the owners read their pieces of the wires.
    """
    from .compression.kernels import to_wire  # noqa: PLC0415 - kernels import the device layer

    scale = np.float32(1.0 / comm.contributions)
    comm.begin()
    for device, stream, grad, wire in zip(comm.devices, comm.streams, grads, wires):
        with device.use(), stream:
            to_wire(grad, wire_dtype, scale, clip, out=wire)  # cast and pre-scale: the whole slice
    comm.reduce_to_owners_on_device(list(wires), pieces, wire_dtype)  # NCCL half sums, onto each piece's owner
    return comm.end()
