"""Applying an optimizer to a whole arena at once: one fused update per (arena, device mirror).

An :class:`ArenaUpdater` owns the optimizer state of every parameter of one arena as float32
buffers with the arena's data layout (named by the rule, see each rule's registration with ``_fused.py``; plus a
float32 ``master`` copy for half-precision weights with ``multi_precision``). Each step it
increments the per-parameter update counts and reads the learning rates and weight decays
from the optimizer, so ``lr_mult``/``wd_mult``, schedules and per-parameter step counts behave
exactly as in the per-parameter path, and hands everything to one fused update: the kernels
(one launch, two for LAMB and LARS) on a GPU, and on a CPU device too when they can be compiled
for the host (``MXLITE_CPU_KERNELS``, :func:`mxlite._kernels.cpu_kernels_enabled`); else the NumPy twin.

An update has a host half and a device half (:meth:`ArenaUpdater.prepare`, :meth:`ArenaUpdater.launch`): the
host advances the counts and writes the per-parameter table into a device buffer kept per plan (one copy),
and the kernels read it there, so the Trainer can capture the launches in a CUDA graph and replay them
after writing the next step's table (docs/graphs.md, "The Trainer's step as a graph").

Arenas grow while a model is being built (deferred initialisation); when the data buffer is
replaced the state buffers are rebuilt in the new layout, each parameter's state copied over.

Half-precision weights without ``multi_precision`` still get float32 states and float32 math
(the per-parameter path keeps their states in float16).

Sharded states (ZeRO-1, ``Trainer(shard_optimizer_states=True)``): an updater given ``shard = (lo, hi)``,
a range of the arena's data buffer, keeps states (and master weights) for that range only, laid out
like ``data[lo:hi]``, and updates only the parts of its parameters inside it: one plan whose segments
are those parts (a parameter straddling two shards is updated in pieces by their owners). The kernels
then see ``data[lo:hi]`` as the weights, the states at the same indices, and the gradient buffer at
each piece's own gradient offset. The Trainer's gradient sync hands each shard owner the summed
gradient of its range and gathers the updated weights afterwards; a rule with per-parameter norms
(LAMB, LARS) yields its partial sums between its launches (:meth:`ArenaUpdater.steps`) for the
Trainer to add over the shards. A sharded updater's range and layout never change: when they must,
the Trainer gathers the states and builds new updaters.

Narrow wires (fp16/bf16 compression on NCCL, :mod:`mxlite.comm.narrow`): when the gradient sum of
every parameter of the update is held in the arena's half-precision wire buffer, the kernels read
that buffer instead of the gradient buffer (the gradient dtype is a template parameter of the
kernels) and multiply by ``rescale_grad * N`` to undo the 1/N pre-scale: no cast back, no
float32 copy of the gradient.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device.copy import as_host
from ..store import Arena, Slot
from . import _fused
from ._fused import fused_rule, to_structure
from .optimizer import Optimizer

__all__ = ["ArenaUpdater", "Prepared", "fused_rule"]


@dataclass(frozen=True)
class Prepared:
    """One update made ready by :meth:`ArenaUpdater.prepare`: its plan, the optimizer indices and update counts
    of its segments, the per-segment table on the host (``hp``) and, where kernels run, in its device buffer
    (``table``; None for the NumPy twins)."""

    plan: _fused.ArenaPlan
    indices: list[Any]
    counts: list[int]
    hp: np.ndarray
    table: Any


class ArenaUpdater:
    """Optimizer state and fused steps for the parameters of one arena on one device mirror.

    Args:
        optimizer: the optimizer (one with a fused rule for the arena's dtype).
        arena: the arena (one device mirror).
        mirror: the mirror's number (its per-mirror update counts).
        shard: ``(lo, hi)``: keep states for ``data[lo:hi]`` only and update only what lies there
            (sharded optimizer states; see the module docstring); None: the whole arena.

    Raises:
        ValueError: the optimizer has no fused update for the arena's dtype.
    """

    def __init__(self, optimizer: Optimizer, arena: Arena, mirror: int, shard: tuple[int, int] | None = None) -> None:
        self.optimizer = optimizer
        self.arena = arena
        self.mirror = mirror
        rule = fused_rule(optimizer, arena.dtype)
        if rule is None:
            raise ValueError(f"no fused update for {type(optimizer).__name__} on {arena.dtype} weights")
        self.rule = rule
        self.state_names = rule.states(optimizer)
        self.shard = None if shard is None else (int(shard[0]), int(shard[1]))
        self._buffer: Any = None  # the arena data buffer the states were laid out for
        # Keyed by id(slot.key), the Parameter: a re-slotted parameter (grad_req toggled) keeps its
        # state, and a freed Slot's recycled id() can never hand one parameter's state to another.
        self._offsets: dict[int, int] = {}  # id(parameter) -> offset when the states were laid out
        self._states: dict[str, Any] = {}
        self._plans: dict[tuple[Any, ...], _fused.ArenaPlan] = {}
        self._holding: set[int] = set()  # id(parameter) of parameters with state (stepped or loaded)
        self._tables: dict[int, tuple[_fused.ArenaPlan, Any]] = {}  # id(plan) -> (plan, its device table buffer)

    @property
    def _has_master(self) -> bool:
        return bool(self.optimizer.multi_precision) and self.arena.dtype == np.float16

    @property
    def holding(self) -> frozenset[int]:
        """``id()`` of the parameters with state here (updated or loaded)."""
        return frozenset(self._holding)

    def fits(self, shard: tuple[int, int] | None, slots: Sequence[Slot]) -> bool:
        """Whether this updater still serves ``shard`` with ``slots`` where its states were laid out for them.

        Always true for an unsharded updater (it re-lays its states itself); a sharded one whose range
        or parameters' offsets changed must be replaced (the Trainer gathers its states first).
        """
        if self.shard is None:
            return shard is None
        return self.shard == shard and (not self._states or all(
            self._offsets.get(id(s.key), s.offset) == s.offset for s in slots))

    def _layout_states(self) -> None:
        """(Re)build the state buffers for the arena's current layout, keeping existing state."""
        arena, dev = self.arena, self.arena.device
        old, old_offsets = self._states, self._offsets
        names = list(self.state_names) + (["master"] if self._has_master else [])
        with dev.use():
            if self.shard is not None:  # laid out once, like data[lo:hi]; the master weights start as the weights
                lo, hi = self.shard
                new = {name: dev.xp.zeros(hi - lo, np.float32) for name in names}
                if "master" in new:
                    new["master"][...] = arena.data_buf[lo:hi]
            else:
                # The live region only (not the arena's spare capacity): a slot added later is relaid out then.
                new = {name: dev.xp.zeros(arena.used, np.float32) for name in names}
                for slot in arena.slots:
                    start, end = slot.offset, slot.offset + slot.size
                    before = old_offsets.get(id(slot.key))
                    for name, buf in new.items():
                        if before is not None and name in old:
                            buf[start:end] = old[name][before: before + slot.size]
                        elif name == "master":
                            buf[start:end] = arena.data_buf[start:end]
        self._states = new
        self._offsets = {id(s.key): s.offset for s in arena.slots}
        self._buffer = arena.data_buf
        self._plans.clear()
        self._tables.clear()

    def _ensure_layout(self, slots: Sequence[Slot]) -> None:
        if self.shard is not None:
            if not self._states:
                self._layout_states()
            elif not self.fits(self.shard, slots):
                raise RuntimeError("the arena's layout changed under sharded optimizer states; the Trainer gathers "
                                   "them and builds new updaters first")
            return
        if self._buffer is not self.arena.data_buf or any(self._offsets.get(id(s.key)) != s.offset for s in slots):
            self._layout_states()

    def _plan(self, entries: Sequence[tuple[int, Slot]]) -> _fused.ArenaPlan:
        """The plan of ``entries``: whole parameters, or (sharded) their parts inside the shard."""
        key = tuple((id(s.key), s.offset, s.grad_offset) for _, s in entries)
        plan = self._plans.get(key)
        if plan is None:
            chunk = _fused.chunk_for(self.arena.device)
            if self.shard is None:
                plan = _fused.ArenaPlan([_fused.Segment(s.offset, s.grad_offset, s.size) for _, s in entries],
                                        chunk=chunk)
            else:
                lo, hi = self.shard
                segments, owners = [], []
                for k, (_, s) in enumerate(entries):
                    first, last = max(s.offset, lo), min(s.offset + s.size, hi)
                    if first < last:  # offsets relative to lo (the kernels see data[lo:hi]); the gradient's own
                        segments.append(_fused.Segment(first - lo, s.grad_offset + first - s.offset, last - first))
                        owners.append(k)
                plan = _fused.ArenaPlan(segments, owners, len(entries), chunk)
            self._plans[key] = plan
        return plan

    def step(self, entries: Sequence[tuple[int, Slot]], narrow: Any = None) -> None:
        """Update the parameters ``entries`` = [(optimizer index, slot)] with one fused update.

        ``narrow``: on a GPU, a half-precision wire holding the gradient sums of every parameter in
        ``entries`` (an object with ``wire``, ``dtype`` and ``scale``, the comm layer's
        :class:`mxlite.comm.narrow.NarrowGradient`), which the kernels then read instead of the
        gradient buffer; None reads the gradient buffer. The Trainer, which owns both the update and
        the gradient sync, hands it over.

        Raises:
            RuntimeError: a sharded update of a rule with per-parameter norms (its partial sums must be
                added over the shards: drive :meth:`steps` instead).
        """
        for _ in self.steps(entries, narrow):
            raise RuntimeError(f"a sharded {type(self.optimizer).__name__} update needs the sums of every shard: "
                               "drive ArenaUpdater.steps for every shard together")

    def steps(self, entries: Sequence[tuple[int, Slot]], narrow: Any = None) -> Iterator[Any]:
        """:meth:`step` as a generator: it yields, between the launches of a sharded rule with per-parameter
        norms, the ``(len(entries), 2)`` float64 table of this shard's partial sums (see
        :meth:`mxlite.optimizer.Launcher.complete_sums`), to be summed over every shard in place before
        it is resumed. Unsharded, or for an elementwise rule, it yields nothing.

        Raises:
            ValueError: a sharded update of a rule with per-parameter norms on the NumPy twins
                (``MXLITE_CPU_KERNELS=numpy``, or no host build), which take norms over whole parameters.
        """
        prepared = self.prepare(entries)
        yield from self.launch(prepared, narrow)

    def prepare(self, entries: Sequence[tuple[int, Slot]]) -> Prepared:
        """The host half of one update of ``entries``: advance the update counts, compute the per-parameter
        table (learning rates, weight decays, bias corrections) and, where kernels run, write it into this
        updater's persistent table buffer for the plan (one host-to-device copy on a GPU).

        The kernels read the table from that buffer, so a launch captured in a CUDA graph reads the values
        written before each replay (:meth:`launch` issues no copy from the host).

        Raises:
            ValueError: as :meth:`steps`.
        """
        opt, arena, rule = self.optimizer, self.arena, self.rule
        self._ensure_layout([s for _, s in entries])
        plan = self._plan(entries)
        compiled = arena.device.is_gpu or _fused.compiled_on_cpu()
        if self.shard is not None and not compiled and not rule.elementwise:
            raise ValueError(f"sharded optimizer states with {type(opt).__name__} need the fused kernels (its "
                             "NumPy twin takes norms over whole parameters); on CPU devices they are built with g++ "
                             "unless MXLITE_CPU_KERNELS=numpy: unset it, or train without shard_optimizer_states")
        self._holding.update(id(s.key) for _, s in entries)
        opt.set_current_mirror(self.mirror)
        indices = [i for i, _ in entries]
        hp, counts = _fused.table(rule, opt, indices)  # counted before the rate is read (MXNet's order)
        if plan.owners is not None:  # sharded: the kernels see data[lo:hi]; the table has a row per segment
            hp = hp[np.asarray(plan.owners, dtype=np.int64)] if plan.owners else hp[:0]
            indices, counts = [indices[k] for k in plan.owners], [counts[k] for k in plan.owners]
        table = self._write_table(plan, hp) if compiled else None
        return Prepared(plan, indices, counts, hp, table)

    def _write_table(self, plan: _fused.ArenaPlan, hp: np.ndarray) -> Any:
        """``hp`` copied into the plan's persistent device table (made once per plan; one copy per step)."""
        dev = self.arena.device
        buf = self._tables.get(id(plan))
        if buf is None or buf[0] is not plan:
            with dev.use():
                buf = self._tables[id(plan)] = (plan, dev.xp.zeros(hp.shape, np.float32))
        with dev.use():
            if dev.is_gpu:
                buf[1].set(hp)
            else:
                buf[1][...] = hp
        return buf[1]

    def launch(self, prepared: Prepared, narrow: Any = None) -> Iterator[Any]:
        """The device half of one update prepared by :meth:`prepare`: the fused kernels (reading the table from
        its device buffer, so the launches can be captured in a CUDA graph), or the NumPy twin; a generator,
        as :meth:`steps`."""
        opt, arena, rule = self.optimizer, self.arena, self.rule
        plan = prepared.plan
        weight, grad, st, master = arena.data_buf, arena.grad_buf, self._states, self._states.get("master")
        if plan.owners is not None:
            weight = weight[self.shard[0]:self.shard[1]]
        if prepared.table is not None:  # a GPU, or a CPU device running the same kernels built for the host
            if narrow is not None and arena.device.is_gpu:  # the bucket sums in half precision: read them as they are
                launcher = _fused.Launcher(arena.device, plan, arena.dtype, prepared.table, narrow.dtype,
                                           narrow.scale)
                grad = narrow.wire
            else:
                launcher = _fused.Launcher(arena.device, plan, arena.dtype, prepared.table)
            launched = rule.launch(launcher, opt, weight, grad, st, master)
            if launched is not None:  # a rule with per-parameter norms: its sums may need the other shards
                yield from launched
        elif rule.twin is not None:
            rule.twin(opt, plan, weight, grad, st, master, prepared.hp)
        else:
            _fused.step_segments(opt, plan, prepared.indices, prepared.counts, weight, grad, self.state_names, st,
                                 master)

    def buffers(self) -> tuple[Any, ...]:
        """The device buffers a launch reads and writes besides the arena's (states and table buffers), for a
        caller that must know they stay the same (a captured step)."""
        return (*self._states.values(), *(t for _, t in self._tables.values()))

    # -- per-parameter views of the state, for saving and loading ------------------------------
    def get_state(self, slot: Slot) -> Any:
        """The state of the parameter in ``slot`` as ``create_state`` shapes it (host copies), or
        None when it has neither been updated nor loaded.

        Raises:
            RuntimeError: a sharded updater (it holds a part of the state: gather :meth:`shard_states`).
        """
        if self.shard is not None:
            raise RuntimeError("a sharded updater holds part of each state; gather shard_states() of every shard")
        if id(slot.key) not in self._holding:
            return None
        self._ensure_layout([slot])
        window = slice(slot.offset, slot.offset + slot.size)

        def host(buf: Any) -> np.ndarray:
            part = buf[window]
            part = part.get() if hasattr(part, "get") and not isinstance(part, np.ndarray) else np.array(part)
            return part.reshape(slot.shape)

        arrays = {name: host(self._states[name]) for name in self.state_names}
        return to_structure(self.state_names, arrays, host(self._states["master"]) if self._has_master else None)

    @property
    def state_nbytes(self) -> int:
        """Bytes of this updater's state and master-weight buffers (0 before its first step or load)."""
        return sum(int(buf.nbytes) for buf in self._states.values())

    def offset(self, key: Any) -> int | None:
        """Where the states of the parameter ``key`` (a slot's key) begin: its data offset when the states were laid
        out (a sharded updater's states start at ``shard[0]`` of that layout); None if it was not in the arena."""
        return self._offsets.get(id(key))

    def shard_states(self) -> dict[str, np.ndarray]:
        """A sharded updater's state buffers, host copies laid out like ``data[lo:hi]``: ``{name: array}``,
        with ``'master'`` for master weights; zeros where nothing is held yet."""
        assert self.shard is not None
        if not self._states:
            self._layout_states()
        return {name: np.array(as_host(buf)) for name, buf in self._states.items()}

    def set_state(self, slot: Slot, arrays: dict[str, Any], master: Any) -> None:
        """Copy one parameter's state (named arrays of its shape) into the arena state buffers.

        ``master`` None keeps the master weights as they are (a copy of the weights). A sharded
        updater takes the part of the state inside its range.
        """
        self._ensure_layout([slot])
        self._holding.add(id(slot.key))
        start, end, skip = slot.offset, slot.offset + slot.size, 0
        if self.shard is not None:
            lo, hi = self.shard
            first, last = max(start, lo), min(end, hi)
            if first >= last:
                return
            start, end, skip = first - lo, last - lo, first - slot.offset
        dev = self.arena.device
        with dev.use():
            for name, value in [(n, arrays[n]) for n in self.state_names] + [("master", master)]:
                if value is None or name not in self._states:
                    continue
                flat = np.asarray(value).reshape(-1)[skip:skip + end - start]
                self._states[name][start:end] = dev.xp.asarray(flat, dtype=np.float32)
