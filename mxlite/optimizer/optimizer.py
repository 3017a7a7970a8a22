"""The Optimizer base class (MXNet 2.x ``mx.optimizer.Optimizer`` semantics) and its registry.

Conventions shared by every rule:

* effective gradient ``G = clip(rescale_grad * g, ±clip_gradient) + wd_eff * w``;
* per-parameter ``lr_eff = lr * lr_mult`` and ``wd_eff = wd * wd_mult``, the multipliers
  coming from ``param_dict[index].lr_mult/wd_mult`` and then ``set_lr_mult``/``set_wd_mult``;
* each index has its own update count starting at ``begin_num_update``; it is incremented
  *before* the learning rate is read, and ``num_update`` is the largest count.

Rules subclass :class:`Optimizer` and implement ``create_state(index, weight)`` and
``step(index, weight, grad, state)`` working on raw NumPy/CuPy arrays in place.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["Optimizer", "register", "create", "registered"]

_REGISTRY: dict[str, type[Optimizer]] = {}


def register(klass: type[Optimizer]) -> type[Optimizer]:
    """Register an optimizer class under its lower-case name (for :func:`create`)."""
    name = klass.__name__.lower()
    if name in _REGISTRY and _REGISTRY[name] is not klass:
        warnings.warn(f"optimizer {name!r} is being overridden by {klass.__module__}.{klass.__name__}", stacklevel=2)
    _REGISTRY[name] = klass
    return klass


def registered() -> list[str]:
    """Names of every registered optimizer."""
    return sorted(_REGISTRY)


def create(name: str | Optimizer, **kwargs: Any) -> Optimizer:
    """Instantiate a registered optimizer by case-insensitive name.

    Raises:
        ValueError: unknown name (lists the registered ones).
    """
    if isinstance(name, Optimizer):
        if kwargs:
            raise ValueError("optimizer_params must be empty when an Optimizer instance is given")
        return name
    if not isinstance(name, str) or name.lower() not in _REGISTRY:
        raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(registered())}")
    return _REGISTRY[name.lower()](**kwargs)


def _check_nonneg(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


class Optimizer:
    """Base class of update rules.

    Args:
        learning_rate: step size (overridden by ``lr_scheduler`` when given).
        wd: L2 weight decay coefficient, added to the gradient as ``wd * w``.
        rescale_grad: gradient multiplier (the Trainer sets it to ``1 / batch_size``).
        clip_gradient: clip ``rescale_grad * g`` to ``[-clip_gradient, clip_gradient]``.
        lr_scheduler: callable ``num_update -> lr``.
        begin_num_update: initial update count.
        multi_precision: keep float32 master weights for float16 parameters.
        param_dict: ``{index: Parameter}`` giving lr_mult / wd_mult.

    Raises:
        ValueError: negative learning_rate, wd or clip_gradient.
    """

    def __init__(self, learning_rate: float = 0.01, wd: float = 0.0, rescale_grad: float = 1.0,
                 clip_gradient: float | None = None, lr_scheduler: Any = None, begin_num_update: int = 0,
                 multi_precision: bool = False, param_dict: dict[int, Any] | None = None,
                 aggregate_num: int | None = None, use_fused_step: bool | None = None) -> None:
        _check_nonneg("learning_rate", learning_rate)
        _check_nonneg("wd", wd)
        if clip_gradient is not None and clip_gradient <= 0:
            raise ValueError(f"clip_gradient must be > 0 or None, got {clip_gradient}")
        self.lr = learning_rate
        self.wd = wd
        self.rescale_grad = rescale_grad
        self.clip_gradient = clip_gradient
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None and getattr(lr_scheduler, "base_lr", learning_rate) != learning_rate:
            warnings.warn("learning rate from lr_scheduler has been overwritten by learning_rate in optimizer",
                          UserWarning, stacklevel=2)
            lr_scheduler.base_lr = learning_rate
        self.begin_num_update = begin_num_update
        self.num_update = begin_num_update
        # One count table per device mirror (MXNet's _all_index_update_counts): every mirror
        # applies the same update, so each must see the same count sequence.
        self._all_index_update_counts: dict[int, dict[int, int]] = {0: {}}
        self._index_update_count = self._all_index_update_counts[0]
        self.multi_precision = multi_precision
        self.param_dict = dict(param_dict or {})
        self.lr_mult: dict[int, float] = {}
        self.wd_mult: dict[int, float] = {}
        self.aggregate_num = aggregate_num or 0
        self.use_fused_step = use_fused_step

    # -- learning rate --------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The current learning rate (the scheduler's value at ``num_update`` when set)."""
        if self.lr_scheduler is not None:
            return self.lr_scheduler(self.num_update)
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        """Set the learning rate. Raises UserWarning when a scheduler controls it (MXNet)."""
        if self.lr_scheduler is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined; "
                              "set_learning_rate would be overridden by it")
        _check_nonneg("learning_rate", lr)
        self.lr = lr

    def set_lr_mult(self, args_lr_mult: dict[int, float]) -> None:
        """Per-index learning-rate multipliers (override the Parameters' lr_mult)."""
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict[int, float]) -> None:
        """Per-index weight-decay multipliers (override the Parameters' wd_mult)."""
        self.wd_mult = dict(args_wd_mult)

    def _set_current_device(self, slot: int) -> None:
        """Select the update-count table of device mirror number ``slot``."""
        self._index_update_count = self._all_index_update_counts.setdefault(slot, {})

    def _update_count(self, index: int) -> int:
        count = self._index_update_count.get(index, self.begin_num_update) + 1
        self._index_update_count[index] = count
        self.num_update = max(count, self.num_update)
        return count

    def _get_lr(self, index: int) -> float:
        lr = self.learning_rate
        if index in self.lr_mult:
            return lr * self.lr_mult[index]
        if index in self.param_dict:
            return lr * self.param_dict[index].lr_mult
        return lr

    def _get_wd(self, index: int) -> float:
        if index in self.wd_mult:
            return self.wd * self.wd_mult[index]
        if index in self.param_dict:
            return self.wd * self.param_dict[index].wd_mult
        return self.wd

    def _effective_grad(self, xp: Any, grad: Any, weight: Any, wd: float) -> Any:
        """``clip(rescale_grad * g, ±clip_gradient) + wd * w`` (a new array)."""
        g = grad * self.rescale_grad
        if self.clip_gradient is not None:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        if wd:
            g = g + wd * weight
        return g

    # -- the rule -------------------------------------------------------------------------
    def create_state(self, index: int, weight: Any) -> Any:
        """Optimizer state for one weight (raw array); None when stateless."""
        return None

    def update(self, indices: Any, weights: Any, grads: Any, states: Any) -> None:
        """Apply the rule to one index or to lists of them (raw arrays, updated in place)."""
        if not isinstance(indices, (list, tuple)):
            indices, weights, grads, states = [indices], [weights], [grads], [states]
        for index, weight, grad, state in zip(indices, weights, grads, states):
            count = self._update_count(index)
            self.step(index, weight, grad, state, count)

    def step(self, index: int, weight: Any, grad: Any, state: Any, count: int) -> None:
        """Update ``weight`` (and ``state``) in place; ``count`` is this index's update count."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(learning_rate={self.learning_rate}, wd={self.wd})"


def _xp(arr: Any) -> Any:
    return np if isinstance(arr, np.ndarray) else __import__("cupy")
