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

Reading a gradient while its sum may still run: on a GPU the sums of the buckets reduced during
backward are still running on the communication streams when backward returns (``allreduce_grads``
waits for them). Every public read of gradient buffers between backward and the step
(``Parameter.grad``/``list_grad``/``data``/``zero_grad``, ``gluon.utils.clip_global_norm``) first calls
:func:`wait_for_reductions`, which makes each device's current stream wait for the sums in flight (on
the device: the host does not block) and forgets them, so the reader sees the sums and the step has
nothing left to wait for. With nothing in flight (CPU devices, no overlap, after the step) it costs
one test of an empty set. Where the Trainer's step sums the gradients inside its CUDA graph
(:attr:`GradientSync.held`, one GPU per process) they are still each process's own between backward
and the step: the first read there (``Parameter.grad``/``list_grad``, the clip) warns once per process.

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

Sharded optimizer states (ZeRO-1, ``shard=``): every device (of every process) owns one contiguous,
balanced slice of each arena's *data* layout (:class:`ShardLayout`: ``shard_bounds`` over the data
range of the synced parameters), because the fused update indexes weights and states alike: a
shard's states are then laid out like ``data[lo:hi]``. Gradients lie in the reverse order, so in a
bucket the elements a device owns form a few contiguous *pieces* (a parameter cut by a shard
boundary gives a piece to each owner); each bucket is reduced onto the owners of its pieces
(:meth:`~mxlite.comm.base.Communicator.reduce_to_owners`, from the same ready-hooks as an
all-reduce: the same overlap with backward) and, after the update, :meth:`GradientSync.gather_weights`
all-gathers every arena's updated shards (``allgather_shards`` over ``data[lo:hi]``). The two move
the bytes of the all-reduce they replace. Why not shard the gradient layout: a parameter cut by a
boundary would then need states outside the update's slice of the data buffer, or a copy of the
shard's weights in gradient order (a permutation per step).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..device.copy import as_host
from ..device.graphs import capturing
from ..store import ALIGN
from . import debug, narrow
from .base import DONE, Communicator, Work, shard_bounds
from .nccl import NcclCommunicator

__all__ = ["Bucket", "GradientSync", "ShardLayout", "plan_buckets", "reductions_in_flight", "wait_for_reductions",
           "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 25 * 2**20  # as PyTorch DDP: large enough to amortise latency, small enough to overlap

# The gradient syncs whose sums, launched during backward, no stream has waited for yet. Held strongly until
# waited for: their Works keep the buffers the communication streams still use.
_IN_FLIGHT: set[GradientSync] = set()
# The held syncs (their step's CUDA graph sums the gradients) whose gradients backward wrote since the last step.
_HELD_WRITTEN: set[GradientSync] = set()
_UNSUMMED_READ = ("mxlite: gradients read between backward and trainer.step() are this process's own, not yet "
                  "summed over the processes: with one GPU per process and hybridized blocks, the step's CUDA "
                  "graph sums them. To read or clip the sums, call trainer.allreduce_grads() first, then "
                  "trainer.update(batch_size) instead of trainer.step(batch_size)")
_WARNED: set[str] = set()


def reductions_in_flight() -> bool:
    """Whether gradient sums launched during backward (overlap, on GPUs) may still be running unwaited."""
    return bool(_IN_FLIGHT)


def wait_for_reductions(reading: bool = True) -> None:
    """Make every device's current stream wait for the gradient sums launched during backward and still in flight.

    Called by every public read of gradient buffers between backward and the step, so the reader sees the sums
    (see the module docstring). The wait is on the devices (the host does not block); the sums stay counted as
    done, so ``allreduce_grads`` neither reduces nor waits for them again. Returns at once when nothing is in
    flight, and inside a CUDA-graph capture (a capture may not wait on work outside it; it reads no gradient
    before its launch).

    Args:
        reading: the caller hands out gradient values to read (``Parameter.grad``, a global-norm clip): where
            the step's CUDA graph will sum them (one GPU per process), they are this process's own, and a
            UserWarning says so once per process. False for callers that write them or hand out weights.
    """
    if _IN_FLIGHT and not capturing():
        for sync in list(_IN_FLIGHT):
            sync.wait_reduced()
    if reading and _HELD_WRITTEN:
        _warn_unsummed_read()


def _warn_unsummed_read() -> None:
    if _UNSUMMED_READ not in _WARNED:
        _WARNED.add(_UNSUMMED_READ)
        warnings.warn(_UNSUMMED_READ, UserWarning, stacklevel=4)


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
    pieces: list[tuple[int, int, int]] | None = None  # sharded: (start, end, owner shard), bucket-relative

    @property
    def nbytes(self) -> int:
        return (self.end[0] - self.start[0]) * np.dtype(self.arenas[0].dtype).itemsize

    def stale(self) -> bool:
        """Whether an arena has been reallocated since the plan (the offsets no longer hold)."""
        return any(a.grad_buf is not buf for a, buf in zip(self.arenas, self.grad_bufs))

    def buffers(self) -> list[Any]:
        """The bucket's slice of every mirror's gradient buffer (views)."""
        return [a.grad_buf[s:e] for a, s, e in zip(self.arenas, self.start, self.end)]


@dataclass
class ShardLayout:
    """How the mirrors of one arena are sharded (sharded optimizer states; see the module docstring).

    Attributes:
        arenas: the arena of every local mirror, in device order.
        lo, hi: the data range of the synced parameters (aligned slot starts; ``hi`` includes the last
            slot's padding).
        bounds: every shard's ``(start, end)`` in the data buffer, in shard order (process rank, then
            local device): ``shard_bounds(hi - lo, contributions)`` shifted by ``lo``.
        first: the shard number of this process's first device.
    """

    arenas: list[Any]
    lo: int
    hi: int
    bounds: list[tuple[int, int]]
    first: int

    def shard(self, mirror: int) -> tuple[int, int]:
        """The data range the ``mirror``-th local device owns."""
        return self.bounds[self.first + mirror]

    def views(self) -> list[Any]:
        """``data[lo:hi]`` of every mirror (the all-gather's buffers)."""
        return [a.data_buf[self.lo:self.hi] for a in self.arenas]


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
        codec: a compression codec, or None.
        shard: shard the arenas whose dtype this callable accepts (or every arena: True): each bucket is
            reduced onto the owners of its pieces only (see the module docstring).

    Raises:
        ValueError: sharding arenas whose device mirrors hold the parameters at different places.
    """

    def __init__(self, comm: Communicator, params: Sequence[Any], threshold_bytes: int = DEFAULT_BUCKET_BYTES,
                 overlap: bool = True, codec: Any = None, shard: Any = False) -> None:
        self.comm = comm
        self._shard = shard if callable(shard) else (lambda dtype, on=bool(shard): on)
        self.layouts: list[ShardLayout] = []  # the sharded arenas' layouts (plan order)
        self._layout_of: dict[int, ShardLayout] = {}  # id(arena) of any mirror -> its layout
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
        on_nccl = codec is not None and isinstance(comm, NcclCommunicator)
        self._narrow = on_nccl and codec.narrow_wire  # fp16/bf16: the update reads the half-precision sum
        self._on_device = on_nccl and not codec.narrow_wire
        self._deferred: list[tuple[list[Any], list[tuple[Any, ...]]]] = []  # threshold: encoded, not exchanged
        self._held = False
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
        self._plan_shards()
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

    @property
    def held(self) -> bool:
        """Set by the Trainer while its step's CUDA graph issues the collectives: backward's ready-hooks then
        leave every bucket to :meth:`allreduce_grads` (a graph replays a fixed set of collectives), and the
        gradients stay each process's own until the step. The Trainer sets it at every step, which also
        starts the next backward afresh."""
        return self._held

    @held.setter
    def held(self, value: bool) -> None:
        self._held = bool(value)
        _HELD_WRITTEN.discard(self)

    def _stale_plan(self) -> bool:
        return any(b.stale() for b in self.buckets)

    def _on_ready(self, leaf: Any) -> None:
        if self._held:
            _HELD_WRITTEN.add(self)  # a read of gradients before the step gets this process's own: say so
            return
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
            work = self._reduce(bucket)
            self._works.append(work)
            if work is not DONE and work is not None:
                _IN_FLIGHT.add(self)  # a reader of gradients must wait for it (wait_for_reductions)
            bucket.reduced = True
            bucket.pending = set(bucket.leaves)

    def wait_reduced(self) -> None:
        """Make every device's current stream wait for the sums launched during backward so far (on the device).

        The buckets stay reduced (``allreduce_grads`` does not reduce them again) and their Works are forgotten,
        so nothing waits for them twice. Returns at once when none is in flight.
        """
        _IN_FLIGHT.discard(self)
        works, self._works = self._works, []
        for work in works:
            if work is not DONE and work is not None:
                work.wait()

    def capturable(self) -> bool:
        """Whether the collectives can be recorded into a CUDA graph of the step: plain all-reduces (no codec, no
        sharding) over NCCL with one GPU per process, not checked on the host (``MXLITE_DEBUG_COLLECTIVES``)."""
        return (self.codec is None and not self.layouts and self.comm.captures_collectives
                and not (self.comm.size > 1 and debug.enabled()))

    def left_for_step(self) -> bool:
        """Whether every bucket waits for :meth:`allreduce_grads` (none was reduced during backward) on the
        current plan: the step may then issue all of them, inside its graph."""
        return (self.held or not self.overlap) and not self._taken and not self._stale_plan() and not any(
            b.reduced for b in self.buckets)

    def graph_key(self) -> tuple:
        """What a step graph that issues these collectives depends on: the plan, its buffers and the communicator."""
        return (id(self), id(self.comm), tuple((id(b.grad_bufs[0]), b.start[0], b.end[0]) for b in self.buckets))

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
        _IN_FLIGHT.discard(self)
        _HELD_WRITTEN.discard(self)
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

    # -- sharded optimizer states -------------------------------------------------------------
    def _plan_shards(self) -> None:
        """The :class:`ShardLayout` of every sharded arena, and each of its buckets' owned pieces."""
        self.layouts, self._layout_of = [], {}
        families: dict[int, list[Any]] = {}
        for p in self.params:
            slots = p.arena_slots()
            if p.grad_req == "null" or slots[0][1].grad_offset is None or not self._shard(slots[0][0].dtype):
                continue
            families.setdefault(id(slots[0][0]), []).append(p)
        for members in families.values():
            arenas = [a for a, _ in members[0].arena_slots()]
            for p in members:
                places = {(s.offset, a.grad_offset_in_region(s)) for a, s in p.arena_slots()}
                if len(places) > 1:
                    raise ValueError(f"sharded optimizer states need every device's arena to hold parameter "
                                     f"{p.label!r} at the same place; its mirrors on {p.list_device()} lie at "
                                     f"{sorted(places)} (a parameter initialised on only some of the devices "
                                     "shifts the others): initialise every parameter on the same devices")
            slots = [p.arena_slots()[0][1] for p in members]
            lo, hi = min(s.offset for s in slots), max(s.offset + s.span for s in slots)
            bounds = [(lo + a, lo + b) for a, b in shard_bounds(hi - lo, self.comm.contributions)]
            layout = ShardLayout(arenas, lo, hi, bounds, self.comm.rank * len(self.comm.devices))
            self.layouts.append(layout)
            self._layout_of.update((id(a), layout) for a in arenas)
        for bucket in self.buckets:
            layout = self._layout_of.get(id(bucket.arenas[0]))
            bucket.pieces = None if layout is None else _owned_pieces(bucket, layout)

    def layout(self, arena: Any) -> ShardLayout | None:
        """The :class:`ShardLayout` of the sharded arena ``arena`` (any mirror), or None (not sharded here)."""
        if self._stale_plan():
            self.plan()
        return self._layout_of.get(id(arena))

    def gather_weights(self) -> None:
        """After a sharded update: every mirror gets every shard's updated weights (one all-gather per arena).

        ``allgather_shards`` over ``data[lo:hi]`` of every mirror, whose shards are the
        :class:`ShardLayout`'s, when they are all equally long (on NCCL one in-place ``allGather``);
        otherwise ``gather_from_owners`` with the shards as pieces (on NCCL one in-place ``broadcast``
        per shard: the same ring bytes, without the padded copy of the weights that an uneven
        ``allGather`` stages through). Waited for (on a GPU the caller's stream waits, the host does not).
        """
        if self._stale_plan():
            self.plan()
        works = []
        for layout in self.layouts:
            if (layout.hi - layout.lo) % (self.comm.contributions * ALIGN) == 0:
                works.append(self.comm.allgather_shards(layout.views()))
            else:
                works.append(self.comm.gather_from_owners(layout.views(), [
                    (start - layout.lo, end - layout.lo, owner) for owner, (start, end) in enumerate(layout.bounds)]))
        for work in works:
            work.wait()

    def gather_grads(self) -> None:
        """After a sharded reduction: every mirror gets the summed gradients of every piece (for readers of whole
        gradients: ``Trainer.allreduce_grads()`` called by the user, finiteness errors naming a parameter)."""
        self.materialize()
        works = [self.comm.gather_from_owners(b.buffers(), b.pieces) for b in self.buckets if b.pieces is not None]
        for work in works:
            work.wait()

    def sharded_grads_finite(self) -> bool:
        """Whether every summed gradient piece of every owner, on every device and process, is free of inf and NaN.

        Each device checks its own pieces (after :meth:`allreduce_grads`, and :meth:`materialize` on a
        narrow wire); the flags are added by one small all-reduce and read once by the host, so every
        rank decides alike.
        """
        flags = []
        for j, device in enumerate(self.comm.devices):
            me = self.comm.rank * len(self.comm.devices) + j
            with device.use():
                xp = device.xp
                checks = [xp.isfinite(b.arenas[j].grad_buf[b.start[j] + s:b.start[j] + e]).all()
                          for b in self.buckets if b.pieces is not None for s, e, owner in b.pieces if owner == me]
                bad = xp.zeros(1, np.float32)
                if checks:
                    bad += (~xp.stack(checks)).sum()
                flags.append(bad)
        self.comm.allreduce(flags).wait()
        return float(as_host(flags[0])[0]) == 0.0

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
            if bucket.pieces is not None:  # sharded: each owner gets the sum of its pieces
                return self.comm.reduce_to_owners(buffers, bucket.pieces)
            return self.comm.allreduce(buffers)
        if self._narrow and bucket.pieces is not None:
            # cut bucket -> cast with the 1/N pre-scale into the wire -> NCCL half reduce of each piece onto its owner
            wires = [narrow.wire_buffer(a, self.codec.wire_dtype) for a in bucket.arenas]
            work = narrow.reduce_to_owners_to_wire(buffers, [w.wire[s:e] for w, s, e in zip(wires, bucket.start,
                                                                                           bucket.end)],
                                                   self.codec.wire_dtype, self.comm, bucket.pieces,
                                                   self.codec.params.get("clip"))
            members = frozenset(id(p) for p in bucket.params)
            for w, s, e in zip(wires, bucket.start, bucket.end):
                w.mark(s, e, members, self.comm.contributions)
            return work
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


def _owned_pieces(bucket: Bucket, layout: ShardLayout) -> list[tuple[int, int, int]]:
    """The bucket's ``(start, end, owner)`` pieces, bucket-relative, in gradient order; adjacent pieces of one owner
    are joined. A parameter's slot (padding included) maps to the gradient slot element by element."""
    base = bucket.start[0]
    pieces: list[tuple[int, int, int]] = []
    for p in bucket.params:
        slot = p.arena_slots()[0][1]
        for owner, (first, last) in enumerate(layout.bounds):
            a, b = max(slot.offset, first), min(slot.offset + slot.span, last)
            if a < b:
                pieces.append((slot.grad_offset + a - slot.offset - base, slot.grad_offset + b - slot.offset - base,
                               owner))
    pieces.sort()
    joined: list[tuple[int, int, int]] = []
    for start, end, owner in pieces:
        if joined and joined[-1][2] == owner and joined[-1][1] == start:
            joined[-1] = (joined[-1][0], end, owner)
        else:
            joined.append((start, end, owner))
    return joined
