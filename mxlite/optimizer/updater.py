"""Updater: applies an optimizer to (index, grad, weight) triples, creating states lazily."""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor
from .optimizer import Optimizer


def _raw(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x._data
    if hasattr(x, "tostype"):  # row-sparse gradient: dense update
        return x.tostype("default")._data
    return x


class Updater:
    """Callable ``updater(index, grad, weight)`` (single items or equal-length lists).

    States are created on first use of each index and kept in ``states``.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.states: dict[Any, Any] = {}

    def __call__(self, index: Any, grad: Any, weight: Any) -> None:
        if not isinstance(index, (list, tuple)):
            index, grad, weight = [index], [grad], [weight]
        if not (len(index) == len(grad) == len(weight)):
            raise ValueError(f"updater: {len(index)} indices, {len(grad)} grads, {len(weight)} weights")
        for i, g, w in zip(index, grad, weight):
            wd = _raw(w)
            if i not in self.states:
                self.states[i] = self.optimizer.create_state(i, wd)
            self.optimizer.update(i, wd, _raw(g), self.states[i])


def get_updater(optimizer: Optimizer) -> Updater:
    """An :class:`Updater` for ``optimizer``."""
    return Updater(optimizer)
