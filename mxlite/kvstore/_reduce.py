"""The sums behind ``KVStore.push``: dense and row-sparse, over a value list and over processes.

Every sum has a fixed order, so repeated runs and every rank get the same bits:

* the values of one push are added in list order on the stored value's device
  (``((v0 + v1) + v2) + ...``), whatever devices they come from;
* row-sparse values are merged pairwise in list order (each output row then receives at most
  two terms per merge, so even an atomic scatter-add on a GPU cannot reorder a sum);
* across processes, row-sparse sums are gathered and added on the host in rank order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..comm.base import Communicator
from ..device import Device
from ..device.copy import as_host, copy_between
from ..ops import sparse

__all__ = ["dense_sum", "row_sparse_sum", "allgather_row_sparse", "host"]


def host(array: Any) -> np.ndarray:
    """A NumPy view or copy of a NumPy or CuPy array (read after its device's queued writes)."""
    return as_host(array)


def copy_to(value: Tensor, device: Device) -> Any:
    """A C-contiguous copy of ``value``'s data on ``device`` (never shares memory with it)."""
    data = copy_between(value.array, value.device, device, copy=True)
    with device.use():
        return device.xp.ascontiguousarray(data)


def dense_sum(values: Sequence[Tensor], home: Device) -> Any:
    """``values[0] + values[1] + ...`` in list order, as a new C-contiguous array on ``home``."""
    total = copy_to(values[0], home)
    with home.use():
        for v in values[1:]:
            total += copy_between(v.array, v.device, home, copy=False)
    return total


def _row_sparse_on(value: sparse.RowSparseTensor, device: Device) -> sparse.RowSparseTensor:
    """A copy of ``value`` on ``device``."""
    return sparse.RowSparseTensor(value.data.copyto(device), value.indices.copyto(device), value.shape)


def row_sparse_sum(values: Sequence[sparse.RowSparseTensor], home: Device) -> sparse.RowSparseTensor:
    """The row-sparse sum of ``values`` (merged pairwise in list order) on ``home``."""
    total = _row_sparse_on(values[0], home)
    for v in values[1:]:
        total = sparse.add_any(total, _row_sparse_on(v, home), total.shape)
    return total


def allgather_row_sparse(comm: Communicator, value: sparse.RowSparseTensor) -> sparse.RowSparseTensor:
    """The row-sparse sum of every process's ``value``, added in rank order (same bits on every rank).

    Three collectives: the row counts, then the row ids and the rows, each padded to the
    largest count (NCCL's allgather needs equal sizes; MPI's would not).
    """
    device, shape = value.device, value.shape
    tail = tuple(shape[1:])
    k = int(value.indices.size)
    xp = device.xp
    with device.use():
        counts = [int(c[0]) for c in comm.allgather(xp.asarray(np.array([k], np.int64)))]
        kmax = max(counts)
        ids = xp.zeros(kmax, np.int64)
        rows = xp.zeros((kmax,) + tail, value.dtype)
        ids[:k] = value.indices.array
        rows[:k] = value.data.array
        all_ids = comm.allgather(ids)
        all_rows = comm.allgather(rows.reshape(-1))
    ids_host = np.concatenate([g[:n] for g, n in zip(all_ids, counts)])
    rows_host = np.concatenate([g.reshape((kmax,) + tail)[:n] for g, n in zip(all_rows, counts)])
    uniq, inverse = np.unique(ids_host, return_inverse=True)
    merged = np.zeros((uniq.size,) + tail, dtype=value.dtype)
    np.add.at(merged, inverse.reshape(-1), rows_host)  # np.add.at adds in index order: rank order
    src = Device("cpu", 0)
    return sparse.RowSparseTensor(Tensor(copy_between(merged, src, device, copy=False), device),
                                  Tensor(copy_between(uniq.astype(np.int64), src, device, copy=False), device), shape)
