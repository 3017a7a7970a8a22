"""Applying an optimizer to a whole arena at once: one fused update per (arena, device mirror).

An :class:`ArenaUpdater` owns the optimizer state of every parameter of one arena as buffers
with the arena's data layout (``mom``, or ``mean`` and ``var``; a float32 ``master`` copy for
half-precision weights with ``multi_precision``). Each step it reads the per-parameter update
counts, learning rates and weight decays from the optimizer, so ``lr_mult``/``wd_mult``,
schedules and per-parameter step counts behave exactly as in the per-parameter path, and
hands everything to one fused update (:mod:`mxlite.optimizer._fused`).

Arenas grow while a model is being built (deferred initialisation); when the data buffer is
replaced the state buffers are rebuilt in the new layout, each parameter's state copied over.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..store import Arena, Slot
from . import _fused
from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["ArenaUpdater", "fused_rule"]

_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def fused_rule(optimizer: Optimizer, dtype: Any) -> str | None:
    """'sgd' or 'adam' when ``optimizer`` has a fused kernel for weights of ``dtype``, else None.

    Only the exact MXNet forms are fused (subclasses and SINGA's nesterov/dampening variants
    take the per-parameter path), and only float32/float16 storage: float64 runs keep the
    per-parameter path's float64 arithmetic.
    """
    if np.dtype(dtype) not in _FUSED_DTYPES:
        return None
    if type(optimizer) is SGD and not optimizer.nesterov and not optimizer.dampening:
        return "sgd"
    if type(optimizer) is Adam:
        return "adam"
    return None


class ArenaUpdater:
    """Optimizer state and fused steps for the parameters of one arena on one device mirror."""

    def __init__(self, optimizer: Optimizer, arena: Arena, mirror: int) -> None:
        self.optimizer = optimizer
        self.arena = arena
        self.mirror = mirror
        self.rule = fused_rule(optimizer, arena.dtype)
        if self.rule is None:
            raise ValueError(f"no fused update for {type(optimizer).__name__} on {arena.dtype} weights")
        self._buffer: Any = None  # the arena data buffer the states were laid out for
        self._offsets: dict[int, int] = {}  # id(slot) -> offset when the states were laid out
        self._states: dict[str, Any] = {}
        self._plans: dict[tuple[Any, ...], _fused.ArenaPlan] = {}

    def _state_names(self) -> list[str]:
        if self.rule == "sgd":
            names = ["mom"] if self.optimizer.momentum else []
        else:
            names = ["mean", "var"]
        if self.optimizer.multi_precision and self.arena.dtype == np.float16:
            names.append("master")
        return names

    def _layout_states(self) -> None:
        """(Re)build the state buffers for the arena's current layout, keeping existing state."""
        arena, dev = self.arena, self.arena.device
        old, old_offsets = self._states, self._offsets
        with dev.use():
            new = {name: dev.xp.zeros(arena._data_buf.shape, np.float32) for name in self._state_names()}
            for slot in arena.slots:
                start, end = slot.offset, slot.offset + slot.size
                before = old_offsets.get(id(slot))
                for name, buf in new.items():
                    if before is not None and name in old:
                        buf[start:end] = old[name][before: before + slot.size]
                    elif name == "master":
                        buf[start:end] = arena._data_buf[start:end]
        self._states = new
        self._offsets = {id(s): s.offset for s in arena.slots}
        self._buffer = arena._data_buf
        self._plans.clear()

    def step(self, entries: Sequence[tuple[int, Slot]]) -> None:
        """Update the parameters ``entries`` = [(optimizer index, slot)] with one fused update."""
        opt, arena = self.optimizer, self.arena
        if self._buffer is not arena._data_buf or any(id(s) not in self._offsets for _, s in entries):
            self._layout_states()
        key = tuple(id(s) for _, s in entries)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _fused.ArenaPlan(
                [_fused.Segment(s.offset, s.grad_offset, s.size) for _, s in entries])
        opt._set_current_device(self.mirror)
        lr = np.empty(len(entries), np.float32)
        wd = np.empty(len(entries), np.float32)
        for k, (index, _) in enumerate(entries):
            count = opt._update_count(index)  # counted before the rate is read (MXNet's order)
            lr[k], wd[k] = opt._get_lr(index), opt._get_wd(index)
            if self.rule == "adam":  # lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t)
                lr[k] *= math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)
        st = self._states
        args = (plan, arena.device, arena._data_buf, arena._grad_buf)
        if self.rule == "sgd":
            _fused.sgd_arena(*args, st.get("mom"), st.get("master"), lr, wd, opt.momentum, opt.rescale_grad,
                             opt.clip_gradient)
        else:
            _fused.adam_arena(*args, st["mean"], st["var"], st.get("master"), lr, wd, opt.beta1, opt.beta2,
                              opt.epsilon, opt.rescale_grad, opt.clip_gradient)
