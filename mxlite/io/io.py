"""MXNet 1.x's data iterators: ``DataDesc``, ``DataBatch``, ``DataIter``, ``NDArrayIter``, ``ResizeIter`` and
``PrefetchingIter``, so that loops written for ``mx.io`` run unchanged::

    train_iter = mx.io.NDArrayIter(X, y, batch_size=32, shuffle=True, last_batch_handle="discard")
    for epoch in range(10):
        train_iter.reset()
        for batch in train_iter:
            x, label = batch.data[0], batch.label[0]      # Tensors on cpu(0)

Arrays handed out are mxlite Tensors on ``cpu(0)`` (split them onto devices with ``split_and_load``). The
iterators keep their data in host memory as NumPy arrays and copy each batch out.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..device import cpu
from ..ops.creation import array as _array

__all__ = ["DataDesc", "DataBatch", "DataIter", "NDArrayIter", "ResizeIter", "PrefetchingIter"]

_LAST_BATCH = ("pad", "discard", "roll_over")


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """Name, shape, dtype and layout of one input or label of a batch (MXNet's ``mx.io.DataDesc``).

    A ``(name, shape)`` named tuple (it unpacks and compares as one) with two more attributes: ``dtype`` (default
    float32) and ``layout`` (default ``'NCHW'``), whose ``'N'`` marks the batch axis.
    """

    def __new__(cls, name: str, shape: Sequence[int], dtype: Any = np.float32, layout: str = "NCHW") -> DataDesc:
        desc = super().__new__(cls, name, tuple(shape))
        desc.dtype = dtype
        desc.layout = layout
        return desc

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        """The batch axis of ``layout``: the position of ``'N'`` (-1 when absent: the whole array goes to every
        device); 0 when ``layout`` is None."""
        return 0 if layout is None else layout.find("N")

    @staticmethod
    def get_list(shapes: Sequence[tuple[str, Sequence[int]]],
                 types: Sequence[tuple[str, Any]] | None) -> list[DataDesc]:
        """DataDescs from ``(name, shape)`` pairs and, optionally, ``(name, dtype)`` pairs (matched by name)."""
        if types is None:
            return [DataDesc(name, shape) for name, shape in shapes]
        dtypes = dict(types)
        return [DataDesc(name, shape, dtypes[name]) for name, shape in shapes]


class DataBatch:
    """One batch (MXNet's ``mx.io.DataBatch``).

    Attributes:
        data: list of Tensors, each holding ``batch_size`` examples.
        label: list of Tensors, or None.
        pad: how many examples at the end are padding (last batch with ``last_batch_handle='pad'``), else 0/None.
        index: the examples' indices, or None.
        bucket_key: the bucket of bucketing iterators, or None.
        provide_data, provide_label: lists of :class:`DataDesc` describing ``data`` and ``label``, or None.

    Raises:
        TypeError: ``data`` or ``label`` is not a list or tuple (of arrays).
    """

    def __init__(self, data: Sequence[Any] | None, label: Sequence[Any] | None = None, pad: int | None = None,
                 index: Any = None, bucket_key: Any = None, provide_data: list[DataDesc] | None = None,
                 provide_label: list[DataDesc] | None = None) -> None:
        for what, value in (("data", data), ("label", label)):
            if value is not None and not isinstance(value, (list, tuple)):
                raise TypeError(f"DataBatch: {what} must be a list of arrays, got {type(value).__name__}")
        self.data = data
        self.label = label
        self.pad = pad
        self.index = index
        self.bucket_key = bucket_key
        self.provide_data = provide_data
        self.provide_label = provide_label

    def __str__(self) -> str:
        data_shapes = [d.shape for d in self.data]
        label_shapes = [lab.shape for lab in self.label] if self.label else None
        return f"{type(self).__name__}: data shapes: {data_shapes} label shapes: {label_shapes}"


class DataIter:
    """The base of MXNet's data iterators: ``next()`` returns a :class:`DataBatch`, StopIteration ends an epoch and
    ``reset()`` starts the next.

    A subclass implements ``iter_next`` (advance; False at the end) and ``getdata``/``getlabel``/``getpad``/
    ``getindex`` (the current batch), or overrides ``next`` itself. ``provide_data``/``provide_label`` describe
    the batches (lists of :class:`DataDesc`): subclasses set them as attributes or properties.
    """

    provide_data: list[DataDesc] | None = None
    provide_label: list[DataDesc] | None = None

    def __init__(self, batch_size: int = 0) -> None:
        self.batch_size = batch_size

    def __iter__(self) -> DataIter:
        return self

    def reset(self) -> None:
        """Go back to the start of the data."""

    def next(self) -> DataBatch:
        """The next batch.

        Raises:
            StopIteration: the epoch's data is used up.
        """
        if self.iter_next():
            return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=self.getindex())
        raise StopIteration

    def __next__(self) -> DataBatch:
        return self.next()

    def iter_next(self) -> bool:
        """Move to the next batch; False when there is none."""
        return False

    def getdata(self) -> list[Tensor] | None:
        """The current batch's data."""
        return None

    def getlabel(self) -> list[Tensor] | None:
        """The current batch's labels."""
        return None

    def getindex(self) -> Any:
        """The current batch's example indices, or None."""
        return None

    def getpad(self) -> int | None:
        """How many examples of the current batch are padding."""
        return None


# -- NDArrayIter ---------------------------------------------------------------------------------------------------
def _host(name: str, value: Any) -> np.ndarray:
    """One input as a host array: a Tensor keeps its dtype; anything else becomes float32, as MXNet's ``array``."""
    if isinstance(value, Tensor):
        arr = value.asnumpy()
    else:
        try:
            arr = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise TypeError(f"NDArrayIter: invalid type {type(value).__name__} for {name!r}: give an mxlite array "
                            "(Tensor), a NumPy array or a nested list of numbers") from None
    if arr.ndim == 0:
        raise ValueError(f"NDArrayIter: {name!r} is a scalar; arrays need a first axis of examples")
    return arr


def _named_arrays(data: Any, default_name: str, allow_empty: bool) -> list[tuple[str, np.ndarray]]:
    """MXNet's canonical form: ``(name, array)`` pairs sorted by name. One array is named ``default_name``; a list
    of several ``_0_<default_name>``, ``_1_<default_name>``, ...; a dict keeps its keys."""
    if data is None:
        data = []
    if isinstance(data, (np.ndarray, Tensor)):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not data and not allow_empty:
            raise ValueError("NDArrayIter: data must hold at least one array, got an empty list")
        data = {default_name: data[0]} if len(data) == 1 else {f"_{i}_{default_name}": d for i, d in enumerate(data)}
    if not isinstance(data, Mapping):
        raise TypeError(f"NDArrayIter: {default_name} must be an array, a list of arrays or a dict of name to array, "
                        f"got {type(data).__name__}")
    return sorted((str(name), _host(str(name), value)) for name, value in data.items())


class NDArrayIter(DataIter):
    """Batches of in-memory arrays (MXNet's ``mx.io.NDArrayIter``), with MXNet's batching, shuffling and last
    batch handling.

    Args:
        data: an array (mxlite Tensor or NumPy array), a list of arrays or a dict of name to array; the first axis
            indexes examples. Named as in MXNet: one array ``data_name``, a list ``_0_<data_name>``,
            ``_1_<data_name>``, ...; batches list the arrays sorted by name.
        label: the same for labels (named from ``label_name``), or None.
        batch_size: examples per batch (>= 1).
        shuffle: shuffle the examples at construction and at every ``reset()``, with NumPy's global random
            generator (``np.random.seed`` makes it repeatable; the same permutations as MXNet's).
        last_batch_handle: what to do with a last batch of fewer than ``batch_size`` examples:
            ``'pad'`` fills it up with examples from the start of the data (``batch.pad`` says how many);
            ``'discard'`` drops it; ``'roll_over'`` stops the epoch before it and starts the next epoch's first
            batch with its examples (``batch.pad`` of that batch counts them).
        data_name, label_name: the names above (defaults ``'data'`` and ``'softmax_label'``).

    Inputs that are not Tensors become float32, as MXNet's ``mx.nd.array`` makes them; Tensors keep their dtype
    (MXNet re-casts shuffled NDArrays to float32; mxlite does not). Batches are Tensors on ``cpu(0)``.

    Raises:
        ValueError: ``batch_size`` < 1, an unknown ``last_batch_handle``, no data, or arrays whose numbers of
            examples differ (MXNet silently slices longer ones).
        TypeError: an input of another type.
    """

    def __init__(self, data: Any, label: Any = None, batch_size: int = 1, shuffle: bool = False,
                 last_batch_handle: str = "pad", data_name: str = "data", label_name: str = "softmax_label") -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"NDArrayIter: batch_size must be an integer >= 1, got {batch_size!r}")
        if last_batch_handle not in _LAST_BATCH:
            raise ValueError(f"NDArrayIter: last_batch_handle must be one of {_LAST_BATCH}, got {last_batch_handle!r}")
        super().__init__(int(batch_size))
        self.data = _named_arrays(data, data_name, allow_empty=False)
        self.label = _named_arrays(label, label_name, allow_empty=True)
        sizes = {name: len(arr) for name, arr in self.data + self.label}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"NDArrayIter: every array must hold the same number of examples (first axis), got "
                             f"{sizes}")
        self.idx = np.arange(len(self.data[0][1]))
        self.num_data = len(self.idx)
        self.shuffle = shuffle
        self.last_batch_handle = last_batch_handle
        self.cursor = -self.batch_size
        self._cache: dict[str, list[np.ndarray] | None] = {"data": None, "label": None}  # roll_over's carry
        self.reset()
        self.data_list = [arr for _, arr in self.data + self.label]
        self.num_source = len(self.data_list)

    @property
    def provide_data(self) -> list[DataDesc]:  # type: ignore[override]
        """Name, batch shape and dtype of each data array."""
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype) for k, v in self.data]

    @property
    def provide_label(self) -> list[DataDesc]:  # type: ignore[override]
        """Name, batch shape and dtype of each label array."""
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype) for k, v in self.label]

    def hard_reset(self) -> None:
        """Back to the start, dropping any examples ``'roll_over'`` carries (reshuffles with ``shuffle``)."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache = {"data": None, "label": None}

    def reset(self) -> None:
        """Back to the start (reshuffles with ``shuffle``). With ``'roll_over'``, after an epoch that stopped
        before an incomplete last batch, the next epoch's first batch begins with that batch's examples."""
        if self.shuffle:
            self._shuffle_data()
        if self.last_batch_handle == "roll_over" and self.num_data - self.batch_size < self.cursor < self.num_data:
            # cursor - num_data (< 0) examples of the old epoch are carried: the first batch takes the rest anew.
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def iter_next(self) -> bool:
        """Advance the cursor by one batch; False past the end of the data."""
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self) -> DataBatch:
        """The next batch; an incomplete last batch ends the epoch under ``'roll_over'`` (and is carried over).

        Raises:
            StopIteration: the end of the epoch.
        """
        if not self.iter_next():
            raise StopIteration
        data, label = self._batchify(self.data, "data"), self._batchify(self.label, "label")
        if data[0].shape[0] != self.batch_size:  # only 'roll_over' (and 'discard') leave an incomplete batch
            self._cache = {"data": data, "label": label}
            raise StopIteration
        return DataBatch(data=_tensors(data), label=_tensors(label), pad=self.getpad(), index=None)

    def getdata(self) -> list[Tensor]:
        """The current batch's data arrays (Tensors on cpu(0))."""
        return _tensors(self._batchify(self.data, "data"))

    def getlabel(self) -> list[Tensor]:
        """The current batch's label arrays (Tensors on cpu(0))."""
        return _tensors(self._batchify(self.label, "label"))

    def getpad(self) -> int:
        """Padding examples in the current batch: the filled-up ones under ``'pad'``; under ``'roll_over'`` the
        carried ones in an epoch's first batch; else 0."""
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            return -self.cursor
        return 0

    def _batchify(self, source: list[tuple[str, np.ndarray]], which: str) -> list[np.ndarray]:
        """The current batch of each array of ``source`` (host arrays)."""
        if self.cursor >= self.num_data:
            raise RuntimeError("NDArrayIter: the data is used up; call reset() to start the next epoch")
        start, end = self.cursor, self.cursor + self.batch_size
        arrays = [arr for _, arr in source]
        if self.last_batch_handle == "roll_over" and start < 0:  # an epoch's first batch after a carry
            carried = self._cache[which]
            if carried is None:
                raise RuntimeError("NDArrayIter: the first batch of this epoch continues the last one, but nothing "
                                   "was carried over: read the previous epoch with next() (or call hard_reset())")
            self._cache[which] = None
            return [np.concatenate([c, arr[:end]]) for c, arr in zip(carried, arrays)]
        if self.last_batch_handle == "pad" and end > self.num_data:  # fill up from the start, wrapping round
            pad = end - self.num_data
            reps, rest = divmod(pad, self.num_data)
            return [np.concatenate([arr[start:]] + [arr] * reps + [arr[:rest]]) for arr in arrays]
        return [arr[start:min(end, self.num_data)] for arr in arrays]

    def _shuffle_data(self) -> None:
        # As MXNet: the index permutation is shuffled in place and the arrays reordered by it, both cumulatively.
        np.random.shuffle(self.idx)
        self.data = [(k, v[self.idx]) for k, v in self.data]
        self.label = [(k, v[self.idx]) for k, v in self.label]


def _tensors(arrays: list[np.ndarray]) -> list[Tensor]:
    return [_array(arr, cpu(0)) for arr in arrays]


# -- iterators over another iterator's batches ---------------------------------------------------------------------
class _CurrentBatch(DataIter):
    """The getters of an iterator whose ``iter_next`` stores a whole :class:`DataBatch` in ``current_batch``."""

    current_batch: DataBatch | None = None

    def getdata(self) -> list[Tensor] | None:
        """The current batch's data."""
        return self.current_batch.data

    def getlabel(self) -> list[Tensor] | None:
        """The current batch's labels."""
        return self.current_batch.label

    def getindex(self) -> Any:
        """The current batch's example indices, or None."""
        return self.current_batch.index

    def getpad(self) -> int | None:
        """How many examples of the current batch are padding."""
        return self.current_batch.pad


class ResizeIter(_CurrentBatch):
    """An iterator cut or stretched to ``size`` batches per epoch (MXNet's ``mx.io.ResizeIter``): the wrapped one
    is reset and read again when it ends early.

    Args:
        data_iter: the DataIter to resize.
        size: batches per epoch.
        reset_internal: also reset ``data_iter`` at each ``reset()`` (else the next epoch goes on where this one
            stopped).
    """

    def __init__(self, data_iter: DataIter, size: int, reset_internal: bool = True) -> None:
        super().__init__()
        self.data_iter = data_iter
        self.size = size
        self.reset_internal = reset_internal
        self.cur = 0
        self.current_batch: DataBatch | None = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        self.batch_size = data_iter.batch_size
        if hasattr(data_iter, "default_bucket_key"):
            self.default_bucket_key = data_iter.default_bucket_key

    def reset(self) -> None:
        """Start a new epoch of ``size`` batches."""
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self) -> bool:
        """Fetch the next batch, restarting the wrapped iterator when it ends; False after ``size`` batches."""
        if self.cur == self.size:
            return False
        try:
            self.current_batch = next(self.data_iter)
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = next(self.data_iter)
        self.cur += 1
        return True


# -- PrefetchingIter -----------------------------------------------------------------------------------------------
_FETCH, _STOP = "fetch", "stop"
_POLL_S = 0.1  # how often a wait for a prefetched batch checks that its thread is still alive
_JOIN_TIMEOUT_S = 5.0  # how long close() waits for a thread still inside its iterator's next() (it is a daemon)


def _fetch_loop(it: Any, requests: queue.SimpleQueue, results: queue.SimpleQueue) -> None:
    """A prefetching thread: one batch of ``it`` per request; (True, batch or None at the end) or (False, error).
    It holds no reference to its PrefetchingIter, so dropping that stops the thread."""
    while requests.get() != _STOP:
        try:
            results.put((True, next(it)))
        except StopIteration:
            results.put((True, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
            results.put((False, exc))


class _Prefetcher:
    """One iterator's thread, its request and result queues, and whether a request is outstanding."""

    def __init__(self, it: Any, number: int) -> None:
        self.number = number
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.pending = False
        self.thread = threading.Thread(target=_fetch_loop, args=(it, self.requests, self.results), daemon=True,
                                       name=f"mxlite-io-prefetch-{number}")
        self.thread.start()

    def request(self) -> None:
        if not self.pending:
            self.requests.put(_FETCH)
            self.pending = True

    def take(self) -> tuple[bool, Any]:
        """The outstanding request's result (requesting one first if none is outstanding)."""
        self.request()
        while True:
            try:
                result = self.results.get(timeout=_POLL_S)
                self.pending = False
                return result
            except queue.Empty:
                if not self.thread.is_alive():
                    raise RuntimeError(f"PrefetchingIter: the thread prefetching iterator {self.number} has "
                                       "stopped") from None


def _stop_threads(prefetchers: list[_Prefetcher]) -> None:
    for p in prefetchers:
        p.requests.put(_STOP)


class PrefetchingIter(_CurrentBatch):
    """Reads one batch ahead of the consumer, in a background thread per iterator (MXNet's
    ``mx.io.PrefetchingIter``); with several iterators each batch joins their data and labels.

    Args:
        iters: a DataIter or a list of them; they must end at the same batch and pad alike.
        rename_data, rename_label: None, or one dict per iterator mapping its ``provide_data``
            (``provide_label``) names to new ones.

    The threads are daemons and hold no reference to this object: they never keep the program from exiting,
    and they end when this object is garbage-collected or :meth:`close` is called. An exception raised by an
    iterator's ``next()`` in its thread is raised again by the ``next()`` that would have returned that batch.

    Raises:
        ValueError: no iterators; iterators that end at different batches or pad differently.
    """

    def __init__(self, iters: DataIter | list[DataIter], rename_data: list[dict[str, str]] | None = None,
                 rename_label: list[dict[str, str]] | None = None) -> None:
        super().__init__()
        if not isinstance(iters, list):
            iters = [iters]
        if not iters:
            raise ValueError("PrefetchingIter: iters must hold at least one DataIter, got an empty list")
        self.n_iter = len(iters)
        self.iters = iters
        self.rename_data = rename_data
        self.rename_label = rename_label
        self.batch_size = self.provide_data[0][1][0]
        self.current_batch: DataBatch | None = None
        self._exhausted = False
        self._closed = False
        self._prefetchers = [_Prefetcher(it, i) for i, it in enumerate(iters)]
        self._finalizer = weakref.finalize(self, _stop_threads, self._prefetchers)
        for p in self._prefetchers:
            p.request()

    @staticmethod
    def _renamed(descs: list[Any], renames: list[dict[str, str]] | None, i: int) -> list[Any]:
        if renames is None:
            return list(descs)
        out = []
        for d in descs:
            if isinstance(d, DataDesc):
                out.append(DataDesc(renames[i][d.name], d.shape, d.dtype, d.layout))
            else:
                out.append(DataDesc(renames[i][d[0]], d[1]))
        return out

    @property
    def provide_data(self) -> list[Any]:  # type: ignore[override]
        """Every iterator's ``provide_data``, renamed by ``rename_data``, in order."""
        return sum((self._renamed(it.provide_data, self.rename_data, i) for i, it in enumerate(self.iters)), [])

    @property
    def provide_label(self) -> list[Any]:  # type: ignore[override]
        """Every iterator's ``provide_label``, renamed by ``rename_label``, in order."""
        return sum((self._renamed(it.provide_label, self.rename_label, i) for i, it in enumerate(self.iters)), [])

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("PrefetchingIter: the iterator is closed; create a new one")

    def reset(self) -> None:
        """Drop the batch read ahead, reset every iterator and start reading ahead again."""
        self._check_open()
        for p in self._prefetchers:
            if p.pending:
                p.take()  # what was read ahead belongs to the old epoch, an error included
        for it in self.iters:
            it.reset()
        self._exhausted = False
        for p in self._prefetchers:
            p.request()

    def iter_next(self) -> bool:
        """Take the batch read ahead (waiting for it) and start reading the next; False at the end.

        Raises:
            Exception: whatever an iterator's ``next()`` raised in its thread.
            ValueError: the iterators ended at different batches, or their batches' pads differ.
        """
        self._check_open()
        if self._exhausted:
            return False
        results = [p.take() for p in self._prefetchers]
        for ok, value in results:
            if not ok:
                raise value
        batches = [value for _, value in results]
        ended = [b is None for b in batches]
        if all(ended):
            self._exhausted = True
            return False
        if any(ended):
            raise ValueError(f"PrefetchingIter: the iterators ended at different batches (ended: {ended}); give "
                             "iterators with the same number of batches")
        pads = [b.pad for b in batches]
        if len(set(pads)) > 1:
            raise ValueError(f"PrefetchingIter: the iterators' batches are padded differently ({pads}); give "
                             "iterators over the same number of examples")
        self.current_batch = DataBatch(sum((list(b.data) for b in batches), []),
                                       sum((list(b.label or []) for b in batches), []), pads[0], batches[0].index,
                                       provide_data=self.provide_data, provide_label=self.provide_label)
        for p in self._prefetchers:
            p.request()
        return True

    def next(self) -> DataBatch:
        """The next joined batch.

        Raises:
            StopIteration: the end of the epoch.
        """
        if self.iter_next():
            return self.current_batch
        raise StopIteration

    def close(self) -> None:
        """Stop the threads (waiting up to a few seconds for one still inside its iterator's ``next()``).
        Not in MXNet; dropping the object does the same without waiting."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()
        for p in self._prefetchers:
            p.thread.join(_JOIN_TIMEOUT_S)
