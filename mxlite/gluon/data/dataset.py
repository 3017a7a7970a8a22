"""Datasets: indexable collections of samples (Gluon's ``gluon.data.dataset`` module).

A dataset has ``__getitem__(i)`` returning one sample and ``__len__``. A sample is a single
array/number or a tuple of them (typically ``(data, label)``); :class:`DataLoader` batches
the samples the same way, field by field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from ...device.copy import as_host
from .sampler import FilterSampler, SequentialSampler

__all__ = ["ArrayDataset", "Dataset", "SimpleDataset"]


class Dataset:
    """Base class: subclasses implement ``__getitem__(idx)`` and ``__len__``."""

    def __getitem__(self, idx: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not implement __len__")

    def transform(self, fn: Callable[..., Any], lazy: bool = True) -> Dataset:
        """A dataset whose samples are ``fn(*sample)`` (tuple samples) or ``fn(sample)``.

        Args:
            fn: the transform; it receives a tuple sample's fields as separate arguments.
            lazy: apply ``fn`` each time a sample is read (True), or once to every sample now
                and keep the results in memory (False).
        """
        trans = _LazyTransformDataset(self, fn)
        if lazy:
            return trans
        return SimpleDataset([trans[i] for i in range(len(trans))])

    def transform_first(self, fn: Callable[[Any], Any], lazy: bool = True) -> Dataset:
        """A dataset applying ``fn`` to the first field of each sample only (e.g. the image,
        leaving the label alone); for single-field samples, to the sample. ``lazy`` as in
        :meth:`transform`."""
        return self.transform(_TransformFirst(fn), lazy)

    def filter(self, fn: Callable[[Any], bool]) -> Dataset:
        """A dataset of the samples for which ``fn(sample)`` is true, in order (MXNet's ``filter``).

        ``fn`` is called once per sample, here; the result reads the kept samples lazily.
        """
        return _SampledDataset(self, FilterSampler(fn, self))

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Contiguous part ``index`` of ``num_shards`` (MXNet's ``shard``).

        The first ``len(self) % num_shards`` shards hold one sample more than the others, so
        9 samples in 4 shards give lengths 3, 2, 2, 2.

        Raises:
            ValueError: ``num_shards`` < 1, or ``index`` outside ``0..num_shards - 1``.
        """
        if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
            raise ValueError(f"num_shards must be an integer >= 1, got {num_shards!r}")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < num_shards:
            raise ValueError(f"index must be an integer in [0, {num_shards - 1}], got {index!r}")
        length = len(self)
        shard_len, rest = divmod(length, int(num_shards))
        start = shard_len * index + min(index, rest)
        end = start + shard_len + (1 if index < rest else 0)
        return _SampledDataset(self, SequentialSampler(end - start, start))

    def take(self, count: int | None) -> Dataset:
        """The first ``count`` samples (all of them when ``count`` is None or above the length).

        Raises:
            ValueError: ``count`` is negative or not an integer.
        """
        if count is not None and (isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0):
            raise ValueError(f"count must be a non-negative integer or None, got {count!r}")
        if count is None or count > len(self):
            count = len(self)
        return _SampledDataset(self, SequentialSampler(int(count)))

    def sample(self, sampler: Any) -> Dataset:
        """The samples at the indices ``sampler`` yields, in its order (drawn once, here).

        Raises:
            TypeError: ``sampler`` is not iterable.
        """
        if not hasattr(sampler, "__iter__"):
            raise TypeError(f"sampler must be an iterable of indices, got {type(sampler).__name__}")
        return _SampledDataset(self, sampler)

    def __mx_handle__(self) -> Dataset:
        """MXNet 2.x's handle to a C++ copy of the dataset, for ``DataLoader(try_nopython=True)``. mxlite
        reads every dataset in Python, so a dataset is its own handle: this returns ``self``."""
        return self


class SimpleDataset(Dataset):
    """A dataset over any sequence with ``len`` and integer indexing (a list, an array).

    Raises:
        TypeError: ``data`` has no ``__len__`` or no ``__getitem__``.
    """

    def __init__(self, data: Sequence[Any]) -> None:
        if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
            raise TypeError(f"SimpleDataset needs a sequence with __len__ and __getitem__, got {type(data).__name__}")
        self._data = data

    def __getitem__(self, idx: int) -> Any:
        return self._data[idx]

    def __len__(self) -> int:
        return len(self._data)


class ArrayDataset(Dataset):
    """Zips several equally long arrays: sample ``i`` is ``(a[i], b[i], ...)``.

    With a single array, sample ``i`` is ``a[i]`` itself rather than a 1-tuple. Arrays may
    be NumPy arrays, Python sequences or :class:`~mxlite.Tensor` s; Tensors (on any device)
    are copied to NumPy once, here, so that reading samples is cheap host indexing and the
    loader's batches come out on the CPU.

    Raises:
        ValueError: no arrays, or arrays of different lengths (the message lists them).
        TypeError: an argument has no length.
    """

    def __init__(self, *arrays: Any) -> None:
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        data: list[Any] = []
        for i, arr in enumerate(arrays):
            if isinstance(arr, Tensor) or hasattr(arr, "__cuda_array_interface__"):  # device data: to the host
                arr = as_host(arr)
            if not hasattr(arr, "__len__"):
                raise TypeError(f"ArrayDataset: argument {i} ({type(arr).__name__}) has no length")
            if isinstance(arr, np.ndarray) and arr.ndim == 0:
                raise TypeError(f"ArrayDataset: argument {i} is a 0-d array, which has no length")
            data.append(arr)
        lengths = [len(a) for a in data]
        if len(set(lengths)) != 1:
            raise ValueError(f"ArrayDataset: all arrays must have the same length, got lengths {lengths}")
        self._length = lengths[0]
        self._data = data

    def __getitem__(self, idx: int) -> Any:
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(arr[idx] for arr in self._data)

    def __len__(self) -> int:
        return self._length


class _SampledDataset(Dataset):
    """``dataset`` read at the indices of ``sampler`` (listed once, at construction)."""

    def __init__(self, dataset: Dataset, sampler: Any) -> None:
        self._dataset = dataset
        self._indices = list(iter(sampler))

    def __getitem__(self, idx: int) -> Any:
        return self._dataset[self._indices[idx]]

    def __len__(self) -> int:
        return len(self._indices)


class _LazyTransformDataset(Dataset):
    """``dataset`` with ``fn`` applied at read time."""

    def __init__(self, dataset: Dataset, fn: Callable[..., Any]) -> None:
        self._dataset = dataset
        self._fn = fn

    def __getitem__(self, idx: int) -> Any:
        item = self._dataset[idx]
        if isinstance(item, tuple):
            return self._fn(*item)
        return self._fn(item)

    def __len__(self) -> int:
        return len(self._dataset)


class _TransformFirst:
    """Callable applying ``fn`` to the first of its arguments, passing the rest through."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn

    def __call__(self, x: Any, *args: Any) -> Any:
        if args:
            return (self._fn(x), *args)
        return self._fn(x)
