"""DataLoader: iterate over a dataset in mini-batches (Gluon's ``gluon.data.DataLoader``).

Purpose: turn a :class:`~mxlite.gluon.data.Dataset` into a stream of batches for a training loop,
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
  permutations come from :func:`mxlite.autograd.random.host_generator`, reproducible under
  :func:`mxlite.autograd.random.seed`.

Workers (``num_workers > 0``):

* ``thread_pool=False`` (default): a pool of ``num_workers`` worker *processes*, forked from
  this one (POSIX; elsewhere spawned, which needs a picklable dataset), each reading whole
  batches and running ``batchify_fn``; the batches come back in order. Up to ``prefetch``
  batches (default ``2 * num_workers``) are in flight at once. Each worker reseeds NumPy's,
  Python's and :mod:`mxlite.autograd.random`'s streams with its own seed, so random transforms differ
  between workers.
* ``thread_pool=True``: the same with threads, which run in parallel only where the work
  releases the GIL (NumPy, Pillow decoding); no pickling, and batches are built in this process.
* A worker process that dies (a crash, ``os._exit``, the out-of-memory killer) makes the
  loader raise :class:`RuntimeError` saying so, and a batch not ready within ``timeout``
  seconds raises :class:`RuntimeError` naming the timeout: the loop never hangs. An exception
  raised by the dataset in a worker is re-raised in the loop with the worker's traceback.
* The pool lives as long as the loader (and any iterator over it) and is shut down when both
  are gone, or by :meth:`DataLoader.close`.

Warnings:

* ``pin_memory`` and ``pin_device_id`` are accepted and checked for MXNet compatibility;
  batches are built in ordinary host memory (mxlite stages its own host-to-device copies).
* With ``last_batch='rollover'`` the loader has state: the samples left over at the end of
  an epoch start the next one, so ``len(loader)`` can change after each epoch. Breaking out
  of an epoch early loses the carried samples (as in Gluon).
"""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import os
import random as _pyrandom
from collections.abc import Callable, Iterable, Iterator, Sized
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from ...autograd import random as _mxrandom
from ...autograd.tensor import Tensor
from ...device import Device, as_device, cpu
from ...device.copy import as_host
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
        sampler: an iterable of indices (e.g. :class:`~mxlite.gluon.data.SequentialSampler`)
            used instead of the default sequential/random one. Not with ``shuffle``.
        last_batch: ``'keep'`` (default: a short last batch is yielded), ``'discard'``
            (dropped) or ``'rollover'`` (carried to the start of the next epoch).
        batch_sampler: an iterable of index lists; replaces ``batch_size``, ``shuffle``,
            ``sampler`` and ``last_batch``, none of which may then be given.
        batchify_fn: combines a list of samples into a batch; default
            :func:`default_batchify_fn`.
        num_workers: worker processes (or threads) loading batches in parallel; 0 (default)
            loads in the calling thread.
        pin_memory: accepted for MXNet compatibility (see the module docstring).
        pin_device_id: accepted with ``pin_memory``; an integer >= 0.
        prefetch: batches in flight with workers, an integer >= 1 (default ``2 * num_workers``).
        thread_pool: use threads instead of processes for the workers.
        timeout: seconds to wait for one batch from the workers before raising (> 0, default 120).
        try_nopython, auto_reload: accepted for MXNet compatibility; ignored.
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
                 pin_memory: bool = False, pin_device_id: int = 0, prefetch: int | None = None,
                 thread_pool: bool = False, timeout: float = 120, try_nopython: bool | None = None,
                 auto_reload: bool = True, *, seed: int | None = None,
                 device: Device | str | None = None) -> None:
        self._pool: Any = None
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"dataset must have __getitem__ and __len__, got {type(dataset).__name__}")
        self._dataset: Dataset = dataset
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        self._num_workers = int(num_workers)
        if isinstance(pin_device_id, bool) or not isinstance(pin_device_id, (int, np.integer)) or pin_device_id < 0:
            raise ValueError(f"pin_device_id must be an integer >= 0, got {pin_device_id!r}")
        self._pin_memory, self._pin_device_id = bool(pin_memory), int(pin_device_id)
        if prefetch is None:
            prefetch = 2 * self._num_workers
        elif isinstance(prefetch, bool) or not isinstance(prefetch, (int, np.integer)) or prefetch < 1:
            raise ValueError(f"prefetch must be an integer >= 1 or None, got {prefetch!r}")
        self._prefetch = max(int(prefetch), 1)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self._timeout = float(timeout)
        self._thread_pool = bool(thread_pool)
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
            RuntimeError: a worker process died, or a batch took longer than ``timeout``.
        """
        if self._num_workers == 0:
            for indices in self._batch_sampler:
                yield _to_device(self._load(indices), self._device)
            return
        yield from self._iter_workers()

    def _load(self, indices: Iterable[Any]) -> Any:
        return self._batchify_fn([self._read(i) for i in indices])

    def _get_pool(self) -> Any:
        if self._pool is None:
            if self._thread_pool:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._num_workers,
                                                                   thread_name_prefix="mxlite-dataloader")
            else:
                methods = multiprocessing.get_all_start_methods()
                ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
                base_seed = int(_mxrandom.host_generator().integers(2**31))
                counter = ctx.Value("i", 0)
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self._num_workers, mp_context=ctx, initializer=_worker_init,
                    initargs=(self._dataset, self._batchify_fn, base_seed, counter))
        return self._pool

    def _iter_workers(self) -> Iterator[Any]:
        pool = self._get_pool()
        batches = iter(self._batch_sampler)
        pending: collections.deque[tuple[int, Any]] = collections.deque()
        submitted = 0

        def submit() -> None:
            nonlocal submitted
            indices = next(batches, None)
            if indices is None:
                return
            fn = self._load if self._thread_pool else _worker_load
            pending.append((submitted, pool.submit(fn, list(indices))))
            submitted += 1

        try:
            for _ in range(self._prefetch):
                submit()
            while pending:
                number, future = pending.popleft()
                try:
                    batch = future.result(timeout=self._timeout)
                except BrokenProcessPool as exc:
                    self.close()
                    raise RuntimeError(
                        f"DataLoader: a worker process died while loading batch {number} (a crash, os._exit or "
                        "the out-of-memory killer); the pool was shut down. Check the dataset and batchify_fn, "
                        "or run with num_workers=0 to see the error in this process") from exc
                except concurrent.futures.TimeoutError as exc:
                    self.close()
                    raise RuntimeError(f"DataLoader: batch {number} was not ready after timeout={self._timeout:g} "
                                       "seconds; a worker is stuck or too slow (raise timeout= if it is only "
                                       "slow)") from exc
                submit()
                yield _to_device(batch if self._thread_pool else _from_wire(batch), self._device)
        finally:
            for _, future in pending:
                future.cancel()

    def close(self) -> None:
        """Shut the worker pool down, ending its worker processes (a later iteration starts a new one).

        Safe to call twice. A stuck worker *thread* (``thread_pool=True``) cannot be stopped: it runs
        until its read returns.
        """
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is None:
            return
        workers = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown() drops them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers:  # a stuck worker would outlive the loader, and interpreter exit would wait for it
            if proc.is_alive():
                proc.terminate()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to release
            pass

    def _read(self, index: Any) -> Any:
        return _read_sample(self._dataset, index)

    def __len__(self) -> int:
        """Number of batches the next epoch yields (see :class:`~mxlite.gluon.data.BatchSampler`).

        Raises:
            TypeError: a user ``batch_sampler`` has no length.
        """
        if not isinstance(self._batch_sampler, Sized):
            raise TypeError(f"len(): batch_sampler {type(self._batch_sampler).__name__} has no length")
        return len(self._batch_sampler)


# -- worker processes ------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


class _WireTensor:
    """A Tensor's host data on its way from a worker process (rebuilt as a CPU Tensor)."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray) -> None:
        self.data = data


def _to_wire(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return _WireTensor(as_host(obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_wire(o) for o in obj)
    return obj


def _from_wire(obj: Any) -> Any:
    if isinstance(obj, _WireTensor):
        return Tensor(obj.data, cpu(0))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_from_wire(o) for o in obj)
    return obj


def _worker_init(dataset: Any, batchify_fn: Callable[[list[Any]], Any], base_seed: int, counter: Any) -> None:
    """Runs once in each worker process: keep the dataset and give the worker its own seeds."""
    with counter.get_lock():
        worker_id = counter.value
        counter.value += 1
    seed = (base_seed + 7919 * (worker_id + 1)) % 2**31
    np.random.seed(seed)
    _pyrandom.seed(seed)
    _mxrandom.seed(seed)
    _WORKER.update(dataset=dataset, batchify_fn=batchify_fn, worker_id=worker_id, pid=os.getpid())


def _worker_load(indices: list[Any]) -> Any:
    """Read and batchify one batch in a worker process."""
    dataset = _WORKER["dataset"]
    return _to_wire(_WORKER["batchify_fn"]([_read_sample(dataset, i) for i in indices]))


def _read_sample(dataset: Any, index: Any) -> Any:
    """``dataset[index]``; an IndexError for an index outside the dataset says the sampler gave it."""
    try:
        return dataset[index]
    except IndexError as exc:
        n = len(dataset)
        if isinstance(index, (int, np.integer)) and not -n <= index < n:
            raise IndexError(f"DataLoader: the sampler gave index {index}, but the dataset has {n} samples "
                             f"(valid indices 0..{n - 1}); check the sampler's length") from exc
        raise
