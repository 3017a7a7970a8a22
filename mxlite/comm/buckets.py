"""Gradient buckets: zero-copy slices of the gradient arenas, reduced as soon as backward fills them.

The gradient buffer of an arena holds gradients in reverse registration order, so backward,
which produces the last layers' gradients first, fills it roughly from the front. A
:class:`Bucket` is a run of parameters whose gradients are adjacent in every device mirror's
arena: its buffer on each mirror is one slice of that arena's gradient buffer (no copy), and
one collective reduces it.

Cutting rule (SINGA's threshold rule): parameters are taken in gradient-buffer order and added
to the open bucket while it stays within ``threshold_bytes``; a parameter larger than the
threshold travels alone, small ones travel together. A bucket also ends where the next
parameter is not adjacent (a parameter of another Trainer or one without gradient lies
between) or lives on other devices or in another dtype.

Overlap: :class:`GradientSync` registers a ready-hook on every mirror of every bucketed
parameter; when backward has written the last gradient of a bucket on every mirror, the bucket
is reduced at once (asynchronously on GPUs), while backward goes on with the earlier layers.
``allreduce_grads`` then reduces what is left and waits for everything. The collectives are the
same as without overlap, so the results are identical, bit for bit.

With overlap, gradients are summed in place during backward: call backward once per step, or
again over every parameter (the usual case). Gradient accumulation (``grad_req='add'``) turns
overlap off for the parameters concerned.

Compression (a :class:`~mxlite.comm.compression.Codec`): each bucket is reduced with
``codec.reduce`` instead of an all-reduce. Error-feedback codecs (2-bit, top-k, threshold) keep
one float32 residual per element of every mirror's gradient arena, laid out like the arena, so a
bucket's residual is the same slice; residuals follow their parameters when an arena grows.
On GPUs with NCCL the codecs exchange on the devices, with no host copy: 2bit and topk by one
NCCL all-gather per bucket (decoded on every GPU); threshold after backward, every bucket's
size agreed by one small NCCL all-reduce per step; fp16/bf16 by a half-precision NCCL
all-reduce into a wire buffer that the fused update reads directly (:mod:`mxlite.comm.narrow`),
so the gradient buffer keeps this device's own gradient until :meth:`GradientSync.materialize`
writes the sum into it for readers other than the fused update.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import narrow
from .base import DONE, Communicator, Work

__all__ = ["Bucket", "GradientSync", "plan_buckets", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 25 * 2**20  # as PyTorch DDP: large enough to amortise latency, small enough to overlap


@dataclass
class Bucket:
    """Parameters whose gradients are one contiguous slice of each mirror's gradient arena."""

    params: list[Any]
    arenas: list[Any]  # per mirror
    start: list[int]  # per mirror, element offsets into the arena's gradient buffer
    end: list[int]
    leaves: frozenset[int] = frozenset()  # id() of every (parameter, mirror) leaf Tensor
    pending: set[int] = field(default_factory=set)  # leaves not yet written by this backward
    reduced: bool = False  # reduced during backward, not yet consumed by allreduce_grads
    rewritten: set[int] = field(default_factory=set)  # leaves written again after the early reduction
    grad_bufs: list[Any] = field(default_factory=list)  # per mirror, the gradient buffer the slices index

    @property
    def nbytes(self) -> int:
        return (self.end[0] - self.start[0]) * np.dtype(self.arenas[0].dtype).itemsize

    def stale(self) -> bool:
        """Whether an arena has been reallocated since the plan (the offsets no longer hold)."""
        return any(a.grad_buf is not buf for a, buf in zip(self.arenas, self.grad_bufs))

    def buffers(self) -> list[Any]:
        """The bucket's slice of every mirror's gradient buffer (views)."""
        return [a.grad_buf[s:e] for a, s, e in zip(self.arenas, self.start, self.end)]


def plan_buckets(params: Sequence[Any], threshold_bytes: int = DEFAULT_BUCKET_BYTES) -> list[Bucket]:
    """Cut ``params`` (initialised, dense gradients) into buckets; see the module docstring.

    Buckets come in gradient-buffer order of the first mirror, i.e. roughly the order backward
    completes them.
    """
    entries = []
    for p in params:
        slots = p.arena_slots()
        if p.grad_req == "null" or slots[0][1].grad_offset is None:
            continue  # frozen since the plan was made: no gradient to reduce (the Trainer re-plans)
        entries.append((tuple(str(d) for d in p.list_device()), np.dtype(p.dtype).name, slots[0][1].grad_offset, p,
                        slots))
    entries.sort(key=lambda e: e[:3])
    buckets: list[Bucket] = []
    current: Bucket | None = None
    key = None
    for devices, dtype, _, p, slots in entries:
        arenas = [a for a, _ in slots]
        size_bytes = slots[0][1].span * np.dtype(dtype).itemsize
        adjacent = current is not None and key == (devices, dtype) and all(
            a is ca and s.grad_offset == end for (a, s), ca, end in zip(slots, current.arenas, current.end))
        if current is None or not adjacent or current.nbytes + size_bytes > threshold_bytes:
            current = Bucket([], arenas, [s.grad_offset for _, s in slots], [s.grad_offset for _, s in slots])
            buckets.append(current)
            key = (devices, dtype)
        current.params.append(p)
        current.end = [s.grad_offset + s.span for _, s in slots]
    for b in buckets:
        b.grad_bufs = [a.grad_buf for a in b.arenas]
        b.leaves = frozenset(id(s.data) for p in b.params for _, s in p.arena_slots())
        b.pending = set(b.leaves)
    return buckets


class GradientSync:
    """Reduces a Trainer's dense gradients bucket by bucket, overlapping with backward.

    Args:
        comm: the communicator (its devices are the mirrors' devices, in order).
        params: the parameters to keep in sync (initialised, dense gradients).
        threshold_bytes: the bucket size bound.
        overlap: reduce each bucket from backward's ready-hooks as soon as it is complete.
    """

    def __init__(self, comm: Communicator, params: Sequence[Any], threshold_bytes: int = DEFAULT_BUCKET_BYTES,
                 overlap: bool = True, codec: Any = None) -> None:
        self.comm = comm
        self.params = list(params)
        self.threshold_bytes = threshold_bytes
        self.overlap = overlap
        self.codec = codec
        self.buckets: list[Bucket] = []
        self._bucket_of: dict[int, Bucket] = {}
        self._hooked: set[int] = set()
        self._works: list[Work] = []
        # id(arena) -> (residual buffer, {id(param): grad offset}) for error-feedback codecs
        self._residuals: dict[int, tuple[Any, dict[int, int]]] = {}
        # Codecs on NCCL run on the devices (no host copy); see the module docstring.
        from .nccl import NcclCommunicator  # noqa: PLC0415 - CuPy is imported only when NCCL is used

        on_nccl = codec is not None and isinstance(comm, NcclCommunicator)
        self._narrow = on_nccl and codec.narrow_wire  # fp16/bf16: the update reads the half-precision sum
        self._on_device = on_nccl and not codec.narrow_wire
        self._deferred: list[tuple[list[Any], list[tuple[Any, ...]]]] = []  # threshold: encoded, not exchanged
        # The newest GradientSync owns its parameters: one built later for any of them (another
        # Trainer, or this Trainer's plan rebuilt) takes them over, and this one stops reducing.
        self._taken: list[str] = []  # labels of parameters a newer GradientSync took over
        me = weakref.ref(self)
        for p in self.params:
            previous = p._grad_sync() if getattr(p, "_grad_sync", None) is not None else None
            if previous is not None and previous is not self:
                previous._taken.append(p.label)
            p._grad_sync = me
        self.plan()

    def plan(self) -> None:
        """(Re)cut the buckets for the arenas' current layout and hook any new leaves."""
        self.buckets = plan_buckets(self.params, self.threshold_bytes)
        self._bucket_of = {leaf: b for b in self.buckets for leaf in b.leaves}
        if self.codec is not None and self.codec.needs_residual:
            self._replan_residuals()
        if not self.overlap:
            return
        me = weakref.ref(self)
        for p in self.params:
            if p.grad_req != "write":
                continue
            for _, slot in p.arena_slots():
                if id(slot.data) not in self._hooked:
                    self._hooked.add(id(slot.data))
                    slot.data.add_ready_hook(lambda leaf, me=me: (s := me()) is not None and s._on_ready(leaf))

    def _stale_plan(self) -> bool:
        return any(b.stale() for b in self.buckets)

    def _on_ready(self, leaf: Any) -> None:
        bucket = self._bucket_of.get(id(leaf))
        if bucket is None or bucket.stale() or self._taken:
            return  # a grown arena (replanned at the next allreduce_grads), or a plan taken over
        if self._narrow:  # this gradient was written again: the wire's sum of its bucket is old
            for arena, start, end in zip(bucket.arenas, bucket.start, bucket.end):
                narrow.wire_buffer(arena, self.codec.wire_dtype).drop(start, end)
        if self._on_device and self.codec.deferred_on_nccl:
            return  # threshold: every bucket is exchanged at allreduce_grads, their sizes agreed at once
        if bucket.reduced:
            bucket.rewritten.add(id(leaf))
            if bucket.rewritten != bucket.leaves:
                return
            bucket.rewritten.clear()  # a whole second backward over the bucket: reduce it again
            bucket.pending.clear()
        bucket.pending.discard(id(leaf))
        if not bucket.pending and all(p.grad_req == "write" for p in bucket.params):
            self._works.append(self._reduce(bucket))
            bucket.reduced = True
            bucket.pending = set(bucket.leaves)

    def allreduce_grads(self) -> None:
        """Reduce every bucket not yet reduced during backward, then wait for all of them.

        Raises:
            RuntimeError: a bucket was reduced during one backward and partly rewritten by a
                later one (its gradients would mix sums and local values); names the parameters.
        """
        if self._taken:
            self._reset()
            raise RuntimeError(f"Parameters {self._taken} are now kept in sync by another Trainer (created later); a "
                               "parameter's gradients can be summed by one Trainer at a time")
        if self._stale_plan():
            self._replan_keeping_reduced()
        for bucket in self.buckets:
            if bucket.reduced and bucket.rewritten:
                names = sorted({p.label for p in bucket.params for _, s in p.arena_slots()
                                if id(s.data) in bucket.rewritten})
                self._reset()
                raise RuntimeError(
                    f"backward ran again before step and rewrote the gradients of {names} after their bucket "
                    "had already been summed across devices; sum each step's gradients once (one backward per "
                    "step), accumulate with grad_req='add', or create the Trainer with overlap=False")
            if not bucket.reduced:
                self._works.append(self._reduce(bucket))
        self._works.append(self._flush_deferred())
        for work in self._works:
            if work is not DONE and work is not None:
                work.wait()
        self._reset()

    def _reset(self) -> None:
        self._works.clear()
        for bucket in self.buckets:
            bucket.reduced = False
            bucket.pending = set(bucket.leaves)
            bucket.rewritten.clear()

    def _replan_keeping_reduced(self) -> None:
        """Re-cut the buckets of grown arenas; what backward already reduced is not reduced again.

        (A narrow wire's sums lived in the old layout: those buckets are reduced again from the
        gradient buffer, which their reduction never changed.)
        """
        done = set() if self._narrow else {id(p) for b in self.buckets if b.reduced and not b.rewritten
                                            for p in b.params}
        self.plan()
        for bucket in self.buckets:
            owned = [p for p in bucket.params if id(p) in done]
            if owned and len(owned) < len(bucket.params):
                self.reduce_params([p for p in bucket.params if id(p) not in done])
            bucket.reduced = bool(owned)

    def reduce_params(self, params: Sequence[Any]) -> None:
        """Sum these parameters' gradients now, one bucket each (for parameters that joined late)."""
        if self._stale_plan():
            self.plan()
        for bucket in plan_buckets(params, 1):
            work = self._reduce(bucket)
            if work is not DONE:
                work.wait()
        work = self._flush_deferred()
        if work is not None:
            work.wait()

    def materialize(self) -> None:
        """Write the narrow wire's sums into the gradient buffers (for readers other than the fused update).

        With fp16/bf16 on NCCL the sums stay in half precision in each arena's wire buffer, read
        directly by the fused optimizer kernels; ``Trainer.allreduce_grads()`` called on its own,
        the AMP and finiteness checks and rules without a fused kernel read the gradient buffers,
        so they call this first (one ``from_wire`` launch per bucket and device). A no-op otherwise.
        """
        if not self._narrow:
            return
        narrow.materialize_all({a for b in self.buckets for a in b.arenas})

    def take_residuals(self, other: GradientSync) -> None:
        """Carry another plan's compression residuals over (a plan rebuilt for the same parameters)."""
        if self.codec is None or not self.codec.needs_residual or other.codec is None:
            return
        for p in self.params:
            if all(p is not q for q in other.params):
                continue
            for mirror in range(len(p.arena_slots())):
                mine, theirs = self.residual(p, mirror), other.residual(p, mirror)
                if mine is not None and theirs is not None:
                    mine[...] = theirs

    # -- compression ------------------------------------------------------------------------
    def _reduce(self, bucket: Bucket) -> Work:
        """Sum the bucket over every mirror and process: an all-reduce, or the codec's exchange."""
        buffers = bucket.buffers()
        if self.codec is None:
            return self.comm.allreduce(buffers)
        if self._narrow:
            # cut bucket -> cast with the 1/N pre-scale into the wire -> NCCL half all-reduce -> the update reads it
            wires = [narrow.wire_buffer(a, self.codec.wire_dtype) for a in bucket.arenas]
            work = self.codec.reduce_on_nccl(buffers, [w.wire[s:e] for w, s, e in zip(wires, bucket.start, bucket.end)],
                                             self.comm)
            members = frozenset(id(p) for p in bucket.params)
            for w, s, e in zip(wires, bucket.start, bucket.end):
                w.mark(s, e, members, self.comm.contributions)
            return work
        residuals = ([self._residuals[id(a)][0][s:e] for a, s, e in zip(bucket.arenas, bucket.start, bucket.end)]
                     if self.codec.needs_residual else [None] * len(buffers))
        if self._on_device:
            if self.codec.deferred_on_nccl:  # threshold: encoded now, exchanged with the others' sizes agreed
                self._deferred.append((buffers, self.codec.encode_on_device(buffers, residuals, self.comm)))
                return DONE
            return self.codec.reduce_on_nccl(buffers, residuals, self.comm)
        home = self.comm.devices[0]
        with home.use():
            total = home.xp.empty_like(buffers[0])
        self.codec.reduce(buffers, residuals, total, self.comm)
        self.comm._copy_out(total, buffers, home)
        return DONE

    def _flush_deferred(self) -> Work | None:
        """Exchange the threshold buckets encoded so far (one size agreement for all of them); None when none."""
        batch, self._deferred = self._deferred, []
        return self.codec.exchange_on_nccl(batch, self.comm) if batch else None

    def _replan_residuals(self) -> None:
        """One float32 residual per gradient element, laid out like each mirror's arena; kept across growth."""
        old, self._residuals = self._residuals, {}
        for p in self.params:
            for arena, slot in p.arena_slots():
                if id(arena) not in self._residuals:
                    with arena.device.use():
                        self._residuals[id(arena)] = (arena.device.xp.zeros(arena.grad_buf.size, np.float32), {})
                buf, offsets = self._residuals[id(arena)]
                offsets[id(p)] = slot.grad_offset
                if id(arena) in old and id(p) in old[id(arena)][1]:
                    prev_buf, prev_offsets = old[id(arena)]
                    start = prev_offsets[id(p)]
                    buf[slot.grad_offset:slot.grad_offset + slot.span] = prev_buf[start:start + slot.span]

    def residual(self, param: Any, mirror: int) -> Any:
        """The compression residual of ``param`` on its ``mirror``-th device (a flat view), or None."""
        if self.codec is None or not self.codec.needs_residual:
            return None
        if self._stale_plan():
            self.plan()
        arena, slot = param.arena_slots()[mirror]
        buf, offsets = self._residuals[id(arena)]
        return buf[offsets[id(param)]:offsets[id(param)] + slot.span]
