"""DataLoader: iterate over a dataset in mini-batches (Gluon's ``gluon.data.DataLoader``).

Purpose: turn a :class:`~mxlite.data.Dataset` into a stream of batches for a training loop,
in sequential or shuffled order, with Gluon's three policies for the incomplete last batch.

Example::

    X, y = mxlite.datasets.load_digits()
    loader = DataLoader(ArrayDataset(X, y), batch_size=64, shuffle=True, seed=0)
    for data, label in loader:            # CPU Tensors: (64, 64) float32 and (64,) int32
        parts = split_and_load(data, devices)

Behaviour:

* Each epoch (each ``iter(loader)``) the batch sampler yields lists of indices; the samples
  at those indices are read from the dataset and combined by ``batchify_fn``.
* The default :func:`default_batchify_fn` stacks samples along a new first axis into CPU
  Tensors, keeping NumPy dtypes (Python ints become int64 and floats float64, as
  ``numpy.asarray`` makes them); tuple samples give a tuple of batched fields.
* ``shuffle=True`` draws a new permutation every epoch. With ``seed`` (an mxlite extension)
  the loader owns ``numpy.random.Generator(PCG64(seed))``, so the sequence of epoch orders
  is the same on every run and independent of any other random draws; without ``seed`` the
  permutations come from :func:`mxlite.random.host_generator`, reproducible under
  :func:`mxlite.random.seed`.

Warnings:

* ``num_workers > 0`` is accepted for Gluon compatibility but samples are still read in the
  calling thread, one batch at a time: there is no worker pool or prefetching.
* With ``last_batch='rollover'`` the loader has state: the samples left over at the end of
  an epoch start the next one, so ``len(loader)`` can change after each epoch. Breaking out
  of an epoch early loses the carried samples (as in Gluon).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

import numpy as np

from .._copy import as_host
from ..autograd.tensor import Tensor
from ..device import Device, as_device, cpu
from . import sampler as _sampler
from .dataset import Dataset

__all__ = ["DataLoader", "default_batchify_fn"]


def default_batchify_fn(data: list[Any]) -> Any:
    """Stack a list of samples into a batch along a new first axis (Gluon's default).

    Tuple samples are batched field by field into a tuple. Tensors are copied to the host
    and stacked, and so are device (CuPy) arrays; NumPy arrays keep their dtype; Python numbers
    become what ``numpy.asarray`` makes of them (int64, float64). Every array field becomes a
    CPU :class:`~mxlite.Tensor`.

    Raises:
        ValueError: the samples' fields have different shapes (the message lists them).
        TypeError: a field is not numeric (strings, objects).
    """
    first = data[0]
    if isinstance(first, tuple):
        return tuple(default_batchify_fn(list(field)) for field in zip(*data, strict=True))
    items = [as_host(x) if isinstance(x, Tensor) or hasattr(x, "__cuda_array_interface__") else x for x in data]
    try:
        batch = np.stack(items) if isinstance(items[0], np.ndarray) else np.asarray(items)
    except ValueError as exc:
        shapes = sorted({tuple(np.shape(x)) for x in items})
        raise ValueError(f"default_batchify_fn: cannot stack samples of different shapes {shapes}") from exc
    if not (np.issubdtype(batch.dtype, np.number) or batch.dtype == np.bool_):
        raise TypeError(f"default_batchify_fn: samples of dtype {batch.dtype} are not numeric; pass a batchify_fn")
    return Tensor(batch, cpu(0))


def _to_device(batch: Any, device: Device) -> Any:
    """``batch`` with every Tensor inside tuples/lists moved to ``device``."""
    if isinstance(batch, Tensor):
        return batch if batch.device == device else batch.to(device)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    return batch


class DataLoader:
    """Loads a dataset in mini-batches; see the module docstring for behaviour and warnings.

    Args:
        dataset: a :class:`Dataset` (or anything with ``__getitem__`` and ``__len__``).
        batch_size: samples per batch, an integer >= 1. Required unless ``batch_sampler``.
        shuffle: draw a new random order each epoch. Not with ``sampler``.
        sampler: an iterable of indices (e.g. :class:`~mxlite.data.SequentialSampler`)
            used instead of the default sequential/random one. Not with ``shuffle``.
        last_batch: ``'keep'`` (default: a short last batch is yielded), ``'discard'``
            (dropped) or ``'rollover'`` (carried to the start of the next epoch).
        batch_sampler: an iterable of index lists; replaces ``batch_size``, ``shuffle``,
            ``sampler`` and ``last_batch``, none of which may then be given.
        batchify_fn: combines a list of samples into a batch; default
            :func:`default_batchify_fn`.
        num_workers: accepted for Gluon compatibility (an integer >= 0); loading always runs
            in the calling thread.
        seed: a non-negative integer seeding the loader's own shuffle generator (used only
            with ``shuffle=True``; ignored otherwise).
        device: where batches are put (default: ``cpu(0)``, where batchify builds them).

    Raises:
        ValueError: a bad or conflicting argument; the message names it and the value.
    """

    def __init__(self, dataset: Any, batch_size: int | None = None, shuffle: bool = False,
                 sampler: Iterable[Any] | None = None, last_batch: str | None = None,
                 batch_sampler: Iterable[list[Any]] | None = None,
                 batchify_fn: Callable[[list[Any]], Any] | None = None, num_workers: int = 0,
                 seed: int | None = None, device: Device | str | None = None) -> None:
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"dataset must have __getitem__ and __len__, got {type(dataset).__name__}")
        self._dataset: Dataset = dataset
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        self._num_workers = int(num_workers)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
        self._seed = seed
        self._generator: np.random.Generator | None = None

        if batch_sampler is None:
            if batch_size is None:
                raise ValueError("batch_size must be given unless batch_sampler is, got batch_size=None")
            if sampler is None:
                if shuffle:
                    if seed is not None:
                        self._generator = np.random.Generator(np.random.PCG64(seed))
                    sampler = _sampler.RandomSampler(len(dataset), self._generator)
                else:
                    sampler = _sampler.SequentialSampler(len(dataset))
            elif shuffle:
                raise ValueError(f"shuffle must be False when a sampler is given, got shuffle={shuffle!r} "
                                 f"and sampler={type(sampler).__name__}; shuffle inside the sampler instead")
            if not isinstance(sampler, Sized):
                raise TypeError(f"sampler must have a length, got {type(sampler).__name__}")
            batch_sampler = _sampler.BatchSampler(sampler, batch_size, last_batch if last_batch is not None else "keep")
        elif batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise ValueError(
                "batch_size, shuffle, sampler and last_batch must not be given with batch_sampler; got "
                f"batch_size={batch_size!r}, shuffle={shuffle!r}, sampler={sampler!r}, last_batch={last_batch!r}"
            )
        self._batch_sampler = batch_sampler
        self._batchify_fn = batchify_fn if batchify_fn is not None else default_batchify_fn
        self._device = as_device(device) if device is not None else cpu(0)

    def __iter__(self) -> Iterator[Any]:
        """Yield the batches of one epoch.

        Raises:
            IndexError: the sampler gave an index outside the dataset (names it and the length).
        """
        for indices in self._batch_sampler:
            batch = self._batchify_fn([self._read(i) for i in indices])
            yield _to_device(batch, self._device)

    def _read(self, index: Any) -> Any:
        try:
            return self._dataset[index]
        except IndexError as exc:
            n = len(self._dataset)
            if isinstance(index, (int, np.integer)) and not -n <= index < n:
                raise IndexError(f"DataLoader: the sampler gave index {index}, but the dataset has {n} samples "
                                 f"(valid indices 0..{n - 1}); check the sampler's length") from exc
            raise

    def __len__(self) -> int:
        """Number of batches the next epoch yields (see :class:`~mxlite.data.BatchSampler`).

        Raises:
            TypeError: a user ``batch_sampler`` has no length.
        """
        if not isinstance(self._batch_sampler, Sized):
            raise TypeError(f"len(): batch_sampler {type(self._batch_sampler).__name__} has no length")
        return len(self._batch_sampler)
