"""Samplers: which dataset indices a :class:`~mxlite.gluon.data.DataLoader` reads, in which order.

A sampler is an iterable of indices with a ``len``; :class:`BatchSampler` groups another
sampler's indices into lists of ``batch_size`` (Gluon's ``gluon.data.sampler`` module).
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import numpy as np

from ...ops import random as _random

__all__ = ["LAST_BATCH_MODES", "BatchSampler", "FilterSampler", "IntervalSampler", "RandomSampler", "Sampler",
           "SequentialSampler"]

LAST_BATCH_MODES = ("keep", "discard", "rollover")


def _check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or ValueError naming ``name`` when it is not an int >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class Sampler:
    """Base class: an iterable of dataset indices with a length."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not implement __iter__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not implement __len__")


class SequentialSampler(Sampler):
    """Indices ``start, start + 1, ..., start + length - 1`` in order.

    Raises:
        ValueError: ``length`` or ``start`` is not a non-negative integer.
    """

    def __init__(self, length: int, start: int = 0) -> None:
        self._length = _check_int("length", length, 0)
        self._start = _check_int("start", start, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._start, self._start + self._length))

    def __len__(self) -> int:
        return self._length


class RandomSampler(Sampler):
    """A fresh random permutation of ``range(length)`` on every iteration (every epoch).

    Args:
        length: number of indices.
        generator: the NumPy generator drawing the permutations. ``None`` draws from
            :func:`mxlite.ops.random.host_generator` each epoch, so ``mx.random.seed`` makes
            the order reproducible (that stream is shared with parameter initialisers).

    Raises:
        ValueError: ``length`` is not a non-negative integer.
        TypeError: ``generator`` is not a ``numpy.random.Generator``.
    """

    def __init__(self, length: int, generator: np.random.Generator | None = None) -> None:
        self._length = _check_int("length", length, 0)
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError(f"generator must be a numpy.random.Generator or None, got {type(generator).__name__}")
        self._generator = generator

    def __iter__(self) -> Iterator[int]:
        if self._generator is not None:
            gen = self._generator
        else:  # looked up each epoch, so a later mx.random.seed() applies
            gen = _random.host_generator()
        return iter(gen.permutation(self._length).tolist())

    def __len__(self) -> int:
        return self._length


class IntervalSampler(Sampler):
    """Indices ``k, k + interval, k + 2·interval, ...`` below ``length`` (MXNet's ``IntervalSampler``).

    With ``rollover=True`` the pass is repeated for ``k = 0, 1, ..., interval - 1``, so every
    index appears once; with ``rollover=False`` only ``k = 0`` is used.
    ``IntervalSampler(10, 3)`` gives 0 3 6 9 1 4 7 2 5 8; with ``rollover=False``, 0 3 6 9.

    Raises:
        ValueError: ``length`` < 0, or ``interval`` < 1 or >= ``length`` (when ``length`` > 0).
    """

    def __init__(self, length: int, interval: int, rollover: bool = True) -> None:
        self._length = _check_int("length", length, 0)
        self._interval = _check_int("interval", interval, 1)
        if self._length and self._interval >= self._length:
            raise ValueError(f"interval must be smaller than length ({self._length}), got {interval!r}")
        self._rollover = bool(rollover)

    def __iter__(self) -> Iterator[int]:
        for start in range(self._interval if self._rollover else 1):
            yield from range(start, self._length, self._interval)

    def __len__(self) -> int:
        if self._rollover:
            return self._length
        return len(range(0, self._length, self._interval))


class FilterSampler(Sampler):
    """The indices ``i`` of ``dataset`` for which ``fn(dataset[i])`` is true (MXNet's ``FilterSampler``).

    ``fn`` is evaluated once per sample, at construction.

    Raises:
        TypeError: ``fn`` is not callable.
    """

    def __init__(self, fn: Any, dataset: Any) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self._indices = [i for i in range(len(dataset)) if fn(dataset[i])]

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices)

    def __len__(self) -> int:
        return len(self._indices)


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of ``batch_size`` (Gluon's ``BatchSampler``).

    ``last_batch`` says what happens to a final group smaller than ``batch_size``:

    * ``'keep'``: it is yielded as a short batch;
    * ``'discard'``: it is dropped;
    * ``'rollover'``: it is kept back and becomes the start of the first batch of the next
      iteration (epoch), so every batch is full and no sample is lost.

    ``len`` is the number of batches the *next* iteration yields: ``ceil(n / batch_size)``
    for keep, ``floor(n / batch_size)`` for discard, and ``floor((carried + n) / batch_size)``
    for rollover, where ``carried`` is the number of samples rolled over from the last epoch.

    Args:
        sampler: any iterable of indices with a ``len``.
        batch_size: indices per batch, an integer >= 1.
        last_batch: ``'keep'``, ``'discard'`` or ``'rollover'``.

    Raises:
        ValueError: ``batch_size`` < 1 or not an integer; unknown ``last_batch``.
    """

    def __init__(self, sampler: Sized, batch_size: int, last_batch: str = "keep") -> None:
        self._batch_size = _check_int("batch_size", batch_size, 1)
        if last_batch not in LAST_BATCH_MODES:
            raise ValueError(f"last_batch must be one of {LAST_BATCH_MODES}, got {last_batch!r}")
        self._sampler = sampler
        self._last_batch = last_batch
        self._prev: list[Any] = []  # rollover: indices carried into the next epoch

    def __iter__(self) -> Iterator[list[Any]]:
        batch, self._prev = self._prev, []
        for index in self._sampler:
            batch.append(index)
            if len(batch) == self._batch_size:
                yield batch
                batch = []
        if batch:
            if self._last_batch == "keep":
                yield batch
            elif self._last_batch == "rollover":
                self._prev = batch

    def __len__(self) -> int:
        n = len(self._sampler)
        if self._last_batch == "keep":
            return (n + self._batch_size - 1) // self._batch_size
        if self._last_batch == "discard":
            return n // self._batch_size
        return (len(self._prev) + n) // self._batch_size
