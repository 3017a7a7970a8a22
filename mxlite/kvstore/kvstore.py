"""KVStore: MXNet's key-value store for synchronising values over devices and processes.

Purpose: a store of named arrays. ``push`` sums the values given for a key (from several devices,
and with a ``dist_*`` type from every process) and either stores the sum or hands it to an
updater that changes the stored value (an optimizer step); ``pull`` copies the stored value out.

Prerequisites: none for the single-process types; the ``dist_*`` types need mpi4py and every
process started by an MPI launcher (``mpiexec -n N`` or ``mxlite launch -n N``). Run alone, such a
process is a world of size 1.

Minimal example::

    kv = mx.kv.create('local')
    kv.init(3, mx.ones((2, 3)))
    kv.push(3, [mx.ones((2, 3), device=mx.cpu(i)) for i in range(4)])
    out = mx.zeros((2, 3))
    kv.pull(3, out=out)                       # out is 4 everywhere
    kv._set_updater(lambda key, grad, stored: stored.__iadd__(2 * grad))
    kv.push(3, mx.ones((2, 3)))               # stored = 4 + 2 * 1 = 6

Behaviour:

* Types. ``'local'``: values are stored and summed on the CPU (``cpu(0)``). ``'device'``: a
  key's value is stored, summed and updated on the device of the value it was initialised with.
  ``'nccl'``: as ``'device'``, for GPU values only, and reduce-only (no optimizer or updater;
  mxlite's choice: it is the type for all-reduce without a store-side update).
  ``'dist_sync'``: as ``'local'``, and the sum also runs over every process;
  ``'dist_sync_device'`` (alias ``'dist_device_sync'``): as ``'device'`` over every process.
  ``'teststore'`` (MXNet's store for trying a Trainer without optimizer support): as ``'local'``,
  reduce-only.
  Processes exchange through ``mxlite.comm.create(type, [device])``: MPI for CPU values, NCCL
  for GPU values when CuPy has it.
* Keys are ints or strs, never both in one store. An updater receives the key as given
  (``updater(key, summed, stored)``), so an optimizer's index is the key.
* ``push`` of a list of values sums them in list order on the stored value's device, then (dist)
  over processes; the order is fixed, so repeated runs and every rank get the same bits.
  Without an updater the stored value becomes the sum; with one, the updater changes the stored
  value in place. Row-sparse values (:class:`~mxlite.ops.sparse.RowSparseTensor`) are summed as
  row-sparse and exchanged across processes by gathering their rows.
* ``init`` with a ``dist_*`` type keeps rank 0's value on every rank (MXNet's rule), and every
  rank applies the same update to its own copy of each value: with identical sums the copies
  stay identical, so no parameter server is needed.
* Everything is synchronous: ``priority`` is accepted and ignored.
* With gradient compression (``set_gradient_compression``), dense pushes go through the codec
  (``mxlite.comm.compression``); each pushed position keeps a float32 residual (error feedback)
  on its value's device, saved with the optimizer states. Row-sparse pushes are not compressed.

Warnings:

* With ``dist_*`` types every process must call ``init``, ``push``, ``pushpull``, ``broadcast``
  and ``barrier`` for the same keys in the same order (they are collectives); shapes are not
  compared across processes.
* Stored values are copies: changing a Tensor after ``init`` or ``push`` does not change the store.
* ``Tensor`` has no in-place operators; the stored value handed to an updater has them
  (``stored += 2 * grad`` works there, as in MXNet's examples).
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import comm as _comm
from ..autograd.tensor import Tensor
from ..comm.agree import check_same_across_ranks
from ..comm.base import Communicator
from ..comm.mpi import local_rank_and_size, mpi_module, timed_barrier
from ..device import Device, cpu
from ..device.copy import copy_between
from ..formats.archive import atomic_write
from ..ops import sparse
from ..optimizer import states_archive
from ..optimizer.optimizer import Optimizer
from ..optimizer.updater import Updater, get_updater
from . import _reduce

__all__ = ["KVStore", "create", "TYPES"]

TYPES = ("local", "device", "nccl", "dist_sync", "dist_sync_device", "dist_device_sync")
# MXNet's older names of the single-process types: the store they describe behaves as the one named.
ALIASES = {"local_allreduce_cpu": "local", "local_update_cpu": "local", "local_allreduce_device": "device",
           "teststore": "local"}  # MXNet's reduce-only store for tests: 'local' without optimizer support
_HOST_TYPES = ("local", "dist_sync")  # store and sum on cpu(0); the others on the value's device

Key = Any  # int or str
Value = Any  # Tensor or RowSparseTensor


def _check_type(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"kvstore type must be a str, got {type(name).__name__}: {name!r}")
    kind = ALIASES.get(name.lower(), name.lower())
    if kind == "dist_async":
        raise ValueError("kvstore 'dist_async' updates values asynchronously on a parameter server; mxlite has no "
                         "parameter server: use 'dist_sync' (synchronous sums over MPI processes)")
    if kind not in TYPES:
        raise ValueError(f"unknown kvstore type {name!r}; known: {', '.join(TYPES + tuple(ALIASES))}")
    return kind


def create(name: str = "local") -> KVStore:
    """A new :class:`KVStore` of type ``name`` (case-insensitive; see the module docstring).

    MXNet's older names are accepted: 'local_allreduce_cpu' and 'local_update_cpu' give a
    'local' store, 'local_allreduce_device' a 'device' store (``type`` reports that name);
    'teststore' gives a reduce-only 'local' store, as MXNet's ``TestStore``.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: an unknown type, or 'dist_async' (mxlite has no parameter server).
        RuntimeError: a ``dist_*`` type without mpi4py.
    """
    return KVStore(name)


class _Stored(Tensor):
    """A stored value: a Tensor with in-place arithmetic, so MXNet-style updaters can write ``stored += g``."""

    __slots__ = ()

    def _inplace(self, op: str, other: Any) -> _Stored:
        if isinstance(other, sparse.RowSparseTensor):  # a row-sparse pushed sum: its dense value
            other = Tensor(other.dense_array(), other.device)
        if isinstance(other, Tensor):
            other = copy_between(other.array, other.device, self.device, copy=False)
        elif isinstance(other, np.ndarray) and self.device.is_gpu:
            other = copy_between(other, cpu(0), self.device, copy=False)
        with self.device.use():
            getattr(self.array, op)(other)
        return self

    def __iadd__(self, other: Any) -> _Stored:
        return self._inplace("__iadd__", other)

    def __isub__(self, other: Any) -> _Stored:
        return self._inplace("__isub__", other)

    def __imul__(self, other: Any) -> _Stored:
        return self._inplace("__imul__", other)

    def __itruediv__(self, other: Any) -> _Stored:
        return self._inplace("__itruediv__", other)


def _describe(v: Any) -> str:
    kind = "row-sparse " if isinstance(v, sparse.RowSparseTensor) else ""
    return f"{kind}{np.dtype(v.dtype).name}{tuple(v.shape)} on {v.device}"


class KVStore:
    """A key-value store over this process's devices and, for ``dist_*`` types, over processes.

    Build it with :func:`create`. See the module docstring for the behaviour of each type.

    Args:
        kvstore_type: 'local', 'device', 'nccl', 'dist_sync', 'dist_sync_device' or
            'dist_device_sync' (case-insensitive).

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`create`.
    """

    OPTIMIZER = "optimizer"

    def __init__(self, kvstore_type: str = "local") -> None:
        self._type = _check_type(kvstore_type)  # the canonical kind: an alias behaves as the store it names
        self._name = kvstore_type.lower()
        self._dist = self._type.startswith("dist")
        self._store: dict[Key, _Stored] = {}
        self._key_kind: type | None = None
        self._updater: Callable[[Key, Any, Any], None] | None = None
        self._codec: Any = None
        self._compression_params: Any = None
        self._residuals: dict[tuple[Key, int], Tensor] = {}
        self._comms: dict[Device, Communicator] = {}
        self._world: Any = None
        self._rank, self._size = 0, 1
        self._local_rank = 0
        if self._dist:
            self._world = mpi_module().COMM_WORLD
            self._rank, self._size = self._world.Get_rank(), self._world.Get_size()
            self._local_rank = local_rank_and_size()[0]  # every rank creates its store: a safe collective

    def __repr__(self) -> str:
        return f"KVStore(type={self._type!r}, keys={len(self._store)}, rank={self._rank}, num_workers={self._size})"

    # -- attributes -----------------------------------------------------------------------
    @property
    def type(self) -> str:
        """The store's type, as given to :func:`create` (lower-cased; an alias stays the alias, as in MXNet)."""
        return self._name

    @property
    def kind(self) -> str:
        """The canonical kind behind :attr:`type`: an alias (``'dist_sync_device'`` ...) names the store it acts as."""
        return self._type

    @property
    def rank(self) -> int:
        """This process's rank in ``[0, num_workers)`` (0 for the single-process types)."""
        return self._rank

    @property
    def local_rank(self) -> int:
        """This process's rank among the processes on its node (0 for the single-process types).

        From MPI's shared-memory split of ``COMM_WORLD`` (not launcher variables); a process trains
        on ``mx.gpu(kv.local_rank)``, which is what ``mx.gpu_devices()`` returns under MPI.
        """
        return self._local_rank

    @property
    def num_workers(self) -> int:
        """How many processes take part in the sums (1 for the single-process types)."""
        return self._size

    def barrier(self) -> None:
        """Return when every process has called ``barrier`` (at once for the single-process types)."""
        if self._world is not None:
            timed_barrier(self._world, "KVStore.barrier")  # honours MXLITE_COLLECTIVE_TIMEOUT

    _barrier = barrier  # MXNet's name

    def is_capable(self, capability: str) -> bool:
        """Whether this store supports ``capability``; only ``KVStore.OPTIMIZER`` is known.

        'nccl' and 'teststore' stores are reduce-only (False); every other type updates with an optimizer.

        Raises:
            TypeError: ``capability`` is not a str.
            ValueError: an unknown capability.
        """
        if not isinstance(capability, str):
            raise TypeError(f"capability must be a str, got {type(capability).__name__}: {capability!r}")
        if capability.lower() == KVStore.OPTIMIZER:
            return self._type != "nccl" and self._name != "teststore"
        raise ValueError(f"unknown capability {capability!r}; known: {KVStore.OPTIMIZER!r}")

    # -- argument handling ----------------------------------------------------------------
    def _keys_kind(self, keys: Sequence[Any], what: str) -> list[Key]:
        """Normalised keys (NumPy ints become ints), all of one kind and of the store's kind."""
        out = []
        kind = self._key_kind
        for key in keys:
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer, str)):
                raise TypeError(f"{what}: key {key!r} must be an int or a str, got {type(key).__name__}")
            key = int(key) if isinstance(key, np.integer) else key
            this = str if isinstance(key, str) else int
            if kind is None:
                kind = this
            elif this is not kind:
                whose = "this store's keys" if self._key_kind is not None else "the other keys given"
                article = "an" if this is int else "a"
                raise ValueError(f"{what}: key {key!r} is {article} {this.__name__} but {whose} are {kind.__name__}s; "
                                 "int and str keys cannot be mixed in one KVStore")
            out.append(key)
        return out

    def _pairs(self, key: Any, value: Any, what: str, name: str = "value") -> list[tuple[Key, list[Any]]]:
        """``[(key, [value, ...]), ...]`` from a key and a value (or list), or lists of both."""
        if isinstance(key, (list, tuple)):
            keys = self._keys_kind(key, what)
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"{what}: {len(keys)} keys {keys} need a list of {name}s, got {type(value).__name__}")
            if len(value) != len(keys):
                raise ValueError(f"{what}: {len(keys)} keys {keys} but {len(value)} {name}s; give one per key")
            return [(k, self._as_list(k, v, what, name)) for k, v in zip(keys, value)]
        (k,) = self._keys_kind([key], what)
        return [(k, self._as_list(k, value, what, name))]

    @staticmethod
    def _as_list(key: Key, value: Any, what: str, name: str) -> list[Any]:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if not items:
            raise ValueError(f"{what}: key {key!r} got an empty list of {name}s")
        for i, v in enumerate(items):
            if not isinstance(v, (Tensor, sparse.RowSparseTensor)):
                raise TypeError(f"{what}: key {key!r}: {name} {i} is a {type(v).__name__}, expected a Tensor or a "
                                "RowSparseTensor")
        return items

    def _stored(self, key: Key, what: str) -> _Stored:
        stored = self._store.get(key)
        if stored is None:
            raise ValueError(f"{what}: key {key!r} has not been initialised; call init({key!r}, value) first")
        return stored

    def _check_like(self, key: Key, items: Sequence[Any], stored: Tensor, what: str, name: str) -> None:
        for i, v in enumerate(items):
            if tuple(v.shape) != stored.shape or np.dtype(v.dtype) != stored.dtype:
                where = f"{name} {i}" if len(items) > 1 else name
                raise ValueError(f"{what}: key {key!r}: {where} is {_describe(v)}, the stored value is "
                                 f"{_describe(stored)}; shapes and dtypes must match")

    def _check_gpu(self, key: Key, items: Sequence[Any], what: str) -> None:
        if self._type != "nccl":
            return
        for v in items:
            if not v.device.is_gpu:
                raise ValueError(f"{what}: kvstore 'nccl' holds GPU values only; key {key!r} got a value on "
                                 f"{v.device}; use 'device' or 'local' for CPU values")

    def _home(self, value: Value) -> Device:
        return cpu(0) if self._type in _HOST_TYPES else value.device

    def _comm(self, device: Device) -> Communicator:
        """The communicator over every process for values on ``device`` (created on first use)."""
        comm = self._comms.get(device)
        if comm is None:
            comm = self._comms[device] = _comm.create(self._type, [device])
        return comm

    # -- init -----------------------------------------------------------------------------
    def init(self, key: Any, value: Any) -> None:
        """Store a copy of ``value`` under ``key`` (or of each value under each key of a list).

        A row-sparse value is stored dense (its missing rows are zero). With a ``dist_*`` type
        every rank keeps rank 0's value.

        Raises:
            TypeError: a key that is not an int or str, or a value that is not a Tensor or
                RowSparseTensor.
            ValueError: a key already initialised (or given twice), int and str keys mixed,
                a list value for one key, key and value lists of different lengths, or a CPU
                value for 'nccl'. Nothing is stored unless every pair is valid.
        """
        pairs = self._pairs(key, value, "init")
        seen: set[Key] = set()
        for k, items in pairs:
            if len(items) != 1:
                raise ValueError(f"init: key {k!r} takes one value, got a list of {len(items)}")
            if k in self._store or k in seen:
                raise ValueError(f"init: duplicate init of key {k!r}")
            seen.add(k)
            self._check_gpu(k, items, "init")
        if self._dist:
            self._check_ranks_agree(pairs)
        for k, (v,) in pairs:
            home = self._home(v)
            if isinstance(v, sparse.RowSparseTensor):
                data = copy_between(v.dense_array(), v.device, home, copy=False)
            else:
                data = _reduce.copy_to(v, home)
            stored = _Stored(data, home)
            if self._dist:
                self._comm(home).broadcast([stored.array], root=0)
            self._store[k] = stored
            if self._key_kind is None:
                self._key_kind = type(k)

    def overwrite(self, key: Key, value: Tensor) -> None:
        """Replace the stored value of an initialised ``key`` by a copy of ``value`` (same shape and dtype).

        For the Trainer, whose weights may change outside the store (a checkpoint loaded,
        ``set_data``): MXNet resets its store then; overwriting keeps the optimizer states.
        """
        stored = self._store[key]
        with stored.device.use():
            stored.array[...] = _reduce.copy_to(value, stored.device)

    def _check_ranks_agree(self, pairs: list[tuple[Key, list[Any]]]) -> None:
        """Every rank must init the same keys with the same shapes and dtypes (ValueError naming the ranks)."""
        by_device: dict[Device, list[tuple[str, Any]]] = {}
        for k, (v,) in pairs:
            by_device.setdefault(self._home(v), []).append(
                (repr(k), {"shape": list(v.shape), "dtype": np.dtype(v.dtype).name}))
        for device, entries in by_device.items():
            check_same_across_ranks(self._comm(device), "the keys given to KVStore.init", entries)

    # -- push -----------------------------------------------------------------------------
    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Sum the values pushed for each key into the store (or through the updater).

        ``value`` is a Tensor or RowSparseTensor, or a list of them (summed in list order; they
        may sit on any devices); with a list of keys, a list with one such entry per key. A key
        listed twice gets its values concatenated, as MXNet groups them.

        Raises:
            TypeError: a bad key or value type.
            ValueError: an uninitialised key, a value whose shape or dtype differs from the
                stored one, dense and row-sparse values mixed for one key, list lengths that
                disagree, or a CPU value for 'nccl'. Nothing changes unless every pair is valid.
        """
        groups: dict[Key, list[Any]] = {}
        for k, items in self._pairs(key, value, "push"):
            groups.setdefault(k, []).extend(items)
        for k, items in groups.items():
            self._check_like(k, items, self._stored(k, "push"), "push", "value")
            self._check_gpu(k, items, "push")
            kinds = {isinstance(v, sparse.RowSparseTensor) for v in items}
            if len(kinds) > 1:
                raise ValueError(f"push: key {k!r} got dense and row-sparse values in one push; convert them "
                                 "to one storage type (tostype('default') or tostype('row_sparse'))")
        for k, items in groups.items():
            self._apply(k, self._reduce(k, items))

    def _reduce(self, key: Key, items: list[Any]) -> Any:
        """The sum of ``items`` over the list and (dist) over processes, on the stored value's device."""
        stored = self._store[key]
        home = stored.device
        comm = self._comm(home) if self._dist else None
        if isinstance(items[0], sparse.RowSparseTensor):
            total = _reduce.row_sparse_sum(items, home)
            return _reduce.allgather_row_sparse(comm, total) if comm is not None else total
        if self._codec is not None:
            return self._compressed_sum(key, items, home, comm)
        total = _reduce.dense_sum(items, home)
        if comm is not None:
            comm.allreduce([total]).wait()
        return Tensor(total, home)

    def _compressed_sum(self, key: Key, items: list[Tensor], home: Device, comm: Communicator | None) -> Tensor:
        # Buffer flow: each value (flattened, on its own device) and its residual go to the codec,
        # which compresses, exchanges (comm), decompresses and sums into `out` on the home device.
        grads, residuals = [], []
        for pos, v in enumerate(items):
            with v.device.use():
                grads.append(v.device.xp.ascontiguousarray(v.array).reshape(-1))
            residuals.append(self._residual(key, pos, v).array.reshape(-1) if self._codec.needs_residual else None)
        with home.use():
            out = home.xp.empty(items[0].size, dtype=items[0].dtype)
        self._codec.reduce(grads, residuals, out, comm)
        return Tensor(out.reshape(items[0].shape), home)

    def _residual(self, key: Key, pos: int, value: Tensor) -> Tensor:
        """The float32 residual of ``key`` at push position ``pos``, on ``value``'s device."""
        res = self._residuals.get((key, pos))
        if res is None:
            with value.device.use():
                res = Tensor(value.device.xp.zeros(value.shape, np.float32), value.device)
        elif res.shape != value.shape:
            raise ValueError(f"push: key {key!r}: the residual of position {pos} has shape {res.shape}, the value "
                             f"has shape {value.shape}")
        elif res.device != value.device:
            res = Tensor(_reduce.copy_to(res, value.device), value.device)
        self._residuals[(key, pos)] = res
        return res

    def _apply(self, key: Key, merged: Any) -> None:
        stored = self._store[key]
        if self._updater is not None:
            self._updater(key, merged, stored)
            return
        with stored.device.use():
            if isinstance(merged, sparse.RowSparseTensor):
                stored.array[...] = merged.dense_array()
            else:
                stored.array[...] = merged.array

    # -- pull -----------------------------------------------------------------------------
    def _pull_plan(self, key: Any, out: Any, what: str) -> list[tuple[Key, list[Any]]]:
        if out is None:
            raise ValueError(f"{what}: key {key!r}: out is required (a Tensor or a list of Tensors)")
        pairs = self._pairs(key, out, what, name="out")
        for k, outs in pairs:
            self._check_like(k, outs, self._stored(k, what), what, "out")
        return pairs

    def _copy_out(self, pairs: list[tuple[Key, list[Any]]], ignore_sparse: bool, what: str) -> None:
        for k, outs in pairs:
            stored = self._store[k]
            for o in outs:
                if isinstance(o, sparse.RowSparseTensor):
                    if ignore_sparse:
                        warnings.warn(f"{what}: key {k!r}: a row-sparse out is skipped (ignore_sparse=True); use "
                                      "row_sparse_pull with row_ids", UserWarning, stacklevel=3)
                        continue
                    rows = np.arange(stored.shape[0], dtype=np.int64)
                    self._fill_rows(stored, o, rows)
                else:
                    o[...] = stored

    def pull(self, key: Any, out: Any = None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Copy each key's stored value into ``out`` (a Tensor or a list of them, on any devices).

        A row-sparse ``out`` is skipped with a warning when ``ignore_sparse`` (MXNet's rule:
        use :meth:`row_sparse_pull`); otherwise it receives every row.

        Raises:
            TypeError: a bad key or out type.
            ValueError: ``out`` missing, an uninitialised key, an out whose shape or dtype
                differs from the stored value, or list lengths that disagree. Nothing is
                written unless every pair is valid.
        """
        self._copy_out(self._pull_plan(key, out, "pull"), ignore_sparse, "pull")

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """:meth:`push` ``value``, then :meth:`pull` into ``out`` (into ``value`` when ``out`` is None).

        Raises:
            TypeError, ValueError: as :meth:`push` and :meth:`pull`, all checked before the push.
        """
        plan = self._pull_plan(key, value if out is None else out, "pushpull")
        self.push(key, value, priority)
        self._copy_out(plan, True, "pushpull")

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        """:meth:`init` each key with ``value`` (rank 0's, with ``dist_*`` types), then :meth:`pull` into ``out``.

        As in MXNet, a key can be broadcast once (it is initialised by the call).

        Raises:
            TypeError, ValueError: as :meth:`init` and :meth:`pull`, all checked before the init.
        """
        values = dict(self._pairs(key, value, "broadcast"))
        outs = self._pairs(key, out, "broadcast", name="out")
        for k, items in outs:
            if len(values[k]) == 1:
                self._check_like(k, items, values[k][0], "broadcast", "out")
        self.init(key, value)
        self._copy_out(outs, True, "broadcast")

    # -- row-sparse pull ------------------------------------------------------------------
    def row_sparse_pull(self, key: Any, out: Any = None, priority: int = 0, row_ids: Any = None) -> None:
        """Copy the rows ``row_ids`` of each key's stored value into row-sparse ``out``.

        ``out`` is a RowSparseTensor or a list of them (with a list of keys: one such entry per
        key); ``row_ids`` an integer Tensor or array (float arrays of whole numbers are
        accepted, as MXNet's examples use them), duplicates and any order allowed, or a list of
        them, one per out. Each out then holds exactly the sorted unique rows asked for, with
        the stored values; every other row is absent (zero).

        Raises:
            TypeError: an out that is not a RowSparseTensor, or row ids that are not arrays.
            ValueError: missing out or row_ids, an uninitialised key, a shape or dtype
                mismatch, row ids out of range or not whole numbers, or list lengths that
                disagree. Nothing is written unless every pair is valid.
        """
        if out is None or row_ids is None:
            raise ValueError(f"row_sparse_pull: key {key!r}: out and row_ids are both required")
        if isinstance(key, (list, tuple)):
            if not isinstance(row_ids, (list, tuple)) or len(row_ids) != len(key):
                got = len(row_ids) if isinstance(row_ids, (list, tuple)) else type(row_ids).__name__
                raise ValueError(f"row_sparse_pull: {len(key)} keys need a list of {len(key)} row_ids, got {got}")
            ids_per_key = list(row_ids)
        else:
            ids_per_key = [row_ids]
        pairs = self._pairs(key, out, "row_sparse_pull", name="out")
        plan = []
        for (k, outs), ids in zip(pairs, ids_per_key):
            stored = self._stored(k, "row_sparse_pull")
            for i, o in enumerate(outs):
                if not isinstance(o, sparse.RowSparseTensor):
                    raise TypeError(f"row_sparse_pull: key {k!r}: out {i} is a {type(o).__name__}, expected a "
                                    "RowSparseTensor (use pull for dense outs)")
            self._check_like(k, outs, stored, "row_sparse_pull", "out")
            if isinstance(ids, (list, tuple)):
                for r in ids:
                    self._rows_type(k, r)
                if len(ids) != len(outs):
                    raise ValueError(f"row_sparse_pull: key {k!r} has {len(outs)} outs but {len(ids)} row_ids")
                rows = [self._rows(k, r, stored.shape[0]) for r in ids]
            else:
                rows = [self._rows(k, ids, stored.shape[0])] * len(outs)
            plan.append((stored, outs, rows))
        for stored, outs, rows in plan:
            for o, r in zip(outs, rows):
                self._fill_rows(stored, o, r)

    @staticmethod
    def _rows_type(key: Key, ids: Any) -> None:
        if not (isinstance(ids, (Tensor, np.ndarray)) or hasattr(ids, "__cuda_array_interface__")):
            raise TypeError(f"row_sparse_pull: key {key!r}: row_ids must be a Tensor or an array (or a list of "
                            f"them, one per out), got {type(ids).__name__}")

    @staticmethod
    def _rows(key: Key, ids: Any, nrows: int) -> np.ndarray:
        """Sorted unique int64 row ids (host) from a Tensor or array of ids."""
        KVStore._rows_type(key, ids)
        host = ids.asnumpy() if isinstance(ids, Tensor) else _reduce.host(ids)
        host = np.asarray(host).reshape(-1)
        if not (np.issubdtype(host.dtype, np.integer) or np.issubdtype(host.dtype, np.floating)):
            raise ValueError(f"row_sparse_pull: key {key!r}: row_ids must be integers, got dtype {host.dtype}")
        if np.issubdtype(host.dtype, np.floating) and not np.all(np.isfinite(host) & (np.floor(host) == host)):
            raise ValueError(f"row_sparse_pull: key {key!r}: row_ids must be whole numbers, got {host.tolist()}")
        rows = np.unique(host.astype(np.int64))
        if rows.size and (rows[0] < 0 or rows[-1] >= nrows):
            raise ValueError(f"row_sparse_pull: key {key!r}: row_ids must lie in [0, {nrows}), got "
                             f"{rows[0]}..{rows[-1]}")
        return rows

    @staticmethod
    def _fill_rows(stored: Tensor, out: sparse.RowSparseTensor, rows: np.ndarray) -> None:
        home, dev = stored.device, out.device
        with home.use():
            picked = stored.array[home.xp.asarray(rows)]
        out.data = Tensor(copy_between(picked, home, dev, copy=False), dev)  # fancy indexing made a copy
        with dev.use():
            out.indices = Tensor(dev.xp.asarray(rows), dev)

    # -- optimizer ------------------------------------------------------------------------
    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Update stored values with ``optimizer`` on every push (its index is the key).

        With ``dist_*`` types every rank runs the optimizer on its own copy of the values
        (MXNet sends it to parameter servers); the copies stay identical.

        Raises:
            TypeError: ``optimizer`` is not an Optimizer.
            ValueError: the store is 'nccl' (reduce-only).
        """
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"set_optimizer expects an mx.optimizer.Optimizer, got {type(optimizer).__name__}; "
                            "build one with mx.optimizer.create(name, ...)")
        self._set_updater(get_updater(optimizer))

    def _set_updater(self, updater: Callable[[Key, Any, Any], None]) -> None:
        """Call ``updater(key, summed, stored)`` on every push instead of storing the sum.

        ``stored`` is the stored Tensor, to be changed in place (``stored += ...`` works);
        ``summed`` the pushed sum (a RowSparseTensor for row-sparse pushes).

        Raises:
            TypeError: ``updater`` is not callable.
            ValueError: the store is 'nccl' (reduce-only).
        """
        if self._type == "nccl":
            raise ValueError("kvstore 'nccl' only reduces (is_capable('optimizer') is False); use 'device' to update "
                             "values on the store, or update them yourself after pull")
        if not callable(updater):
            raise TypeError(f"the updater must be callable(key, summed, stored), got {type(updater).__name__}")
        self._updater = updater

    def _states_updater(self, what: str) -> Updater:
        if self._updater is None:
            raise RuntimeError(f"{what}: this KVStore has no optimizer; call set_optimizer first")
        if not isinstance(self._updater, Updater):
            raise RuntimeError(f"{what}: the updater set with _set_updater keeps no optimizer states; "
                               "use set_optimizer")
        return self._updater

    def save_optimizer_states(self, fname: str | os.PathLike, dump_optimizer: bool = False) -> None:
        """Write the optimizer states (and the optimizer when ``dump_optimizer``) and the residuals to ``fname``.

        The ``.npz`` layout is :mod:`mxlite.optimizer.states_archive`' (never pickled); the file is
        written to a temporary file and renamed, so a crash leaves any previous file intact.

        Raises:
            RuntimeError: no optimizer was set.
        """
        updater = self._states_updater("save_optimizer_states")
        residuals = {k: _reduce.host(r.array).astype(np.float32, copy=False) for k, r in self._residuals.items()}
        optimizer_state = updater.optimizer.state_dict() if dump_optimizer else None
        params = getattr(self._codec, "params", self._compression_params) if self._codec is not None else None
        data = states_archive.pack(updater.states, optimizer_state, residuals, states_archive.KVSTORE,
                                   {"compression": params})
        atomic_write(fname, lambda f: f.write(data))

    def load_optimizer_states(self, fname: str | os.PathLike) -> None:
        """Restore a :meth:`save_optimizer_states` file (or an ``Updater.get_states`` archive).

        Everything is checked before anything changes: the archive, the key types, the shapes
        of states and residuals of keys this store holds, and the optimizer section (same
        optimizer and scheduler classes). States move to each value's device at its next
        update, residuals at the next push.

        Raises:
            RuntimeError: no optimizer was set.
            FileNotFoundError: no such file.
            ValueError: a damaged, truncated or foreign file, or one that does not fit this
                store; the message names the file.
        """
        self._states_updater("load_optimizer_states")
        self.apply_optimizer_states(self.read_optimizer_states(None, fname))

    def read_optimizer_states(self, data: bytes | None, fname: str | os.PathLike) -> tuple[Any, Any, Any]:
        """Parse and check a states file against this store; changes nothing (ValueError names the file).

        The first half of :meth:`load_optimizer_states`; :meth:`apply_optimizer_states` is the second.
        ``data`` is the file's bytes when the caller has read (and verified) them already (the
        Trainer under ``mx.checkpoint.load``), else None: then ``fname`` is read, once.

        Raises:
            RuntimeError: the store has no optimizer (:meth:`set_optimizer` first), before any file is read.
            FileNotFoundError: no such file (``data`` None).
            ValueError: a damaged or foreign file, or states that do not fit this store.

        Returns ``(states, optimizer_state or None, residuals)``, for :meth:`apply_optimizer_states`.
        """
        updater = self._states_updater("load_optimizer_states")
        fname = os.fspath(fname)
        if data is None:
            with open(fname, "rb") as f:
                data = f.read()
        try:
            states, optimizer_state, residuals, _ = states_archive.unpack(data, states_archive.KVSTORE)
            for k, state in states.items():
                self._check_saved(k, states_archive.state_arrays(state), "the optimizer state")
            for (k, pos), r in residuals.items():
                self._check_saved(k, [r], f"the residual of position {pos}")
            if optimizer_state is not None:
                updater.optimizer.check_state_dict(optimizer_state)
        except ValueError as exc:
            raise ValueError(f"cannot load KVStore optimizer states from {fname!r}: {exc}") from exc
        return states, optimizer_state, residuals

    def apply_optimizer_states(self, parsed: tuple[Any, Any, Any]) -> None:
        """Install what :meth:`read_optimizer_states` parsed and checked; reads no file (cannot fail).

        The Trainer applies states it read and verified earlier (``mx.checkpoint.load``) through
        this, so nothing is read again after the checks.
        """
        states, optimizer_state, residuals = parsed
        updater = self._states_updater("load_optimizer_states")  # present: read_optimizer_states checked it
        if optimizer_state is not None:
            updater.optimizer.load_state_dict(optimizer_state)  # checked by read_optimizer_states
        updater.states = states
        updater.states_synced = dict.fromkeys(states, False)
        self._residuals = {k: Tensor(r, cpu(0)) for k, r in residuals.items()}

    def _check_saved(self, key: Key, arrays: list[Any], what: str) -> None:
        (key,) = self._keys_kind([key], "load_optimizer_states")
        stored = self._store.get(key)
        if stored is None:
            return  # kept for a key initialised later
        for a in arrays:
            if tuple(a.shape) != stored.shape:
                raise ValueError(f"{what} of key {key!r} has shape {tuple(a.shape)}, the stored value has shape "
                                 f"{stored.shape}")

    # -- gradient compression -------------------------------------------------------------
    def set_gradient_compression(self, compression_params: dict[str, Any] | None) -> None:
        """Compress dense pushes with ``mxlite.comm.compression.create(compression_params)``.

        E.g. ``{'type': '2bit', 'threshold': 0.5}``; None turns compression off. As in MXNet,
        only 'device' and ``dist_*`` stores compress. Residuals (error feedback) are kept per
        key and push position and survive a change of codec.

        Raises:
            ValueError: a 'local' or 'nccl' store, or bad parameters (from the codec).
            TypeError: parameters that are not a dict (from the codec).
        """
        if "device" not in self._type and "dist" not in self._type:
            raise ValueError(f"gradient compression is not supported by kvstore {self._type!r}; as in MXNet only "
                             "'device' and 'dist_*' stores compress (create the store with 'device')")
        compression = importlib.import_module("mxlite.comm.compression")
        self._codec = compression.create(compression_params)
        self._compression_params = None if self._codec is None else dict(compression_params or {})


