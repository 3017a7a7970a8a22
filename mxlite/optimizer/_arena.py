"""Applying an optimizer to a whole arena at once: one fused update per (arena, device mirror).

An :class:`ArenaUpdater` owns the optimizer state of every parameter of one arena as float32
buffers with the arena's data layout (named by the rule, see each rule's registration with ``_fused.py``; plus a
float32 ``master`` copy for half-precision weights with ``multi_precision``). Each step it
increments the per-parameter update counts and reads the learning rates and weight decays
from the optimizer, so ``lr_mult``/``wd_mult``, schedules and per-parameter step counts behave
exactly as in the per-parameter path, and hands everything to one fused update: the kernels
(one launch, two for LAMB and LARS) on a GPU, and on a CPU device too when they can be compiled
for the host (``MXLITE_CPU_KERNELS``, :func:`mxlite._kernels.cpu_kernels_enabled`); else the NumPy twin.

Arenas grow while a model is being built (deferred initialisation); when the data buffer is
replaced the state buffers are rebuilt in the new layout, each parameter's state copied over.

Half-precision weights without ``multi_precision`` still get float32 states and float32 math
(the per-parameter path keeps their states in float16).

Narrow wires (fp16/bf16 compression on NCCL, :mod:`mxlite.comm.narrow`): when the gradient sum of
every parameter of the update is held in the arena's half-precision wire buffer, the kernels read
that buffer instead of the gradient buffer (the gradient dtype is a template parameter of the
kernels) and multiply by ``rescale_grad * N`` to undo the 1/N pre-scale: no cast back, no
float32 copy of the gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..store import Arena, Slot
from . import _fused
from ._fused import fused_rule, to_structure
from .optimizer import Optimizer

__all__ = ["ArenaUpdater", "fused_rule"]


class ArenaUpdater:
    """Optimizer state and fused steps for the parameters of one arena on one device mirror.

    Raises:
        ValueError: the optimizer has no fused update for the arena's dtype.
    """

    def __init__(self, optimizer: Optimizer, arena: Arena, mirror: int) -> None:
        self.optimizer = optimizer
        self.arena = arena
        self.mirror = mirror
        rule = fused_rule(optimizer, arena.dtype)
        if rule is None:
            raise ValueError(f"no fused update for {type(optimizer).__name__} on {arena.dtype} weights")
        self.rule = rule
        self.state_names = rule.states(optimizer)
        self._buffer: Any = None  # the arena data buffer the states were laid out for
        # Keyed by id(slot.key), the Parameter: a re-slotted parameter (grad_req toggled) keeps its
        # state, and a freed Slot's recycled id() can never hand one parameter's state to another.
        self._offsets: dict[int, int] = {}  # id(parameter) -> offset when the states were laid out
        self._states: dict[str, Any] = {}
        self._plans: dict[tuple[Any, ...], _fused.ArenaPlan] = {}
        self._holding: set[int] = set()  # id(parameter) of parameters with state (stepped or loaded)

    @property
    def _has_master(self) -> bool:
        return bool(self.optimizer.multi_precision) and self.arena.dtype == np.float16

    def _layout_states(self) -> None:
        """(Re)build the state buffers for the arena's current layout, keeping existing state."""
        arena, dev = self.arena, self.arena.device
        old, old_offsets = self._states, self._offsets
        names = list(self.state_names) + (["master"] if self._has_master else [])
        with dev.use():
            new = {name: dev.xp.zeros(arena.data_buf.shape, np.float32) for name in names}
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

    def _ensure_layout(self, slots: Sequence[Slot]) -> None:
        if self._buffer is not self.arena.data_buf or any(self._offsets.get(id(s.key)) != s.offset for s in slots):
            self._layout_states()

    def step(self, entries: Sequence[tuple[int, Slot]], narrow: Any = None) -> None:
        """Update the parameters ``entries`` = [(optimizer index, slot)] with one fused update.

        ``narrow``: on a GPU, a half-precision wire holding the gradient sums of every parameter in
        ``entries`` (an object with ``wire``, ``dtype`` and ``scale``, the comm layer's
        :class:`mxlite.comm.narrow.NarrowGradient`), which the kernels then read instead of the
        gradient buffer; None reads the gradient buffer. The Trainer, which owns both the update and
        the gradient sync, hands it over.
        """
        opt, arena, rule = self.optimizer, self.arena, self.rule
        self._ensure_layout([s for _, s in entries])
        key = tuple((id(s.key), s.offset, s.grad_offset) for _, s in entries)
        plan = self._plans.get(key)
        compiled = arena.device.is_gpu or _fused.compiled_on_cpu()
        if plan is None:
            plan = self._plans[key] = _fused.ArenaPlan(
                [_fused.Segment(s.offset, s.grad_offset, s.size) for _, s in entries])
        self._holding.update(id(s.key) for _, s in entries)
        opt.set_current_mirror(self.mirror)
        hp = np.zeros((len(entries), _fused.HP), np.float32)
        counts = []
        for k, (index, _) in enumerate(entries):
            count = opt._update_count(index)  # counted before the rate is read (MXNet's order)
            counts.append(count)
            row = rule.row(opt, index, count)
            hp[k, :len(row)] = row
        weight, grad, st, master = arena.data_buf, arena.grad_buf, self._states, self._states.get("master")
        if arena.device.is_gpu:
            if narrow is not None:  # the bucket sums in half precision: read them as they are
                launcher = _fused.Launcher(arena.device, plan, arena.dtype, hp, narrow.dtype, narrow.scale)
                grad = narrow.wire
            else:
                launcher = _fused.Launcher(arena.device, plan, arena.dtype, hp)
            rule.launch(launcher, opt, weight, grad, st, master)
        elif compiled:  # a CPU device: the same kernels, built for the host
            rule.launch(_fused.Launcher(arena.device, plan, arena.dtype, hp), opt, weight, grad, st, master)
        elif rule.twin is not None:
            rule.twin(opt, plan, weight, grad, st, master, hp)
        else:
            _fused.step_segments(opt, plan, [i for i, _ in entries], counts, weight, grad, self.state_names, st,
                                 master)

    # -- per-parameter views of the state, for saving and loading ------------------------------
    def get_state(self, slot: Slot) -> Any:
        """The state of the parameter in ``slot`` as ``create_state`` shapes it (host copies), or
        None when it has neither been updated nor loaded."""
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

    def set_state(self, slot: Slot, arrays: dict[str, Any], master: Any) -> None:
        """Copy one parameter's state (named arrays of its shape) into the arena state buffers.

        ``master`` None keeps the master weights as they are (a copy of the weights).
        """
        self._ensure_layout([slot])
        self._holding.add(id(slot.key))
        window = slice(slot.offset, slot.offset + slot.size)
        dev = self.arena.device
        with dev.use():
            for name in self.state_names:
                self._states[name][window] = dev.xp.asarray(np.asarray(arrays[name]).reshape(-1), dtype=np.float32)
            if master is not None and self._has_master:
                self._states["master"][window] = dev.xp.asarray(np.asarray(master).reshape(-1), dtype=np.float32)
