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
  permutations come from :func:`mxlite.ops.random.host_generator`, reproducible under
  :func:`mxlite.ops.random.seed`.

Workers (``num_workers > 0``):

* ``thread_pool=False`` (default): a pool of ``num_workers`` worker *processes*, forked from
  this one (POSIX; elsewhere spawned, which needs a picklable dataset), each reading whole
  batches and running ``batchify_fn``; the batches come back in order. Up to ``prefetch``
  batches (default ``2 * num_workers``) are in flight at once. Each worker reseeds NumPy's,
  Python's and :mod:`mxlite.ops.random`'s streams with its own seed, so random transforms differ
  between workers.
* ``thread_pool=True``: the same with threads, which run in parallel only where the work
  releases the GIL (NumPy, Pillow decoding); no pickling, and batches are built in this process.
* Each worker process limits the BLAS/OpenMP thread pools of the libraries it uses to one
  thread (``OMP_NUM_THREADS`` and its siblings, and :mod:`threadpoolctl` for the libraries
  already loaded), so ``num_workers`` workers do not oversubscribe the cores.
* A worker process that dies (a crash, ``os._exit``, the out-of-memory killer) makes the
  loader raise :class:`RuntimeError` ("a worker process died while loading batch N", with its
  pid and exit status or signal) and shuts the pool down; a batch not ready within ``timeout``
  seconds raises :class:`RuntimeError` naming the timeout: the loop never hangs. An exception
  raised by the dataset in a worker is re-raised in the loop with the worker's traceback.
* Leaving a loop early (``break``, an exception) never blocks: batches not yet started are
  dropped, and those being read are discarded when they arrive. A worker stuck in a read never
  keeps the program from exiting: worker processes are daemonic (ended at interpreter exit)
  and worker threads are daemon threads.
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
import functools
import math
import multiprocessing
import os
import random as _pyrandom
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from ...device import Device, as_device, cpu
from ...device.copy import as_host
from ...ops import random as _mxrandom
from . import _workers
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
    if len(data) == 0:
        raise ValueError("default_batchify_fn: got no samples; a batch needs at least one")
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
        timeout: seconds to wait for one batch from the workers before raising (> 0, default 120;
            ``math.inf``: wait without a limit).
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
            raise ValueError(f"timeout must be a number of seconds > 0 (math.inf: no limit), got {timeout!r}")
        self._timeout: float | None = None if math.isinf(timeout) else float(timeout)
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
            for number, indices in enumerate(self._batch_sampler):
                yield _to_device(self._load(_check_batch(indices, number)), self._device)
            return
        yield from self._iter_workers()

    def _load(self, indices: Iterable[Any]) -> Any:
        return _load_batch(self._dataset, self._batchify_fn, indices)

    def _get_pool(self) -> _workers.ThreadPool | _workers.ProcessPool:
        if self._pool is None or self._pool.closed:  # closed: a worker process died
            if self._thread_pool:
                # not self._load: a thread holding the loader would keep it (and its pool) alive for ever
                self._pool = _workers.ThreadPool(self._num_workers,
                                                 functools.partial(_load_batch, self._dataset, self._batchify_fn))
            else:
                methods = multiprocessing.get_all_start_methods()
                ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
                base_seed = int(_mxrandom.host_generator().integers(2**31))
                self._pool = _workers.ProcessPool(self._num_workers, ctx, self._dataset, self._batchify_fn,
                                                  base_seed, _worker_init, _worker_load)
        return self._pool

    def _iter_workers(self) -> Iterator[Any]:
        pool = self._get_pool()
        batches = enumerate(self._batch_sampler)
        pending: collections.deque[tuple[int, int]] = collections.deque()  # (batch number, ticket)

        def submit() -> None:
            number, indices = next(batches, (None, None))
            if number is None:
                return
            pending.append((number, pool.submit(_check_batch(indices, number), number)))

        try:
            for _ in range(self._prefetch):
                submit()
            while pending:
                number, ticket = pending.popleft()
                try:
                    batch = pool.result(ticket, self._timeout)
                except TimeoutError:
                    self.close()
                    raise RuntimeError(f"DataLoader: batch {number} was not ready after timeout={self._timeout:g} "
                                       "seconds; a worker is stuck or too slow (raise timeout= if it is only "
                                       "slow)") from None
                submit()
                yield _to_device(batch if self._thread_pool else _from_wire(batch), self._device)
        finally:
            if not pool.closed:
                pool.abandon([ticket for _, ticket in pending])

    def close(self) -> None:
        """Shut the workers down (a later iteration starts new ones). Safe to call twice.

        Worker processes end: idle ones at once, busy ones by SIGTERM (SIGKILL after a second). A worker
        *thread* (``thread_pool=True``) stuck in a read cannot be stopped; it is a daemon thread, so it
        never keeps the program from exiting.
        """
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to release
            pass

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


def _worker_init(dataset: Any, batchify_fn: Callable[[list[Any]], Any], seed: int, worker_id: int) -> None:
    """Runs once in each worker process: keep the dataset and give the worker its own seeds."""
    np.random.seed(seed)
    _pyrandom.seed(seed)
    _mxrandom.seed(seed)
    _WORKER.update(dataset=dataset, batchify_fn=batchify_fn, worker_id=worker_id, pid=os.getpid())


def _worker_load(indices: list[Any]) -> Any:
    """Read and batchify one batch in a worker process."""
    return _to_wire(_load_batch(_WORKER["dataset"], _WORKER["batchify_fn"], indices))


def _load_batch(dataset: Any, batchify_fn: Callable[[list[Any]], Any], indices: Iterable[Any]) -> Any:
    return batchify_fn([_read_sample(dataset, i) for i in indices])


def _check_batch(indices: Iterable[Any], number: int) -> list[Any]:
    """The batch sampler's ``indices`` as a list; an empty batch is refused here, naming its number."""
    indices = list(indices)
    if not indices:
        raise ValueError(f"DataLoader: the batch sampler gave an empty batch (batch {number} of the epoch); a "
                         "batch needs at least one index")
    return indices


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
